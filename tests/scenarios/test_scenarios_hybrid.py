"""The hybrid scenarios: the Tour's walk on two models (hits from SGLang's and vLLM's own rules),
the Eviction lab's component question (tombstones, the cascade, whole leaves), and the Trace
debugger's run on a model (needs radix.runs.hybrid_compare, hybrid-cli's)."""

from __future__ import annotations

import pytest

from radix import events as ev
from scenarios.hybrid_evict import check_params, run_lab
from scenarios.hybrid_tour import run_walk, walk_prompts
from viz.hybrid_words import frame_lines, vllm_line


@pytest.fixture(scope="module")
def qwen():
    return run_walk("qwen3.5-4b")


def test_the_walk_hits_as_each_engine_decides(qwen):
    """R1 = S + A, R2 = S + B, R3 = S + C (S 1,600 tokens, 600 each of their own), R4 = R1's
    first 1,900 + 300, two output tokens each.
    Llama-3-8B (full attention): SGLang 0, 1,600, 1,600, 1,900; vLLM the same in 16-token
      blocks: R4's 1,899 matchable tokens floor to 1,888.
    Qwen3.5-4B, SGLang (extra buffer, grid 64): R1 keeps its state at 2,176; R2 matches 1,600
      but the split node has no state: 0, and R2 keeps one there; R3 hits 1,600; R4 matches
      1,900, no state there: cut to the state at 1,600.
    Qwen3.5-4B, vLLM (block 576): R2's full group holds 2 blocks, the Mamba groups none: 0,
      the junction pinned at 1,152; R3 1,152; R4 1,728, R1's own state at 3 x 576.
    gpt-oss-20b: R1's window freed its SWA below 2,072 (tombstones): R2 hits 0 and inserts
      its window at 1,600; vLLM's window group likewise kept only R1's last window: 0, then
      1,600."""
    assert qwen.hits == ((0, 1600, 1600, 1900), (0, 0, 1600, 1600))
    assert qwen.vllm_hits == ((0, 1600, 1600, 1888), (0, 0, 1152, 1728))
    oss = run_walk("gpt-oss-20b")
    assert oss.hits[1] == (0, 0, 1600, 1600) and oss.vllm_hits[1] == (0, 0, 1600, 1600)
    assert [len(p) for p in qwen.prompts] == [len(p) for _, p in walk_prompts()] == [2200] * 4
    with pytest.raises(ValueError, match="hybrid"):
        run_walk("llama-3-8b")


def test_tombstones_appear_and_a_checkpoint_lands_on_the_path(qwen):
    """Frame 5 (R2's match) splits R1's node at 1,600: the new node #2 has no Mamba state (a
    tombstone), R1's remainder keeps its state; frame 7 (R2's prefill) stores R2's state on
    #2: the checkpoint the next request hits."""
    split = {n.id: n for n in qwen.frames[5].sides[1].nodes}
    assert split[2].mamba_slot_ids is None and len(split[2].token_ids) == 1600
    assert split[1].mamba_slot_ids is not None
    stored = [e for e in qwen.frames[7].sides[1].events if isinstance(e, ev.ComponentStored)]
    assert [(e.node_id, e.component) for e in stored] == [(2, "mamba")]
    assert {n.id: n for n in qwen.frames[7].sides[1].nodes}[2].mamba_slot_ids is not None


def test_the_walk_says_each_cut_with_its_numbers(qwen):
    """R2's match (frame 5) and R4's (frame 13), on both models and in vLLM's groups."""
    r2 = frame_lines(qwen, 5)
    assert r2[0] == ("Llama-3-8B: attention matched 1,600 tokens and every component accepts: "
                     "the hit is 1,600.")
    assert r2[1] == ("Qwen3.5-4B: attention matched 1,600 tokens; no Mamba state at 1,600 "
                     "(node #2 is a Mamba tombstone): the hit is cut to 0. The match asks R2 to "
                     "keep a state at 1,600 (mamba_branching_seqlen).")
    assert frame_lines(qwen, 13)[1].startswith(
        "Qwen3.5-4B: attention matched 1,900 tokens; no Mamba state at 1,900 (node #4 is a Mamba "
        "tombstone): the hit is cut to 1,600, the last checkpoint (node #2).")
    look = qwen.frames[5].sides[1].lookup
    assert vllm_line(qwen.models[1], look).startswith(
        "vLLM, Qwen3.5-4B (block 576): full attention 1,152, each Mamba group 0: the "
        "intersection gives 0; 1,152 common tokens are not cached in every group: the junction "
        "is pinned at 1,152")
    assert "R1's prefill and first token: a Mamba state kept at 2,176; node #1 inserted " \
           "(0..2,176); a Mamba state stored on node #1 at 2,176." in frame_lines(qwen, 3)[1]


