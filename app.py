"""RadixLens: `streamlit run app.py`. One page per question; the pages live in pages/ (its
`__init__.py` keeps Streamlit's legacy reading of that folder off). Every page has its
own URL (/tour, /live, ...); `/?page=tour&step=7` is a deep link too: the hidden home page sends
it on with its other parameters. The presenter toggle (larger type, pictures first) sits above
every page and is kept in the URL (`presenter=1`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

from pages._shell import shell

HERE = Path(__file__).parent
# (file, title, url path), in menu order; a page whose file is absent is left out of the menu
PAGE_SPECS = [
    ("pages/tour.py", "Tour", "tour"),
    ("pages/live.py", "Live engine", "live"),
    ("pages/eviction.py", "Eviction lab", "eviction"),
    ("pages/scheduler.py", "Scheduler", "scheduler"),
    ("pages/trace.py", "Trace debugger", "trace"),
    ("pages/configs.py", "Configurations", "configs"),
    ("pages/watch.py", "Watch a server", "watch"),
    ("pages/classroom.py", "Classroom", "classroom"),
    ("pages/cluster.py", "Cluster", "cluster"),
]

# The Live and Classroom model engines run in processes of their own (engine/procservice.py);
# here a thread per engine hands their events to the page, and simulated rooms run their loop
# on a thread. When a model engine ran here, each of a forward's hundreds of short torch ops
# took the GIL back, waiting up to the switch interval (5 ms by default) behind a busy page
# thread; kept short for the threads that remain.
ENGINE_SWITCH_S = 0.0005
if sys.getswitchinterval() > ENGINE_SWITCH_S:
    sys.setswitchinterval(ENGINE_SWITCH_S)
st.set_page_config(page_title="RadixLens", layout="wide")
pages = {url: st.Page(path, title=title, url_path=url)
         for path, title, url in PAGE_SPECS if (HERE / path).exists()}


def _home() -> None:
    """`/` and `/?page=X&...`: on to page X (the Tour by default), keeping the parameters."""
    params = st.query_params.to_dict()
    target = pages.get(params.pop("page", "tour"), pages["tour"])
    st.switch_page(target, query_params=params)


home = st.Page(_home, title="RadixLens", url_path="home", default=True, visibility="hidden")
page = st.navigation([home, *pages.values()], position="top")
shell()
page.run()
