"""A radix-tree snapshot as Graphviz DOT, with ids that stay put so d3-graphviz can animate.

Follows SGLang's RadixCache picture: the tokens live on the edge into a node (a node's `key`),
so each edge is labelled with its token count and a decoded preview; each node shows its
`lock_ref` (r=N); evictable leaves (lock_ref 0, no children) are dashed and green. Node `n<id>`
and edge `e<child id>` keep their DOT ids across snapshots, so a split morphs the old edge and
grows the new one instead of re-laying out. Leaves out: page boundaries inside an edge.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Decode = Callable[[list[int]], str]

# Highlight roles for one micro-event: role -> (pen colour, pen width).
ROLES: dict[str, tuple[str, float]] = {
    "matched": ("#1f77b4", 2.5),  # on the path a match walked
    "split": ("#ff7f0e", 3.0),  # a node that split, and its new prefix node
    "new": ("#2ca02c", 3.0),  # a leaf that was just inserted
    "lock": ("#9467bd", 3.0),  # a hop of a lock walk (inc/dec_lock_ref)
    "evicted": ("#d62728", 3.0),  # a leaf popped by evict
    "selected": ("#000000", 2.5),  # the node the user clicked
}
FILL_PROTECTED = "#dbe8f6"  # lock_ref > 0: in use by a running request
FILL_EVICTABLE = "#e3f4e1"  # an evictable leaf
FILL_CACHED = "#ffffff"  # cached, not a leaf (or locked below)


def _quote(text: str) -> str:
    """A DOT double-quoted string: escapes backslash, quote and newlines (as \\n)."""
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + out.replace("\r", "").replace("\n", "\\n") + '"'


def token_preview(token_ids: Sequence[int], decode: Decode | None, max_chars: int = 22) -> str:
    """A short, one-line preview of the first tokens of an edge.

    >>> token_preview([5, 6, 7, 8], None, max_chars=8)
    '[5 6 7…]'
    """
    if not token_ids:
        return ""
    head = list(token_ids[: max_chars + 2])
    if decode is None:
        text = " ".join(str(t) for t in head)
        cut = text[: max_chars - 2].rsplit(" ", 1)[0] if len(text) > max_chars - 2 else text
        more = "…" if cut != text or len(token_ids) > len(head) else ""
        return f"[{cut}{more}]"
    text = " ".join(decode(head).split())  # newlines and runs of spaces read as one space
    more = len(token_ids) > len(head) or len(text) > max_chars
    return repr(text[:max_chars] + ("…" if more else ""))


def _node_attrs(node: Any, role: str | None) -> dict[str, str]:
    if node.parent is None:
        label = "root"
    else:
        label = f"#{node.id}  r={node.lock_ref}"
    style = ["filled", "rounded"]
    if node.lock_ref > 0:
        fill = FILL_PROTECTED
    elif node.evictable_leaf:
        fill, style = FILL_EVICTABLE, style + ["dashed"]
    else:
        fill = FILL_CACHED
    color, width = ROLES.get(role, ("#555555", 1.0)) if role else ("#555555", 1.0)
    tooltip = f"node {node.id}: {len(node.token_ids):,} tokens, lock_ref {node.lock_ref}"
    return {
        "id": f"n{node.id}", "label": label, "style": ",".join(style), "fillcolor": fill,
        "color": color, "penwidth": f"{width:g}", "tooltip": tooltip,
    }


def _edge_attrs(node: Any, role: str | None, decode: Decode | None) -> dict[str, str]:
    n = len(node.token_ids)
    label = f"{n:,} tok\n{token_preview(node.token_ids, decode)}"
    color, width = ROLES.get(role, ("#777777", 1.2)) if role else ("#777777", 1.2)
    return {"id": f"e{node.id}", "label": label, "color": color, "penwidth": f"{width:g}"}


def _attr_list(attrs: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())


def tree_to_dot(
    snapshot: Any,
    *,
    decode: Decode | None = None,
    highlight: Mapping[int, str] | None = None,
    rankdir: str = "TB",
) -> str:
    """The DOT of a `TreeSnapshot`; `highlight` maps node id -> a role of `ROLES`.

    A root with one 3-token child:
    `tree_to_dot(snap)` has `"n0" [id="n0", label="root", ...]`, `"n1" [...label="#1  r=0"...]`
    and `"n0" -> "n1" [id="e1", label="3 tok\\n[1 2 3]", ...]`.
    """
    if rankdir not in ("TB", "LR"):
        raise ValueError(f"rankdir must be 'TB' or 'LR', got {rankdir!r}")
    highlight = highlight or {}
    for role in highlight.values():
        if role not in ROLES:
            raise ValueError(f"unknown highlight role {role!r}; known: {sorted(ROLES)}")
    lines = [
        "digraph radix {",
        f'  graph [rankdir={rankdir}, nodesep=0.25, ranksep=0.35, bgcolor="transparent"];',
        '  node [shape=box, fontname="DejaVu Sans", fontsize=11, height=0.3, margin="0.08,0.03"];',
        '  edge [fontname="DejaVu Sans", fontsize=9, arrowsize=0.6];',
    ]
    for node in snapshot.nodes:
        role = highlight.get(node.id)
        lines.append(f'  "n{node.id}" [{_attr_list(_node_attrs(node, role))}];')
        if node.parent is not None:
            attrs = _edge_attrs(node, role, decode)
            lines.append(f'  "n{node.parent}" -> "n{node.id}" [{_attr_list(attrs)}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_to_svg(dot: str, timeout_s: float = 30.0) -> str:
    """Lays out DOT with Graphviz's `dot` program (for downloads); RuntimeError if it is missing."""
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("Graphviz `dot` is not installed (apt-get install graphviz)")
    done = subprocess.run(
        [exe, "-Tsvg"], input=dot, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"dot failed: {done.stderr.strip()[:300]}")
    return done.stdout
