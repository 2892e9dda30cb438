"""The scenario generators: DESIGN.md's numbers, determinism, and that every ready trace loads."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from examples.generate import SMALL, write_all
from examples.workloads import (
    SCENARIOS,
    cold_burst,
    customer_support,
    eviction_question,
    multi_turn,
    rag,
    three_requests,
)
from radix.traces import load_trace
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_three_requests_known_answer():
    """R1 = 512 + 1,543 + 96 = 2,151; R2 = 512 + 1,543 + 80 = 2,135; R3 = 512 + 2,112 = 2,624.
    Apart 6,910; the tree stores 512 + 1,543 + 96 + 80 + 2,112 = 4,343; saved 2,567."""
    r1, r2, r3 = three_requests()
    assert [len(r.token_ids) for r in (r1, r2, r3)] == [2_151, 2_135, 2_624]
    assert common_prefix(r1.token_ids, r2.token_ids) == 2_055
    assert common_prefix(r1.token_ids, r3.token_ids) == 512
    cache = RadixCache()
    for r in (r1, r2, r3):
        cache.insert(RadixKey(r.token_ids))
    assert cache.total_size() == 4_343 and 6_910 - 4_343 == 2_567


def test_cold_burst_known_answer():
    """64 requests at t=0; all share 2,000 tokens and nothing more: 64 x 2,000 = 128,000 prefix
    tokens if all prefill; a tree holds 2,000 + 64 x 16 = 3,024 tokens, 126,000 fewer."""
    burst = cold_burst()
    assert len(burst) == 64 and {r.arrival for r in burst} == {0.0}
    assert {common_prefix(burst[0].token_ids, r.token_ids) for r in burst[1:]} == {2_000}
    cache = RadixCache()
    for r in burst:
        cache.insert(RadixKey(r.token_ids))
    assert cache.total_size() == 3_024
    assert sum(len(r.token_ids) for r in burst) - cache.total_size() == 126_000


def test_multi_turn_known_answer():
    """Turn prompts 712, 1,312, 2,550, 4,300, 4,720; turn 5 = turn 4 + its 300-token reply + a
    120-token message: with turn 4's prompt and reply cached it matches 4,600 and prefills 120."""
    turns = multi_turn()
    assert [len(r.token_ids) for r in turns] == [712, 1_312, 2_550, 4_300, 4_720]
    t4, t5 = turns[3], turns[4]
    assert t4.output_len == len(t4.output_ids) == 300
    assert t5.token_ids[:4_600] == t4.token_ids + t4.output_ids
    cache = RadixCache()
    cache.insert(RadixKey(t4.token_ids + t4.output_ids))
    assert cache.match_prefix(RadixKey(t5.token_ids)).prefix_len == 4_600


def test_eviction_question_shape():
    """One finished 2,624-token RAG request, then 400 live conversations sharing only S:
    512 + 2,112 + 400 x 24 = 12,224 tokens once all are admitted."""
    reqs = eviction_question()
    rag_req, convs = reqs[0], reqs[1:]
    assert len(convs) == 400 and len(rag_req.token_ids) == 2_624 and rag_req.output_len == 1
    assert {common_prefix(rag_req.token_ids, c.token_ids) for c in convs} == {512}
    assert min(c.arrival for c in convs) > rag_req.arrival
    cache = RadixCache()
    for r in reqs:
        cache.insert(RadixKey(r.token_ids))
    assert cache.total_size() == 12_224


def test_customer_support_and_rag_share_what_they_should():
    """Every support prompt starts with S + F (2,055 tokens); a user's turn k+1 extends turn k's
    prompt and reply. Every RAG prompt starts with S; none shares past S unless its first
    document is the same."""
    support = customer_support()
    assert {common_prefix(support[0].token_ids, r.token_ids) >= 2_055 for r in support} == {True}
    by_rid = {r.rid: r for r in support}
    for r in support:
        user, turn = r.rid.rsplit("-t", 1)
        if int(turn) > 1:
            prev = by_rid[f"{user}-t{int(turn) - 1}"]
            assert r.token_ids[:len(prev.token_ids) + prev.output_len] == \
                prev.token_ids + prev.output_ids
            assert r.arrival > prev.arrival
    docs = rag()
    assert {common_prefix(docs[0].token_ids, r.token_ids) >= 512 for r in docs} == {True}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_generators_are_seeded(name):
    make = SCENARIOS[name]
    kw = SMALL.get(name, {})
    assert make(**kw) == make(**kw)
    assert make(seed=1, **kw) != make(seed=2, **kw)


def test_ready_traces_are_the_generators_output(tmp_path):
    """examples/traces/ is exactly what `python -m examples.generate --small` writes."""
    for path in write_all(tmp_path, small=True):
        shipped = TRACES / path.name
        assert shipped.exists(), path.name
        if path.suffix == ".gz":
            assert gzip.decompress(shipped.read_bytes()) == gzip.decompress(path.read_bytes())
        else:
            assert shipped.read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("path", sorted(p.name for p in TRACES.iterdir() if p.suffix != ".md"))
def test_every_ready_trace_loads(path):
    trace = load_trace(TRACES / path)
    assert trace.requests or trace.batches
