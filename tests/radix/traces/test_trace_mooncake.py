"""Mooncake traces in real tokens: the public sample (examples/traces/, shipped), exactness
against plain token lists, limits checked while loading, and the conversation stand-in."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from examples.mooncake_conversation import generate
from radix.runs.compare import compare
from radix.tokens import RunList, TokenRuns
from radix.traces import Trace, TraceError, TraceRequest, load_trace
from radix.traces.limits import MAX_TOTAL_OUTPUT_TOKENS, TraceLimits
from radix.traces.mooncake import (
    MAX_TOTAL_OUTPUT_TOKENS_COMPACT,
    block_hit_rate,
    hash_ids,
    load_mooncake,
)
from radix.traces.trace import to_req, trace_reqs
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

TRACES = Path(__file__).resolve().parents[3] / "examples" / "traces"
SAMPLE = TRACES / "mooncake_synthetic_trace.jsonl.gz"
EXCERPT = TRACES / "mooncake_excerpt.jsonl"


@pytest.fixture(scope="module")
def sample():
    return load_trace(SAMPLE)


def test_sample_shape(sample):
    """3,993 requests, 121,877 block references over 43,924 distinct ids (the sample's README),
    61,194,628 prompt tokens held in 5,727 runs, not 61 M ints."""
    assert sample.format == "mooncake" and sample.token_scale == 1
    assert len(sample.requests) == 3_993
    ids = [hash_ids(r.token_ids) for r in sample.requests]
    assert sum(map(len, ids)) == 121_877
    assert len({h for x in ids for h in x}) == 43_924
    assert sum(sample.input_lens) == sum(len(r.token_ids) for r in sample.requests) == 61_194_628
    assert sum(r.token_ids.num_runs for r in sample.requests) < 6_000
    arrivals = [r.arrival for r in sample.requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0


def test_unbounded_prefix_chained_hit_rate(sample):
    """77,953 of 121,877 block references hit: 63.96% -> 64.0%."""
    hit, total = block_hit_rate(sample.requests)
    assert (hit, total) == (77_953, 121_877)
    assert round(100 * hit / total, 1) == 64.0


def token_oracle(requests):
    """Per request, the longest token prefix it shares with any earlier one, from hash-id
    chains alone: a block of an earlier chain counts up to the tokens that request had in it."""
    seen: dict[tuple[int, int], tuple[int, int]] = {}  # (parent, id) -> (node, most tokens)
    out = []
    for r in requests:
        n, node, best, tokens = len(r.token_ids), 0, 0, []
        for j, h in enumerate(hash_ids(r.token_ids)):
            mine = min(512, n - 512 * j)
            tokens.append((node, h, mine))
            got = seen.get((node, h))
            if got is None:
                break
            best += min(got[1], mine)
            if got[1] < mine:
                break
            node = got[0]
        out.append(best)
        node = 0
        for j, h in enumerate(hash_ids(r.token_ids)):
            mine = min(512, n - 512 * j)
            child, most = seen.get((node, h), (len(seen) + 1, 0))
            seen[(node, h)] = (child, max(most, mine))
            node = child
    return out


def test_radix_cache_replay_in_real_tokens_agrees(sample):
    """Each request's match before its insert is its longest common prefix with the earlier
    ones (the oracle, in tokens: partial last blocks included); the tree ends up holding every
    distinct token once: prompt tokens - matched tokens."""
    cache = RadixCache()
    matched = [0] * len(sample.requests)
    for k, r in enumerate(sample.requests):
        matched[k] = cache.match_prefix(RadixKey(r.token_ids)).prefix_len
        cache.insert(RadixKey(r.token_ids))
    assert matched == token_oracle(sample.requests)
    assert cache.total_size() == sum(sample.input_lens) - sum(matched)


def test_real_token_counts_keep_the_partial_block(sample):
    """Request 1: input_length 40,160 = 78 x 512 + 224, so 79 ids: one run of 40,160 tokens
    (ids 0..78 are consecutive), whose last block holds 224 tokens."""
    r = sample.requests[0]
    assert len(r.token_ids) == 40_160 and hash_ids(r.token_ids) == list(range(79))
    assert r.token_ids.num_runs == 1 and r.token_ids[-1] == 78 * 512 + 223


def test_excerpt_is_the_samples_head(sample):
    assert load_trace(EXCERPT).requests == sample.requests[:200]


def test_compact_equals_plain_token_lists_on_the_excerpt():
    """The excerpt's prompts as TokenRuns and as plain lists of the same ints give the same
    figures in compare, at a capacity that evicts and unbounded (tree: the same calls;
    blocks: the block-extent cache against the per-block manager)."""
    t = load_trace(EXCERPT)
    plain = Trace("request", [TraceRequest(r.rid, r.arrival, tuple(r.token_ids), r.output_len)
                              for r in t.requests])
    for capacity in (300_000, 10**9):
        a, b = compare(t, capacity), compare(plain, capacity)
        assert a["tree"] == b["tree"] and a["blocks"] == b["blocks"]
    assert a["tree"]["hit_tokens"] > 0


def test_a_request_becomes_a_req_in_one_way_and_stays_compact():
    """`to_req` is the one way from a trace request to a Req (#23): a Mooncake prompt stays a
    TokenRuns of its real tokens, with RunList rows (the old `to_req` expanded it into a list of
    ints; `trace_reqs` had the compact loop of its own); a plain prompt becomes a list."""
    t = load_trace(EXCERPT)
    req = to_req(t.requests[0])
    assert type(req.origin_input_ids) is TokenRuns
    assert req.origin_input_ids == t.requests[0].token_ids
    assert type(req.output_ids) is RunList and type(req.slot_ids) is RunList
    assert [r.origin_input_ids for r in trace_reqs(t)] == [tr.token_ids for tr in t.requests]
    assert to_req(TraceRequest("a", 0, (5, 6), 1)).origin_input_ids == [5, 6]


def test_three_line_trace_is_exact_at_any_capacity():
    """One request of 3 blocks (1,100 tokens), the same again, then its first 2 blocks (1,024
    tokens). Tree: the repeat matches 1,099 (its prompt - 1), the third 1,023 (its prompt - 1);
    blocks of 16: the repeat matches
    floor(1,099 / 16) = 68 blocks = 1,088 tokens, the third (1,023 // 16) = 63 blocks = 1,008.
    It used to be 'rejected (too big)' in the block cache at every capacity."""
    lines = [{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 3]},
             {"timestamp": 1, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 3]},
             {"timestamp": 2, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]}]
    t = load_trace("\n".join(json.dumps(x) for x in lines).encode())
    for capacity in (4_000, 10**9):
        out = compare(t, capacity)
        assert out["tree"]["hit_tokens"] == 1_099 + 1_023
        assert out["blocks"]["hit_tokens"] == 1_088 + 1_008
        assert out["blocks"]["rejected"] == out["tree"]["rejected"] == 0


@pytest.mark.parametrize("limits, words", [
    (TraceLimits(max_requests=1), "line 2: the file has more lines than the limit of 1"),
    (TraceLimits(max_total_tokens=5), "prompt tokens reach 6, over the limit of 5"),
    (TraceLimits(max_total_output_tokens=5), "output tokens reach 8, over the limit of 5"),
    (TraceLimits(max_tokens_per_request=1000), "1100 is out of range [1, 1,000]"),
])
def test_limits_name_the_limit_and_the_figure(limits, words):
    """Two lines of 1,100 tokens (3 hash ids) and 4 outputs: prompts count in hash ids (3 + 3 =
    6 > 5), outputs in tokens (4 + 4 = 8 > 5)."""
    text = "\n".join(json.dumps({"timestamp": k, "input_length": 1100, "output_length": 4,
                                 "hash_ids": [1, 2, 3]}) for k in range(2))
    with pytest.raises(TraceError, match=re.escape(words)):
        load_trace(text.encode(), limits=limits)


def test_the_conversation_trace_fits_the_default_limits():
    """Mooncake's conversation trace asks for ~4.1 M output tokens (12,031 x ~343), over the
    2,097,152 that bound a request trace's materialised outputs; a Mooncake trace's replies are
    runs, so its default cap is MAX_TOTAL_OUTPUT_TOKENS_COMPACT (16,777,216)."""
    lines = [{"timestamp": k, "input_length": 1100, "output_length": 1 << 20,
              "hash_ids": [1, 2, 3]} for k in range(16)]
    data = "\n".join(json.dumps(x) for x in lines).encode()
    assert len(load_trace(data).requests) == 16  # 16,777,216 output tokens: at the cap
    more = data + b"\n" + json.dumps(lines[0] | {"timestamp": 99}).encode()
    with pytest.raises(TraceError, match=r"line 17, .*over the limit of 16,777,216"):
        load_trace(more)
    assert MAX_TOTAL_OUTPUT_TOKENS_COMPACT > 4_200_000 > MAX_TOTAL_OUTPUT_TOKENS


def test_a_small_file_no_longer_expands_to_gigabytes():
    """100 lines of 1,048,576-token prompts (ids 0..2,047, consecutive): 104.9 M tokens, held
    as one run a request (they used to be 104.9 M Python ints)."""
    ids = list(range(2048))
    text = "\n".join(json.dumps({"timestamp": k, "input_length": 1 << 20, "output_length": 1,
                                 "hash_ids": ids}) for k in range(100))
    t = load_mooncake(text)
    assert sum(t.input_lens) == 100 << 20
    assert all(r.token_ids == TokenRuns([(0, 1 << 20)]) for r in t.requests)


def test_conversation_stand_in_has_the_statistics():
    """The seeded stand-in for Mooncake's conversation trace, scaled down 10x: 1,203 requests,
    14.48 M prompt tokens within 1%, outputs ~343 on average, and every later turn of a session
    extends the full blocks of its previous turn."""
    lines = generate(seed=3, requests=1_203, prompt_tokens=14_480_000)
    assert len(lines) == 1_203
    assert abs(sum(x["input_length"] for x in lines) - 14_480_000) < 144_800
    assert 250 < sum(x["output_length"] for x in lines) / len(lines) < 450
    by_prefix = {tuple(x["hash_ids"][:4]) for x in lines}
    assert len(by_prefix) < len(lines)  # shared system prompts and sessions
    t = load_mooncake("\n".join(json.dumps(x) for x in lines))
    assert sum(t.input_lens) == sum(x["input_length"] for x in lines)
