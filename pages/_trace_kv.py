"""The Trace debugger's view of a KV-event recording: the fold, the final pool and its tree.

Not a page (app.py does not list it): pages/_trace_view.py calls `show_kv_recording` for a
recording. Per source, the table of viz/recording.py, then the block grid and the prefix tree
viz/cluster.py draws for a watched worker (the same pictures as the Watch page).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from pages._shell import say
from viz.cluster import grid_caption, prefix_tree_scene
from viz.component import tree_view
from viz.escape import esc_md
from viz.recording import recording_rows, recording_text
from viz.trace import kv_events_summary
from viz.watch_charts import chart_height, worker_grid_chart


def show_kv_recording(r: Any) -> None:
    say("subheader", f"{r.name}: a KV-events recording")
    say("info", kv_events_summary(r.trace))
    fold = r.recording
    say("caption", recording_text(fold))
    st.dataframe(recording_rows(fold), hide_index=True)
    for i, source in enumerate(fold.sources):
        view = source.view
        st.markdown(f"**{esc_md(view.name)}**: the pool at the end of the recording")
        say("caption", grid_caption(view))
        grid = worker_grid_chart(view)
        st.echarts_chart(grid, key=f"trace.kv_grid.{i}", height=chart_height(grid),
                         renderer="svg")
        if view.runs:
            tree_view(prefix_tree_scene(view), key=f"trace.kv_tree.{i}", height=360,
                      duration_ms=0)
