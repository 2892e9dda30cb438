"""RadixLens: `streamlit run app.py`. One page per question; the pages live in pages/."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent
# (file, title, url path), in menu order; a page whose file is absent is left out of the menu
PAGE_SPECS = [
    ("pages/tour.py", "Tour: three requests", "tour"),
    ("pages/live.py", "Live engine", "live"),
    ("pages/eviction.py", "Eviction lab", "eviction"),
    ("pages/scheduler.py", "Scheduler", "scheduler"),
    ("pages/trace.py", "Trace debugger", "trace"),
    ("pages/configs.py", "Configurations", "configs"),
    ("pages/watch.py", "Watch a server", "watch"),
]

st.set_page_config(page_title="RadixLens", layout="wide")
pages = [
    st.Page(path, title=title, url_path=url, default=(url == "tour"))
    for path, title, url in PAGE_SPECS
    if (HERE / path).exists()
]
st.navigation(pages, position="top").run()
