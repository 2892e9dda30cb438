"""The Mooncake sample (../shared/traces/) as a block-unit trace: 64.0% of block references hit
with an unbounded cache, by a prefix-chained count and through RadixCache."""

from __future__ import annotations

from pathlib import Path

import pytest

from radix.traces import load_trace
from radix.traces.mooncake import block_hit_rate
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
EXCERPT = REPO / "examples" / "traces" / "mooncake_excerpt.jsonl"


@pytest.fixture(scope="module")
def sample():
    if not SAMPLE.exists():
        pytest.skip(f"the Mooncake sample is not at {SAMPLE} (see ../shared/traces/README.md)")
    return load_trace(SAMPLE)


def test_sample_shape(sample):
    """3,993 requests, 121,877 block references over 43,924 distinct ids (README of the sample)."""
    assert sample.format == "mooncake" and sample.token_scale == 512
    assert len(sample.requests) == 3_993
    assert sum(len(r.token_ids) for r in sample.requests) == 121_877
    assert len({h for r in sample.requests for h in r.token_ids}) == 43_924
    arrivals = [r.arrival for r in sample.requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0


def test_unbounded_prefix_chained_hit_rate(sample):
    """77,953 of 121,877 block references hit: 63.96% -> 64.0%."""
    hit, total = block_hit_rate(sample.requests)
    assert (hit, total) == (77_953, 121_877)
    assert round(100 * hit / total, 1) == 64.0


def test_radix_cache_replay_agrees(sample):
    """Each request's match_prefix before its insert is its hit count; the tree ends up holding
    one unit per distinct chain position: 121,877 - 77,953 = 43,924 units."""
    cache = RadixCache()
    hit = 0
    for r in sample.requests:
        hit += cache.match_prefix(RadixKey(r.token_ids)).prefix_len
        cache.insert(RadixKey(r.token_ids))
    assert hit == 77_953
    assert cache.total_size() == 121_877 - 77_953


def test_real_token_counts_keep_the_partial_block(sample):
    """Request 1: input_length 40,160 = 78 x 512 + 224, so 79 ids; all 79 units are 40,160 real
    tokens and 78 units are 39,936."""
    assert len(sample.requests[0].token_ids) == 79
    assert sample.real_prefix_len(0, 79) == 40_160
    assert sample.real_prefix_len(0, 78) == 39_936


def test_excerpt_is_the_samples_head():
    excerpt = load_trace(EXCERPT)
    assert len(excerpt.requests) == 200
    if SAMPLE.exists():
        assert excerpt.requests == load_trace(SAMPLE).requests[:200]
