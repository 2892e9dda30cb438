"""vLLM's block pool as a picture and in words: one grid for every page, hash chains, the queue.

Reads `BlockPoolSnapshot`s (radix/blocks/snapshot.py); never touches a pool. The grid is one
plotly heatmap cell per block in block-id order, `columns` to a row, coloured by state (in use,
cached and free, unreachable, free, and "taken now" for blocks a new request just popped), one
colour table for every page; hover shows block id, ref_cnt, short hash, chain position, parent,
free-queue position and owners; the selected request's chain is outlined. Follows vLLM v1 for
chains: block i of a request is hashed over (block i-1's hash, its tokens, extra keys); a lookup
walks the chain from block 0 and stops at the first hash not cached, or before the block holding
the prompt's last token. Leaves out: blocks past `MAX_DRAWN_BLOCKS` (counted in the caption).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

import plotly.graph_objects as go

from radix.blocks.hashing import hash_request_tokens, hash_to_int64
from viz.escape import esc_html

STATES = ("in_use", "cached_free", "unreachable", "free", "taken")  # code = index
STATE_LABELS = {"in_use": "in use (ref_cnt > 0)", "cached_free": "cached, free (evictable)",
                "unreachable": "unreachable (chain broken above)", "free": "free (no hash)",
                "taken": "taken now (its hash dropped)"}
SHORT_LABELS = {"in_use": "in use", "cached_free": "cached, free", "unreachable": "unreachable",
                "free": "free", "taken": "taken now"}
STATE_COLORS = {"in_use": "#4c78a8", "cached_free": "#54a24b", "unreachable": "#f58518",
                "free": "#e6e6e6", "taken": "#e45756"}
LEGEND_PX = 13  # legends and titles stay readable on a projector (>= 12 px)
CHAIN_TRACE = "hash chain"  # legend name of the outlined chain
MAX_DRAWN_BLOCKS = 4_096  # cells drawn at most (the rest are counted in the caption)
MIN_DRAWN_BLOCKS = 64  # an idle pool still draws a few rows


def short_hash(h: int | None) -> str:
    """The first 8 hex digits of the 64-bit hash, as vLLM's KV events carry it.

    >>> short_hash(0x1234_5678_9abc_def0), short_hash(None)
    ('12345678', '-')
    """
    return "-" if h is None else f"{h:016x}"[:8]


def hover_lines(b: Any, state: str | None = None, holds: str | None = None,
                esc: Any = str) -> list[str]:
    """One block's hover as lines: `b` is a BlockState; `state` overrides its state ("taken"),
    `holds` says what it caches; `esc` escapes the strings that come from uploads (owners,
    holds). Five lines: what and state; ref_cnt and hash; chain position and parent; free queue
    position; owners."""
    owners = esc(", ".join(b.owners)) if b.owners else "-"
    what = f" ({esc(holds)})" if holds else ""
    return [f"block #{b.id}{what}: {STATE_LABELS[state or b.state]}",
            f"ref_cnt {b.ref_cnt}, hash {short_hash(b.hash)}",
            f"chain position {'-' if b.chain_pos is None else b.chain_pos}, parent block "
            f"{'-' if b.parent is None else '#' + str(b.parent)}",
            f"free queue position {'-' if b.free_pos is None else b.free_pos} (0 = evicted "
            "next)", f"owners {owners}"]


def hover_text(b: Any, state: str | None = None, holds: str | None = None) -> str:
    """One block's plotly hover: hover_lines joined by <br>, text from uploads escaped (plotly
    reads a few HTML tags)."""
    return "<br>".join(hover_lines(b, state, holds, esc_html))


def drawn_blocks(snap: Any, max_blocks: int = MAX_DRAWN_BLOCKS) -> tuple[Any, ...]:
    """Blocks 1 .. the last one that is not plain free, at least MIN_DRAWN_BLOCKS, capped.

    A 433-block pool (432 + the null block) holding blocks 1..135: 135 drawn.
    """
    last = max((i for i, b in enumerate(snap.blocks) if b.state != "free"), default=-1) + 1
    n = min(len(snap.blocks), max(last, MIN_DRAWN_BLOCKS), max_blocks)
    return snap.blocks[:n]


def cell_states(snap: Any, taken: Collection[int] = ()) -> list[str]:
    """One state per block, by id; blocks in `taken` read 'taken'.

    >>> from radix.blocks.pool import BlockPool; from radix.blocks.snapshot import take_snapshot
    >>> cell_states(take_snapshot(BlockPool(4), {}, 0), {2})
    ['free', 'taken', 'free']
    """
    return ["taken" if b.id in taken else b.state for b in snap.blocks]


def state_counts(snap: Any, taken: Collection[int] = ()) -> dict[str, int]:
    """Blocks per state, every state present (the null block is not counted)."""
    counts = dict.fromkeys(STATES, 0)
    for state in cell_states(snap, taken):
        counts[state] += 1
    return counts


def grid_cells(blocks: Sequence[Any], columns: int, taken: Collection[int] = (),
               labels: Mapping[int, str] | None = None) -> tuple[list, list]:
    """Rows of state codes (None past the end) and hover texts, row 0 = blocks 1..columns."""
    z: list[list[int | None]] = []
    text: list[list[str]] = []
    labels = labels or {}
    for start in range(0, len(blocks), columns):
        row = blocks[start:start + columns]
        pad = columns - len(row)
        states = ["taken" if b.id in taken else b.state for b in row]
        z.append([STATES.index(s) for s in states] + [None] * pad)
        text.append([hover_text(b, s, labels.get(b.id)) for b, s in zip(row, states)]
                    + [""] * pad)
    return z, text


def _colorscale() -> list[list]:
    """A stepped scale: code i fills [i/4, (i+1)/4) with STATE_COLORS[STATES[i]]."""
    scale = []
    for i, state in enumerate(STATES):
        scale += [[i / len(STATES), STATE_COLORS[state]], [(i + 1) / len(STATES),
                                                           STATE_COLORS[state]]]
    return scale


def block_grid_figure(snap: Any, columns: int = 32, chain_ids: Collection[int] = (),
                      stop_text: str | None = None, max_blocks: int = MAX_DRAWN_BLOCKS,
                      taken: Collection[int] = (), labels: Mapping[int, str] | None = None,
                      legend_px: int = LEGEND_PX) -> go.Figure:
    """The grid; `chain_ids` (block ids of the selected request's chain) are outlined in black,
    `stop_text` is the title line (where its lookup stopped), `taken` marks blocks a new request
    just popped, `labels` says what each block holds (hover)."""
    blocks = drawn_blocks(snap, max_blocks)
    z, text = grid_cells(blocks, columns, taken, labels)
    present = set(cell_states(snap, taken))
    fig = go.Figure(go.Heatmap(
        z=z, text=text, hovertemplate="%{text}<extra></extra>", colorscale=_colorscale(),
        zmin=-0.5, zmax=len(STATES) - 0.5, showscale=False, xgap=1, ygap=1))
    for state in (s for s in STATES if s in present or s != "taken"):
        # legend entries (a heatmap has none); hover has the long labels
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=SHORT_LABELS[state],
                                 legendgroup=state, marker={"symbol": "square", "size": 11,
                                         "color": STATE_COLORS[state]}))
    index = {b.id: i for i, b in enumerate(blocks)}
    cells = [index[i] for i in chain_ids if i in index]
    if cells:
        fig.add_trace(go.Scatter(
            x=[c % columns for c in cells], y=[c // columns for c in cells], mode="markers",
            name=CHAIN_TRACE, hoverinfo="skip",
            marker={"symbol": "square-open", "size": 9, "color": "#000000",
                    "line": {"width": 1.5}}))
    rows = len(z)
    fig.update_layout(
        height=max(200, 110 + 16 * rows), margin={"l": 48, "r": 10, "t": 34, "b": 10},
        title={"text": esc_html(stop_text or ""), "font": {"size": legend_px}},
        legend={"orientation": "h", "y": 0, "yanchor": "top", "font": {"size": legend_px}},
        plot_bgcolor="#ffffff")
    fig.update_xaxes(visible=False, range=[-0.5, columns - 0.5])
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(rows)),
                     ticktext=[f"#{1 + r * columns}" for r in range(rows)], tickfont={"size": 12},
                     showgrid=False, zeroline=False)
    return fig


def grid_caption(snap: Any, max_blocks: int = MAX_DRAWN_BLOCKS,
                 chain_ids: Collection[int] = (), taken: Collection[int] = ()) -> str:
    """One line: counts per state, and what was left out of the drawing (chain blocks too)."""
    counts = state_counts(snap, taken)
    n = len(drawn_blocks(snap, max_blocks))
    parts = [f"{counts[s]:,} {SHORT_LABELS[s]}" for s in STATES if s != "taken" or counts[s]]
    left = len(snap.blocks) - n
    tail = f"; blocks #{n + 1:,}..#{len(snap.blocks):,} not drawn" if left else ""
    hidden = sum(1 for i in chain_ids if i > n)
    if hidden:
        tail += f" ({hidden:,} of the chain's {len(chain_ids):,} blocks among them)"
    return (f"{len(snap.blocks):,} blocks of {snap.block_size} tokens: " + ", ".join(parts)
            + tail + ".")


REASONS = {  # LookupRecord.reason -> why the walk stopped there
    "miss": "miss: its hash is not cached (its tokens differ from every cached chain)",
    "cap": "cap: the block holding the prompt's last token is always recomputed",
    "partial": "partial: the block is not full, so it has no hash",
    "disabled": "prefix caching is off",
}


class ChainLink(NamedTuple):
    index: int  # block index in the request: tokens index*16 .. index*16+15
    hash: int  # low 64 bits of the block's chained hash
    block_id: int | None  # the block cached under that hash now; None when not cached
    state: str | None  # that block's state (BlockState.state); None when not cached


def request_chain(snap: Any, token_ids: Sequence[int], extra_key: str | None = None,
                  cache_salt: str | None = None, hash_algo: Any = "radixlens") -> list[ChainLink]:
    """One link per full block of `token_ids`, matched against the snapshot's hashes (hashed
    as the pool hashed them: `hash_algo`, a HASH_ALGOS name or a BlockHasher).

    >>> from radix.blocks.pool import BlockPool; from radix.blocks.snapshot import take_snapshot
    >>> [link.block_id for link in request_chain(take_snapshot(BlockPool(3, 4), {}, 0), range(9))]
    [None, None]
    """
    by_hash: dict[int, Any] = {}
    for b in snap.blocks:  # by id: the lowest id wins a duplicate hash
        if b.hash is not None:
            by_hash.setdefault(b.hash, b)
    hashes = hash_request_tokens(list(token_ids), snap.block_size, extra_key, cache_salt,
                                 hash_algo=hash_algo)
    links = []
    for i, h in enumerate(hashes):
        low = hash_to_int64(h)
        b = by_hash.get(low)
        links.append(ChainLink(i, low, None if b is None else b.id, None if b is None else b.state))
    return links


def lookup_line(record: Any, block_size: int, tree_hit: int | None = None) -> str:
    """Where a lookup stopped and why; with the tree's match, the shared tokens re-prefilled.

    R2 of the walk: 128 blocks x 16 = 2,048 hit; block 128 (tokens 2,048..2,063) mixes 7 shared
    tokens (2,048..2,054) with R2's own, so it misses; the tree matched 2,055 = 2,048 + 7.
    """
    start = record.stop_block * block_size
    line = (f"{record.rid}: lookup hit {record.hit_blocks:,} blocks ({record.hit_tokens:,} "
            f"tokens) of {record.num_tokens:,}; stopped at block {record.stop_block:,} "
            f"(tokens {start:,}..{start + block_size - 1:,}): {REASONS[record.reason]}.")
    if tree_hit is not None and tree_hit > record.hit_tokens:
        line += (f" The tree matched {tree_hit:,}: {tree_hit - record.hit_tokens:,} shared "
                 f"tokens re-prefilled.")
    return line


def free_queue(snap: Any) -> list[Any]:
    """Blocks in the free queue, head first (the head is taken, and its hash evicted, next)."""
    return sorted((b for b in snap.blocks if b.free_pos is not None), key=lambda b: b.free_pos)


def queue_runs(queue: Sequence[Any]) -> list[tuple[int, int, str, int]]:
    """Runs of consecutive ids (ascending or descending) in one state: (first, last, state, n).

    A request's blocks come back last block first, so a freed chain 1..134 reads 134..1.
    """
    runs: list[list] = []
    for b in queue:
        if runs:
            first, last, state, n = runs[-1]
            d = b.id - last
            if state == b.state and abs(d) == 1 and (n == 1 or d == (1 if last > first else -1)):
                runs[-1] = [first, b.id, state, n + 1]
                continue
        runs.append([b.id, b.id, b.state, 1])
    return [tuple(r) for r in runs]


def queue_line(snap: Any, max_runs: int = 6) -> str:
    """The free queue as runs, head (next evicted) first.

    >>> from radix.blocks.pool import BlockPool; from radix.blocks.snapshot import take_snapshot
    >>> queue_line(take_snapshot(BlockPool(5), {}, 0))
    'free queue, head first (taken next): #1..#4 free (4)'
    """
    runs = queue_runs(free_queue(snap))
    if not runs:
        return "free queue: empty (every block is in use)"
    parts = [(f"#{a:,}" if a == b else f"#{a:,}..#{b:,}") + f" {s.replace('_', ', ')} ({n:,})"
             for a, b, s, n in runs[:max_runs]]
    more = f", … {len(runs) - max_runs:,} more runs" if len(runs) > max_runs else ""
    return "free queue, head first (taken next): " + ", ".join(parts) + more