def test_each_component_evicts_its_own_way():
    """The lab's tree (chat C running): SWA's LRU tail is A's inner node #2 (32..40, A2's state
    at 40), then #1 (40..48, A's state). Asked for 16 SWA tokens, SWA tombstones both inner
    nodes, each cascading to its Mamba state: 16 SWA tokens and 2 states freed, no FULL token.
    Asked for 1 state, MAMBA tombstones #2's state alone (no cascade upward). Asked for 16
    FULL tokens, FULL pops leaves whole: #3 (A's second turn), then #1, now a leaf."""
    def kinds(run):
        return [(type(f.event).__name__, f.event.node_id, getattr(f.event, "component", ""),
                 getattr(f.event, "cause", "")) for f in run.frames[1:]]

    swa = run_lab("swa")
    assert kinds(swa) == [("ComponentTombstoned", 2, "swa", "evict"),
                          ("ComponentTombstoned", 2, "mamba", "cascade"),
                          ("ComponentTombstoned", 1, "swa", "evict"),
                          ("ComponentTombstoned", 1, "mamba", "cascade")]
    assert swa.freed == {"full": 0, "swa": 16, "mamba": 2}
    assert swa.lru["swa"] == (2, 1, 3, 6, 5, 4)  # #4 (S) locked by chat C: passed over
    assert swa.sizes[0]["swa"] == (72, 32) and swa.sizes[1]["swa"] == (56, 32)
    after = {n.id: n for n in swa.frames[-1].nodes}
    assert after[2].swa_slot_ids is None and after[2].slot_ids  # FULL stays
    assert kinds(run_lab("mamba")) == [("ComponentTombstoned", 2, "mamba", "evict")]
    assert kinds(run_lab("full")) == [("NodeEvicted", 3, "", ""), ("NodeEvicted", 1, "", "")]
    assert len(run_lab("swa", live=False).lru["swa"]) == 8  # chat C's own nodes cached too
    with pytest.raises(ValueError, match="amount"):
        check_params("swa", 0)
    with pytest.raises(ValueError, match="ask"):
        check_params("host", 1)


def test_a_trace_on_a_model_keeps_each_requests_tree_and_lookup():
    """The issue's workload, 3 requests of 1,600 shared + 600 own tokens, on Qwen3.5-4B through
    the commands' own runs (compare --model): SGLang hits 0, 0, 1,600 (request 2's match cut
    to 0 at node #2, the split), vLLM 0, 0, 1,152; the tree at request 2's match has the
    split node without a state; the log replays to SGLang's own tree."""
    from radix.traces.trace import Trace, TraceRequest
    from scenarios.trace_hybrid import request_at, run_hybrid

    shared = tuple(range(1600))
    t = Trace("request", [TraceRequest(f"r{i}", i, shared + tuple(range(10**6 * (i + 1),
                                                                       10**6 * (i + 1) + 600)),
                                       1) for i in range(3)])
    h = run_hybrid(t, "qwen3.5-4b")
    assert [o.hit for o in h.sglang] == [0, 0, 1600]
    assert [o.hit for o in h.vllm] == [0, 0, 1152]
    assert h.lookups["r1"].group_hits == (0, 0, 0, 1152)
    nodes, match = request_at(h, 1)
    m = next(e for e in match if isinstance(e, ev.HybridPrefixMatched))
    assert (m.full_kv_hit_length, m.prefix_len) == (1600, 0)
    assert [len(n.token_ids) for n in nodes if n.mamba_slot_ids is None] == [0, 1600]
    assert h.totals["sglang"]["hit_tokens"] == 1600 and h.nbytes > 0
