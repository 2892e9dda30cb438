"""`explain --host-ratio`: each prompt split into device hit / host hit / miss, and why each host
hit was on the host (radix/hosttier/explain.py, cli/hosttier.py)."""

from __future__ import annotations

import json

import pytest

from radix.cli import main
from radix.hosttier.explain import explain_host_tier
from radix.traces import load_trace
from radix.traces.trace import Trace, TraceRequest

TOKENS = {"a": tuple(range(1, 13)), "b": tuple(range(101, 113)), "c": tuple(range(201, 213))}


def _abcab() -> Trace:
    return Trace("request", [TraceRequest(f"{r}{k}", float(k), TOKENS[r], 1)
                             for k, r in enumerate("abcab")])


def test_each_host_hit_names_the_eviction_that_demoted_it():
    """Device 24 tokens, host 2x = 48 + 1 padding = 49, write-through (every insert backs its
    leaf up), LRU; a0, b1, c2 are 12 distinct tokens each, then a3 = a0 and b4 = b1.
    a0, b1: all miss; together they fill the device (24). c2: 12 short, the LRU device leaf is
    a0's node 1 (older than b1's): demoted (its host copy kept). a3: the match of A[:-1] splits
    node 1 into 11 (new node 4) + 1, both host-only: 11 >= the load-back threshold 10, so load
    back; 11 short, the LRU device leaf is b1's node 2 (c2's is newer): demoted by a3's load
    back. A's last token is computed; the insert restores node 1 with it (1 host-recomputed).
    b4 likewise: node 2 splits (new node 5), 11 loaded back, c2's node 3 demoted to make room.
    (device, host, miss): (0,0,12) x3, (0,11,1) x2; node 4's demotion by c2's allocation, node
    5's by a3's load back."""
    e = explain_host_tier(_abcab(), 24, 2.0)
    assert e.run.host_tokens == 49
    assert [(r.device_hit, r.host_hit, r.miss) for r in e.requests] == [
        (0, 0, 12), (0, 0, 12), (0, 0, 12), (0, 11, 1), (0, 11, 1)]
    assert [r.host_recomputed for r in e.requests] == [0, 0, 0, 1, 1]
    assert [[tuple(d) for d in r.demotions] for r in e.requests[3:]] == [
        [(4, 11, "c2", 2, "allocation")], [(5, 11, "a3", 3, "load back")]]
    assert e.by_cause() == {"allocation": 11, "load back": 11}
    assert [r.rid for r in e.top()] == ["a3", "b4"]


def test_selective_write_through_drops_instead_of_demoting():
    """The same trace under write_through_selective: a leaf is backed up on its second hit only,
    so c2's allocation drops a0 (no host copy) and a3 finds nothing on the host: every request
    misses whole and no demotion is named. a3's 11 matchable tokens (A[:-1]) were cached by a0
    and are lost, dropped while serving c2; a3 needs 12 slots and drops b1 (the LRU leaf, also
    unbacked), so b4 loses 11 to a3."""
    e = explain_host_tier(_abcab(), 24, 2.0, "write_through_selective")
    assert [(r.device_hit, r.host_hit, r.miss) for r in e.requests] == [(0, 0, 12)] * 5
    assert all(not r.demotions for r in e.requests) and e.by_cause()["allocation"] == 0
    assert [r.lost for r in e.requests] == [0, 0, 0, 11, 11]
    assert [tuple(r.lost_by) for r in e.requests[3:]] == [
        ("c2", 2, "dropped (never backed up)", 12), ("a3", 3, "dropped (never backed up)", 12)]


def test_a_miss_names_the_host_eviction_that_lost_it():
    """Host 0.5x of 24 = 12 + 1 padding = 13 tokens, write-through. a0 is backed up (12 of 13
    used); b1's backup finds 1 free and no host-only leaf to evict, so b1 stays unbacked. c2's
    allocation demotes a0 (the LRU leaf, backed up), then c2's own backup needs 11 more host
    tokens and evicts a0's host-only node. a3 finds A on neither tier: 11 lost, evicted from
    host while serving c2; its allocation drops b1 (unbacked), so b4 loses 11 to a3."""
    e = explain_host_tier(_abcab(), 24, 0.5)
    assert e.run.host_tokens == 13
    assert [(r.host_hit, r.lost) for r in e.requests] == [(0, 0)] * 3 + [(0, 11)] * 2
    assert [tuple(r.lost_by) for r in e.requests[3:]] == [
        ("c2", 2, "evicted from host", 12), ("a3", 3, "dropped (never backed up)", 12)]


def test_mooncake_host_hits_each_have_their_demotions():
    """The Mooncake excerpt (512-token blocks) at 100 blocks, host 8x: every request's split
    adds up to its prompt, the demotions it names account for its whole host hit, and a
    request that lost tokens cached before names an earlier request's removal."""
    e = explain_host_tier(load_trace("examples/traces/mooncake_excerpt.jsonl"), 51200, 8.0)
    assert e.run.host_hit > 0 and sum(r.lost for r in e.requests) > 0
    for r in e.requests:
        assert r.device_hit + r.host_hit + r.miss == r.prompt_tokens
        assert sum(d.tokens for d in r.demotions) == r.host_hit
        assert all(d.by_index < r.index for d in r.demotions if d.cause == "allocation")
        assert r.lost + r.host_recomputed <= r.miss and (r.lost > 0) == (r.lost_by is not None)
        assert r.lost_by is None or r.lost_by.by_index < r.index


