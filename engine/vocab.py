"""Fitting a trace's token ids to a model's vocabulary (synthetic traces use ids up to 10^6).

Leaves out: re-tokenizing text (a trace's text is tokenized by the model's tokenizer on load).
"""

from __future__ import annotations

from typing import Any


def fit_to_vocab(requests: list[Any], vocab_size: int, first_id: int = 1_000) -> list[list[int]]:
    """Prompts whose ids fit the model: unchanged when they already do, else every distinct id
    mapped one-to-one (first seen first) onto first_id, first_id+1, ..., so two prompts share
    exactly the prefixes they shared before (synthetic traces use ids up to 1,000,000).

    >>> fit_to_vocab([[5, 70_000, 9], [5, 70_000, 8]], 100, first_id=10)
    [[10, 11, 12], [10, 11, 13]]
    """
    prompts = [list(getattr(r, "token_ids", r)) for r in requests]
    if all(0 <= t < vocab_size for p in prompts for t in p):
        return prompts
    mapping: dict[int, int] = {}
    for p in prompts:
        for t in p:
            mapping.setdefault(t, first_id + len(mapping))
    if first_id + len(mapping) > vocab_size:
        raise ValueError(f"the trace has {len(mapping):,} distinct token ids; the model's "
                         f"vocabulary holds {vocab_size - first_id:,} past id {first_id}")
    return [[mapping[t] for t in p] for p in prompts]
