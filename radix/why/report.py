"""`why(a, b)`: where prompt B parts from prompt A, what each cache reuses, and why.

Puts diff.py, caches.py and the detectors together into a `WhyReport`; `format_why` prints it.
A is the prompt already cached, B the one that missed. Causes: the structure detectors
(namespace, tools order, chat template, tokenization), then the text detectors where the texts
part; none found says "no known cause". Leaves out: more than two prompts (the explainer's job).
"""

from __future__ import annotations

from typing import NamedTuple

from radix.why.caches import CacheOutcome, block_outcome, tree_outcome
from radix.why.causes import Cause, text_causes
from radix.why.diff import Decode, TokenDiff, context, first_diff
from radix.why.prompt import Prompt
from radix.why.structure import STRUCTURE_DETECTORS

NO_CAUSE = "no known cause"


class WhyReport(NamedTuple):
    a: Prompt
    b: Prompt
    diff: TokenDiff
    context_a: str  # tokens around the parting point, marked (diff.context)
    context_b: str
    tree: CacheOutcome
    blocks: CacheOutcome
    causes: list[Cause]  # most specific first; empty: no known cause


def why(a: Prompt, b: Prompt, page_size: int = 1, block_size: int = 16,
        decode: Decode | None = None, width: int = 6) -> WhyReport:
    """Compares B with A (A cached first).

    >>> r = why(Prompt("a", (1, 2, 3, 4)), Prompt("b", (1, 2, 9, 9)), block_size=2)
    >>> r.diff.common, r.tree.hit, r.blocks.hit, r.causes
    (2, 2, 2, [])
    """
    d = first_diff(a.token_ids, b.token_ids)
    causes = [c for c in (f(a, b) for f in STRUCTURE_DETECTORS) if c is not None]
    if a.text is not None and b.text is not None and not d.identical:
        kinds = {c.kind for c in causes}
        causes += [c for c in text_causes(a.text, b.text) if c.kind not in kinds]
    return WhyReport(a, b, d, context(a.token_ids, d.common, decode, width),
                     context(b.token_ids, d.common, decode, width),
                     tree_outcome(a.token_ids, b.token_ids, a.namespace, b.namespace, page_size),
                     block_outcome(a.token_ids, b.token_ids, a.namespace, b.namespace,
                                   block_size), causes)


def _losses(o: CacheOutcome) -> list[str]:
    """The shared tokens a cache did not reuse, by rule."""
    unit = "block" if o.cache == "blocks" else "page"
    out = []
    n = o.lost_to_unit
    shared = f"{n:,} shared token" + ("s" if n != 1 else "")
    if n and o.shared < o.unit:
        out.append(f"the {unit} floor: the {shared} fill{'s' if n == 1 else ''} no whole {unit}")
    elif n:
        out.append(f"{shared} past the last whole {unit}")
    if o.lost_to_last_token:
        out.append(f"{o.lost_to_last_token:,} given up so the last token is computed")
    return out


def _cache_line(o: CacheOutcome, n: int) -> str:
    name = (f"radix tree (SGLang, page {o.unit})" if o.cache == "tree"
            else f"block cache (vLLM, blocks of {o.unit})")
    extra = "; ".join(_losses(o))
    return f"  {name}: reuses {o.hit:,} of {n:,}, prefills {o.prefilled:,} again" + (
        f" ({extra})" if extra else "")


def format_why(r: WhyReport, caches: list[str] | None = None) -> str:
    """The report as the CLI prints it; `caches` replaces the two caches' lines (why --model:
    a hybrid model's engines)."""
    d = r.diff
    head = [f"A: {r.a.label} ({d.len_a:,} tokens)", f"B: {r.b.label} ({d.len_b:,} tokens)"]
    if d.identical:
        head.append("the token streams are identical")
    elif d.common == min(d.len_a, d.len_b):
        head.append(f"one stream extends the other: they share all {d.common:,} tokens of the "
                    "shorter")
    else:
        head.append(f"the token streams part at token {d.common:,} (tokens marked [..], "
                    "the parting point ||):")
    if not d.identical:
        head += [f"  A: {r.context_a}", f"  B: {r.context_b}"]
    head += caches if caches is not None else [
        "what each cache does with B once A is cached:",
        _cache_line(r.tree, d.len_b), _cache_line(r.blocks, d.len_b)]
    if r.causes:
        head += ["cause:"] + [f"  - {c.sentence}" for c in r.causes]
    elif not d.identical and d.common < min(d.len_a, d.len_b):
        head.append(f"cause: {NO_CAUSE}" + ("" if r.a.text is not None else
                                            " (token ids only: no text to read)"))
    return "\n".join(head)