def test_cli_explains_host_hits_and_refuses_bad_values(tmp_path, capsys):
    path = tmp_path / "abcab.jsonl"
    path.write_text("".join(json.dumps({"rid": r.rid, "arrival": r.arrival,
                                        "tokens": list(r.token_ids), "output_len": 1}) + "\n"
                            for r in _abcab().requests))
    argv = ["explain", str(path), "--capacity", "24", "--no-what-if", "--quiet"]
    assert main(argv + ["--host-ratio", "2"]) == 0
    text = capsys.readouterr().out
    assert "host hit (loaded back) 22 (36.7%)" in text
    assert ("11 tokens (node 4): demoted from the device while serving c2 (#2): its allocation "
            "evicted it (lru)") in text
    assert "misses cached before, on neither tier now 0" in text
    assert main(argv + ["--host-ratio", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "on neither tier now 22; dropped (never backed up) 11; evicted from host 11" in text
    assert "a3           11 tokens: evicted from host while serving c2 (#2)" in text
    assert main(argv + ["--host-ratio", "2,4", "--json"]) == 0
    tiers = json.loads(capsys.readouterr().out)["host_tier"]
    assert [t["run"]["name"] for t in tiers] == ["host 2x", "host 4x"]
    assert tiers[0]["requests"][4]["demotions"][0]["cause"] == "load back"
    assert main(argv[:2] + ["--host-ratio", "2", "--quiet", "--no-what-if"]) == 2
    assert "--host-ratio needs a bounded --capacity" in capsys.readouterr().err
    assert main(argv + ["--host-ratio", "2", "--page-size", "16"]) == 2
    assert "--page-size cannot apply" in capsys.readouterr().err
    assert main(argv + ["--host-ratio", "2", "--eviction", "oldest"]) == 2
    assert "--eviction: unknown eviction policy 'oldest'" in capsys.readouterr().err
    assert main(["explain", "examples/traces/mooncake_excerpt.jsonl", "--capacity", "100",
                 "--host-ratio", "2", "--no-what-if", "--quiet"]) == 2
    assert "--capacity: capacity 100 is under one 512-token unit" in capsys.readouterr().err
    for bad, says in (("0", "'0' must be > 0"), ("2,x", "'x' is not a number")):
        with pytest.raises(SystemExit):
            main(argv + ["--host-ratio", bad])
        assert f"argument --host-ratio: {says}" in capsys.readouterr().err


@pytest.mark.parametrize("policy, last", [("slru", (0, 3, 1)), ("lru", (3, 0, 1))])
def test_a_loaded_back_node_keeps_its_hit_count_so_slru_protects_it(policy, last):
    """Why SLRU's device hit rate can fall when the host tier is added (docs/HOST_TIER.md).
    Device 12, write-through, load-back threshold 1; P, X, Y, Z, W 4 tokens each, V 8; the
    requests P X Y Z P W V W. Z evicts P (the LRU leaf; every leaf has hit count 1). P again:
    with a host of 48, P was demoted; its 3 tokens are loaded back (X evicted for room) and the
    insert counts the loaded node's second hit, so it is protected (hit count 2 >= 2); with no
    host, P was dropped, and its recomputed node is new (hit count 1). W fills Y's slots. V
    needs 8: without a host SLRU evicts Z and P (both probationary, the oldest), keeping W;
    with the host Z, then W (probationary) before the protected P. So W's return is a device
    hit of 3 alone and a host hit of 3 (loaded back) with the host: same total, fewer device
    hits. Under LRU the hit count does not matter: V evicts Z and P either way."""
    from radix.hosttier import HostTierCache
    from radix.hosttier.requests import serve_request
    from radix.request import SlotAllocator

    seqs = {"P": range(1, 5), "X": range(11, 15), "Y": range(21, 25), "Z": range(31, 35),
            "W": range(41, 45), "V": range(51, 59)}
    got = {}
    for host in (0, 48):
        c = HostTierCache(SlotAllocator(12), host, eviction_policy=policy,
                          load_back_threshold=1)
        got[host] = [tuple(serve_request(c, list(seqs[r]))[:3]) for r in "PXYZPWVW"]
    assert got[0][4] == (0, 0, 4) and got[48][4] == (0, 3, 1)  # P again
    assert got[0][7] == (3, 0, 1) and got[48][7] == last  # W again


def test_a_one_block_host_hit_is_loaded_back(tmp_path):
    """A Mooncake trace runs in 512-token blocks, so SGLang's load-back threshold of 10 tokens
    is one block (replay.load_back_units). Hash ids [1, 2], [3, 4], [1, 2] of 1,024 tokens
    each, a device of 2 blocks, host 2x (4 + 1 padding = 5 blocks, 2,560 tokens): the second
    request's allocation demotes the first; the third matches its first block (the match
    stops before the last) on the host, one block >= the threshold: 512 tokens loaded back,
    the node (split off as node 3) demoted while serving mc-2 (#1)."""
    from radix.hosttier.replay import load_back_units

    assert (load_back_units(1), load_back_units(512), load_back_units(3)) == (10, 1, 4)
    path = tmp_path / "mc.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 1000 * k, "input_length": 1024,
                                        "output_length": 1, "hash_ids": ids}) + "\n"
                            for k, ids in enumerate(([1, 2], [3, 4], [1, 2]))))
    e = explain_host_tier(load_trace(str(path)), 1024, 2.0)
    assert e.run.host_tokens == 2560
    assert [(r.device_hit, r.host_hit, r.miss) for r in e.requests] == [
        (0, 0, 1024), (0, 0, 1024), (0, 512, 512)]
    assert [tuple(d) for d in e.requests[2].demotions] == [(3, 512, "mc-2", 1, "allocation")]
