"""The one place user-supplied text is made inert before it reaches a page.

Streamlit renders Markdown in titles, captions, alerts and markdown elements: an uploaded rid
like `![x](http://host/p.png)` would make every viewer's browser fetch that URL. `esc_md`
backslash-escapes every character Markdown (and Streamlit's `:color[...]` and `$math$`) gives a
meaning, so the text shows as typed; `esc_html` does the same for plotly's hover and titles, which
read a few HTML tags; `safe_filename` keeps a download name to plain characters. Leaves out: the
tree view (the browser sets its labels as text, never as HTML) and st.dataframe / st.code /
st.text, which show text as text.
"""

from __future__ import annotations

import html
import re

MD_SPECIAL = set("\\`*_{}[]()#+-.!|<>~$:=&\"'")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def esc_md(text: object) -> str:
    r"""Markdown-inert text: every special character backslash-escaped; newlines become spaces
    (one line in, one line out; a URL loses its autolink with its colon escaped).

    >>> print(esc_md("![x](http://h/p.png)"))
    \!\[x\]\(http\://h/p\.png\)
    """
    s = str(text).replace("\r", " ").replace("\n", " ")
    return "".join("\\" + ch if ch in MD_SPECIAL else ch for ch in s)


def esc_html(text: object) -> str:
    """Text for plotly titles and hovers: &, <, > and quotes as entities.

    >>> esc_html('<a href="x">')
    '&lt;a href=&quot;x&quot;&gt;'
    """
    return html.escape(str(text), quote=True)


def safe_filename(name: str, default: str = "trace") -> str:
    """A download name of letters, digits, '.', '_' and '-' only (at most 80 characters).

    >>> safe_filename("../../etc/pass wd![x].jsonl")
    '.._.._etc_pass_wd_x_.jsonl'
    """
    out = _UNSAFE_NAME.sub("_", name).strip("_")[:80]
    return out or default
