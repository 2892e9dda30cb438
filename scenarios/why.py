"""Why did request B miss after request A? The Trace debugger's comparison of two requests, and
the causes the explainer panel lists.

`compare(trace, a, b)` runs radix/why on two requests of a loaded trace: the report, where B's
path leaves A's in the tree, and the block rows (the first block whose hash differs, and why).
Text comes from the trace loader's fallback codec (radix/traces/textcodec.py) when the trace
held text or messages, so the text detectors can read it; token-id traces get structure only.
`causes(trace, rids)` pairs each request with the earlier one sharing its longest prefix.
The pictures' data (the pair's tree, its block pool, where B leaves A) is scenarios/whypair.py's.
Leaves out: drawing (viz/why.py); the model's real tokenizer (the engine's CLI).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from radix.blocks.hashing import hash_request_tokens
from radix.traces import textcodec
from radix.traces.trace import Trace, TraceRequest
from radix.why.diff import first_diff
from radix.why.prompt import Prompt
from radix.why.report import NO_CAUSE, WhyReport, format_why, why
from scenarios.whypair import PairBlocks, pair_blocks, pair_tree

_UNKNOWN = re.compile(r"<\?\d+>")
MAX_EARLIER = 2_000  # earlier requests scanned for the best partner of one request


class WhyView(NamedTuple):
    report: WhyReport
    text: str  # format_why(report)
    tree_sentence: str  # where B's path leaves A's
    block_rows: list[dict[str, Any]]  # one per block of B: index, tokens, same hash as A's?
    first_bad_block: int | None  # the first block of B whose hash A does not share
    block_sentence: str
    tree: Any  # a TreeSnapshot of a tree holding A, then B: where B's path leaves A's
    highlight: dict[int, str]  # node id -> role (viz/roles.py ROLES): shared, A's, B's
    names: dict[int, str]  # node id -> label line ("shared", "A only", "B only")
    parting_node: int  # the node at whose end B leaves A's path (scenarios/whypair.py)
    parting_label: str  # "B leaves A here: token 20"
    grid: PairBlocks  # a pool that ran A then B: B's blocks and the one to mark


def prompt_of(tr: TraceRequest) -> Prompt:
    """A trace request as `why` sees it; text only when the fallback codec knows every id."""
    text = textcodec.decode(tr.token_ids)
    return Prompt(f"request {tr.rid}", tuple(tr.token_ids),
                  text=None if _UNKNOWN.search(text) else text,
                  extra_key=tr.extra_key, cache_salt=tr.cache_salt)


def _request(trace: Trace, rid: str) -> TraceRequest:
    for tr in trace.requests:
        if tr.rid == rid:
            return tr
    raise ValueError(f"no request {rid!r} in the trace")


def compare(trace: Trace, rid_a: str, rid_b: str, page_size: int = 1,
            block_size: int = 16) -> WhyView:
    """B (`rid_b`) against A (`rid_a`) cached first."""
    a, b = prompt_of(_request(trace, rid_a)), prompt_of(_request(trace, rid_b))
    decode = textcodec.decode if a.text is not None and b.text is not None else None
    return _view(a, b, page_size, block_size, decode)


def _view(a: Prompt, b: Prompt, page_size: int, block_size: int, decode: Any) -> WhyView:
    r = why(a, b, page_size, block_size, decode)
    k = r.diff.common
    tree = (f"In the tree, B follows A's path for {k:,} tokens and leaves it there: a new "
            f"branch at depth {k:,} (the node holding token {k:,} splits)"
            if 0 < k < min(r.diff.len_a, r.diff.len_b) else
            "In the tree, B shares no path with A: it starts at the root" if k == 0 else
            f"In the tree, one path holds the other: they share all {k:,} tokens")
    if a.namespace != b.namespace:
        tree = "In the tree, A and B live under different namespaces: separate subtrees"
    ha = hash_request_tokens(list(a.token_ids), block_size, a.extra_key, a.cache_salt)
    hb = hash_request_tokens(list(b.token_ids), block_size, b.extra_key, b.cache_salt)
    rows, first = [], None
    for i, h in enumerate(hb):
        same = i < len(ha) and ha[i] == h
        if not same and first is None:
            first = i
        rows.append({"block": i, "tokens": f"[{i * block_size:,}, {(i + 1) * block_size:,})",
                     "same hash as A's": same})
    return WhyView(r, format_why(r), tree, rows, first, _block_sentence(r, first, block_size),
                   *pair_tree(a, b), pair_blocks(a, b, block_size, first))


def _block_sentence(r: WhyReport, first: int | None, bs: int) -> str:
    cause = r.causes[0].sentence if r.causes else NO_CAUSE
    if r.a.namespace != r.b.namespace:
        return f"Block {first or 0} is the first that differs: {cause}"
    if first is not None:
        return (f"Block {first} (tokens [{first * bs:,}, {(first + 1) * bs:,})) is the first "
                f"whose hash differs: B's token {r.diff.common:,} differs from A's, and every "
                f"later block's hash chains on it. Cause: {cause}")
    full = r.diff.len_b // bs
    out = f"All {full:,} full blocks of B hash as A's"
    if r.diff.len_b > full * bs:
        out += (f"; its last {r.diff.len_b - full * bs:,} tokens fill no block, so they have "
                "no hash")
        if r.diff.common < r.diff.len_b:
            out += f" (B parts from A at token {r.diff.common:,}, in there. Cause: {cause})"
    if r.blocks.hit < full * bs:
        out += (f"; vLLM reuses {r.blocks.hit:,}: the block holding the last token is computed "
                "again")
    return out


class FoundCause(NamedTuple):
    rid: str  # the request that missed
    partner: str  # the earlier request sharing its longest prefix
    shared: int  # tokens they share from the start
    kinds: list[str]  # the causes' kinds (empty: no known cause)
    sentence: str  # the first cause's sentence, or NO_CAUSE


def causes(trace: Trace, rids: list[str], block_size: int = 16) -> list[FoundCause]:
    """For each of `rids`: the earlier request (any namespace) sharing its longest prefix, and
    why B missed the rest of it; requests with no earlier partner sharing a token are left out."""
    order = {tr.rid: i for i, tr in enumerate(trace.requests)}
    out = []
    for rid in rids:
        i = order.get(rid)
        if i is None or i == 0:
            continue
        b = trace.requests[i]
        best = max(trace.requests[max(0, i - MAX_EARLIER):i],
                   key=lambda tr: first_diff(tr.token_ids, b.token_ids).common)
        shared = first_diff(best.token_ids, b.token_ids).common
        if shared == 0:
            continue
        r = why(prompt_of(best), prompt_of(b), 1, block_size)
        found = [(c.kind, c.sentence) for c in r.causes]
        if r.blocks.hit == 0 and r.blocks.lost_to_unit and r.a.namespace == r.b.namespace:
            words = f"{shared:,} shared token" + ("s fill" if shared != 1 else " fills")
            found.insert(0, ("block_floor", f"the block floor: {words} no block of "
                                            f"{block_size}, so vLLM reuses none"))
        out.append(FoundCause(rid, best.rid, shared, [k for k, _ in found],
                              found[0][1] if found else NO_CAUSE))
    return out


def compare_live(tokenizer: Any, a: Any, b: Any, block_size: int = 16) -> WhyView:
    """Two prompts of the Live page through the model's tokenizer: each a LiveRequest (its
    token ids, decoded for the text) or a list of chat messages (rendered with the template)."""
    from engine.why import HFCodec

    codec = HFCodec(tokenizer, "live")
    prompts = []
    for x in (a, b):
        if isinstance(x, list):
            text = codec.render(x, None, True, None)
            # the report heads each with "A: " / "B: " itself ("A: A: typed", issue 41 item 9)
            prompts.append(Prompt("typed", tuple(codec.encode_rendered(text)),
                                  text=text, messages=tuple(x), template="model"))
        else:
            prompts.append(Prompt(x.rid, tuple(x.token_ids),
                                  text=codec.decode(list(x.token_ids))))
    return _view(prompts[0], prompts[1], 1, block_size, codec.decode)
