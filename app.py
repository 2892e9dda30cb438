"""RadixLens: `streamlit run app.py`. One page per question; the pages live in pages/."""

from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="RadixLens", layout="wide")
PAGES = [
    st.Page("pages/tour.py", title="Tour: three requests", url_path="tour", default=True),
    st.Page("pages/trace.py", title="Trace debugger", url_path="trace"),
]
st.navigation(PAGES).run()
