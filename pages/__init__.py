"""The app's pages (app.py lists them in its menu with `st.navigation`).

subtle: with a folder named `pages/` beside app.py, Streamlit's first session runs in its legacy
multipage mode (each file here served by itself, without app.py's menu and presenter toggle)
until some session has called `st.navigation`. Whatever script runs first imports this package,
so here the legacy mode is switched off and that one run starts again, now through app.py.
"""

from __future__ import annotations

from streamlit.runtime.pages_manager import PagesManager

if PagesManager.uses_pages_directory:
    import streamlit as st

    PagesManager.uses_pages_directory = False
    st.rerun()
