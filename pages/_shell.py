"""What every page shares: presenter mode, deep-link parameters, escaped messages.

Presenter mode (a toggle above every page, kept in the URL as `presenter=1`) sets larger type,
tighter margins and taller pictures, and hides long captions, so the tree and the block view stay
above the fold on a 1280x800 projector. `say` is the pages' one way to put text that may hold
user strings into an alert or caption: it escapes it (viz/escape.py). Streamlit's running
indicator is moved to the bottom right corner (in the header it covered the toggle while a page
ran). `shell` also runs the
sweep of pages/_serve.py. Not a page: app.py does not list it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from pages._serve import sweep
from viz.escape import esc_md

PRESENTER_CSS = """<style>
html { font-size: 18px; }
.stMainBlockContainer { padding-top: 3.6rem !important; padding-bottom: 1rem !important; }
h1 { font-size: 1.6rem !important; padding: 0 !important; }
h2, h3 { font-size: 1.25rem !important; }
[data-testid="stMetricValue"] { font-size: 1.6rem !important; }
</style>"""
SHARED_CSS = """<style>
[data-testid="stMetricLabel"] * { white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; }
[data-testid="stMetricValue"] * { overflow: visible !important; text-overflow: clip !important;
  white-space: normal !important; }
.st-key-shell-presenter { position: fixed; top: 0.6rem; right: 8.5rem; z-index: 999991;
  width: auto !important; }
[data-testid="stStatusWidget"] { position: fixed; top: auto; bottom: 0.5rem; right: 0.5rem;
  z-index: 999990; background: white; border-radius: 0.5rem; padding: 0 0.25rem;
  box-shadow: 0 0 0.3rem rgba(0, 0, 0, 0.25); }
</style>"""


def session_id() -> str:
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "bare"


def presenter() -> bool:
    """Presenter mode is on (the toggle, or `presenter=1` in the URL)."""
    return bool(st.session_state.get("shell.presenter"))


def _set_presenter() -> None:
    if st.session_state.get("shell.presenter"):
        st.query_params["presenter"] = "1"
    else:
        st.query_params.pop("presenter", None)


def shell() -> None:
    """The toggle and the styles, above every page; called by app.py before the page runs."""
    if "shell.presenter" not in st.session_state:
        st.session_state["shell.presenter"] = st.query_params.get("presenter") == "1"
    elif presenter() and st.query_params.get("presenter") != "1":
        st.query_params["presenter"] = "1"  # a menu click dropped it: keep it in the URL
    st.html(SHARED_CSS + (PRESENTER_CSS if presenter() else ""))
    with st.container(key="shell-presenter"):  # pinned into the header bar by SHARED_CSS
        st.toggle("presenter mode", key="shell.presenter", on_change=_set_presenter,
                  help="Larger type, pictures first; kept in the URL (presenter=1)")
    sweep()


def say(kind: str, text: Any, bold: str = "", **kw: Any) -> None:
    """st.<kind>(text) with the text escaped: kind is info, error, warning, success, caption,
    markdown, subheader or header. `bold`: a lead-in shown in bold before it (escaped too:
    "**" written into `text` would show as two asterisks)."""
    lead = f"**{esc_md(bold)}** " if bold else ""
    getattr(st, kind)(lead + esc_md(text), **kw)


def say_list(items: list[Any], where: Any = None, empty: str = "") -> None:
    """A bulleted list (Markdown), each item escaped: "- " written into `say`'s text would show
    as a literal "- " and the items run together in one paragraph (issue 41 item 8)."""
    where = st if where is None else where
    if not items:
        if empty:
            where.markdown(esc_md(empty))
        return
    where.markdown("\n".join(f"- {esc_md(x)}" for x in items))


def long_caption(text: str) -> None:
    """A caption that presenter mode leaves out (the lecturer says it)."""
    if not presenter():
        st.caption(text)


def tree_height(normal: int) -> int:
    """The tree view's height: taller in presenter mode, but inside 800 px with the page."""
    return int(normal * 1.15) if presenter() else normal


ALERT_LINE_PX = 27  # one more line of an st.info in presenter mode (18 px type), measured
ALERT_LINE_CHARS = 120  # characters on one such line at 1280 px: fewer than seen (~140), to be safe


def below_alert_px(px: int, text: str) -> int:
    """A picture's height under an alert saying `text`: in presenter mode `px` less one alert
    line (27 px) for each line past two, so that a page laid out for a two-line alert keeps
    what is under its pictures above the fold at 1280x800; `px` otherwise. The Tour's 439-char
    split sentence wraps to ceil(439 / 120) = 4 lines: 385 - 2 x 27 = 331 px."""
    if not presenter():
        return px
    lines = -(-len(text) // ALERT_LINE_CHARS)
    return px - ALERT_LINE_PX * max(0, lines - 2)


def tier_tree_height() -> int:
    """The host tier's tree view (the Eviction lab's section, the Tour's walk): 300 px, 240 in
    presenter mode, where the walk's deepest tree (root and two levels, 134 scene units) fits at
    14 px labels: (134 + 16) x 14 / 9 = 233 px (220 panned it, #24 item 4). Its trees have 4
    nodes at most, each a tier move to watch: a taller view, not a fold."""
    return 240 if presenter() else 300


def max_scale() -> float:
    """How far the tree view may scale a small tree up: more in presenter mode."""
    return 2.4 if presenter() else 1.5


def min_font_px() -> float:
    """The tree view's smallest label on screen: 14 px on a projector (a page folds a bigger
    tree to fit, presenter_fit; what still does not fit is shown around what is
    highlighted and pans), else 0 (the whole tree fits, however small)."""
    return 14.0 if presenter() else 0.0


PRESENTER_PAGE_PX = 1100  # the page's content width on a 1280 px projector (wide layout)
COLUMN_GAP_PX = 16  # between st.columns


def presenter_tree_px(share: float, height: int) -> tuple[float, float] | None:
    """Presenter mode: the tree view's size in px when its column takes `share` of the page's
    width and it is `height` px tall (what fit_tree_scene folds to); None otherwise. A wider
    projector folds more than it needs; a narrower one pans (the view keeps 14 px labels)."""
    if not presenter():
        return None
    return (PRESENTER_PAGE_PX - COLUMN_GAP_PX) * share, float(height)


def presenter_fit(share: float, height: int) -> tuple[float, float, float] | None:
    """Presenter mode: (width px, height px, smallest label px) of a tree view in a column
    taking `share` of the page, for the scene builders that fold to fit (fit_tree_scene);
    None otherwise."""
    box = presenter_tree_px(share, height)
    return None if box is None else (*box, min_font_px())


def link_int(name: str, default: int, lo: int, hi: int) -> int:
    """An int URL parameter clamped to lo..hi (default when absent or not a number)."""
    raw = st.query_params.get(name)
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        value = default
    return max(lo, min(hi, value))
