"""The host tier (radix/hosttier): known answers for the write policies, demotion, load back, host
eviction, host locks and write-back's host-pressure drop, each derived in its docstring.
tools/diff_sglang_hicache.py checks the same model against SGLang 0.5.23's own code."""

from __future__ import annotations

import json

import pytest

from radix import events as ev
from radix.cli import main as radix_main
from radix.hosttier import HostTierCache, host_token_capacity
from radix.hosttier.requests import serve_request
from radix.request import SlotAllocator

A, B, C = list(range(1, 7)), list(range(7, 13)), list(range(13, 19))


def cache(device: int, host: int, policy: str = "write_through", **kw) -> HostTierCache:
    return HostTierCache(SlotAllocator(device), host, policy, **kw)


@pytest.mark.parametrize(("policy", "host_used", "hits"), [
    ("write_through", (4, 4), 2), ("write_through_selective", (0, 4), 2),
    ("write_back", (0, 0), 0)])
def test_write_policies_back_up_at_their_threshold(policy, host_used, hits):
    """The same 4-token key inserted twice. write_through backs up at the first hit (threshold
    1), write_through_selective at the second (threshold 2), write_back never at insert (and,
    as SGLang's _inc_hit_count_and_check, counts no hit at all)."""
    c = cache(16, 32, policy)
    used = []
    for _ in range(2):
        leaf = c.insert([1, 2, 3, 4], c.allocator.alloc(4)).last_node
        used.append(c.host.num_used)
    assert (tuple(used), leaf.hit_count) == (host_used, hits)


def test_demotion_and_load_back_emit_their_events():
    """Device 8, host 17, load-back threshold 1. A (6 tokens) is cached and backed up. B needs
    6 slots, 2 are free: evict 4 takes A whole, demoted (A stays on host). A again: the match of
    A[:-1] splits A 5 + 1 and finds 5 on host; loading 5 needs 5 slots, 2 free: B is demoted;
    the 6th token is computed and restores the [6] node from its fresh slot."""
    sink = ev.ListSink()
    c = cache(8, 17, load_back_threshold=1, sink=sink)
    serve_request(c, A)
    sink.events.clear()
    assert serve_request(c, B)[:3] == (0, 0, 6)
    kinds = [type(e).__name__ for e in sink.events]
    assert kinds == ["NodeDemoted", "NodeInserted", "KVBackedUp"]
    assert (sink.events[0].num_tokens, sink.events[2].reason) == (6, "write_through")
    sink.events.clear()
    assert serve_request(c, A)[:3] == (0, 5, 1)
    loaded = [e for e in sink.events if isinstance(e, ev.KVLoadedBack)]
    assert [e.num_tokens for e in loaded] == [5]
    assert [type(e).__name__ for e in sink.events if not isinstance(e, ev.HostLockChanged)] == [
        "NodeSplit", "NodeDemoted", "KVLoadedBack", "DeviceRestored"]
    tiers = sorted((len(n.key), n.tier) for n in c.nodes() if n.parent is not None)
    assert tiers == [(1, "both"), (5, "both"), (6, "host")]
    assert c.counts()[:3] == (12, 12, 5)  # backed up (A, B), demoted (A, B), loaded back


def test_load_back_under_the_threshold_recomputes():
    """As above with SGLang's threshold of 10: a 5-token host hit is not loaded; the prompt is
    computed again, and its slots restore A's host-only nodes (both tiers again)."""
    c = cache(8, 17)
    serve_request(c, A)
    serve_request(c, B)
    assert serve_request(c, A)[:3] == (0, 0, 6)
    assert c.counts().loaded_back == 0
    assert sorted(n.tier for n in c.nodes() if n.parent is not None) == ["both", "both", "host"]


def test_selective_drops_an_unbacked_leaf():
    """write_through_selective: A is hit once, not backed up; B's eviction drops it (its KV is
    lost, counted as write_through_unbacked) and A misses again."""
    c = cache(8, 16, "write_through_selective")
    serve_request(c, A)
    serve_request(c, B)
    assert c.counts().dropped_unbacked == 6
    assert serve_request(c, A)[:3] == (0, 0, 6)


def test_host_eviction_takes_the_least_recent_host_leaf_unless_host_locked():
    """Device 6, host 12, write-through. A, then B (A demoted: host 12 full), then C: B is
    demoted, C's backup needs 6 host tokens: the host leaves are A and B, A older, so A goes.
    With a host lock on A, B goes instead."""
    for lock in (False, True):
        c = cache(6, 12)
        serve_request(c, A)
        serve_request(c, B)
        a = next(n for n in c.nodes() if n.key.token_ids[:1] == [1])  # a match would touch A
        receipt = c.inc_host_lock_ref(a) if lock else None
        serve_request(c, C)
        left = sorted(n.key.token_ids[0] for n in c.nodes() if n.parent is not None)
        assert left == ([1, 13] if lock else [7, 13]), lock
        assert c.counts().host_evicted == 6
        c.dec_host_lock_ref(receipt)
        assert a.host_lock_ref == 0


def test_write_back_backs_up_at_eviction_and_drops_under_host_pressure():
    """Device 6, host 6, write-back. B evicts A: A is backed up then demoted. C evicts B: B's
    backup needs the host's 6 tokens, host eviction takes A (host-only leaf), B is demoted.
    With A host-locked the host cannot make room, so B is dropped (host_pressure)."""
    for lock in (False, True):
        c = cache(6, 6, "write_back")
        serve_request(c, A)
        serve_request(c, B)
        assert c.counts().demoted == 6
        a = next(n for n in c.nodes() if n.key.token_ids[:1] == [1])
        receipt = c.inc_host_lock_ref(a) if lock else None
        serve_request(c, C)
        got = c.counts()
        want = (6, 0, 6) if lock else (12, 6, 0)
        assert (got.demoted, got.host_evicted, got.dropped_host_pressure) == want, lock
        c.dec_host_lock_ref(receipt)


def test_host_capacity_follows_hicache_ratio():
    """int(1,000 x 4) // 16 = 250 pages + 1 padding page = 4,016 tokens."""
    assert host_token_capacity(1000, 4, 16) == 4016
    with pytest.raises(ValueError, match="ratio"):
        host_token_capacity(1000, -1)


def test_simulate_splits_mooncake_hits_by_tier(capsys):
    """The Mooncake excerpt (200 requests) at a 100-block device: every prompt token is a
    device hit, a host hit or a miss; the device alone loads nothing back."""
    argv = ["simulate", "examples/traces/mooncake_excerpt.jsonl", "--capacity", "51200",
            "--host-ratio", "2,8", "--json"]
    assert radix_main(argv) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in runs] == ["device only", "host 2x", "host 8x"]
    for r in runs:
        assert r["device_hit"] + r["host_hit"] + r["miss"] == r["prompt_tokens"]
    assert (runs[0]["host_hit"], runs[0]["loaded_back"]) == (0, 0)
    assert runs[2]["host_hit"] > 0
    assert radix_main(argv[:2] + ["--host-ratio", "2"]) == 2
    assert "needs a bounded --capacity" in capsys.readouterr().err
    assert radix_main(argv[:4] + ["--host-ratio", "2", "--page-size", "16"]) == 2
    assert "--page-size cannot apply" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_the_events_rebuild_every_node_and_tier(policy):
    """Random requests over shared prefixes (device 48, host 61 or 48, page 1 or 4): after each
    one, the tier events alone (TierModel) give the cache's nodes, parents, sizes and
    residency, so every demotion, drop, backup, reclaim, load and restore is an event; and the
    cache's invariants hold."""
    import random

    from radix.hosttier.tiermodel import Residency, TierModel

    moved = [0, 0]
    for page, host in ((1, 61), (4, 48)):
        rng = random.Random(7)
        sink = ev.ListSink()
        c = HostTierCache(SlotAllocator(48, page_size=page), host, policy, page, sink=sink,
                          load_back_threshold=4)
        model = TierModel()
        roots = [[rng.randrange(3) for _ in range(rng.randrange(4, 16))] for _ in range(6)]
        for _ in range(60):
            prompt = rng.choice(roots) + [rng.randrange(3) for _ in range(rng.randrange(1, 12))]
            serve_request(c, prompt, [rng.randrange(3)])
            model.apply_all(sink.events)
            sink.events.clear()
            want = {n.id: Residency(n.parent.id, len(n.key), n.value is not None,
                                    n.host_value is not None)
                    for n in c.nodes() if n.parent is not None}
            assert model.nodes == want
            c.check_invariants()
        moved = [moved[0] + c.counts().demoted, moved[1] + c.counts().loaded_back]
    assert all(moved), moved  # both moves happened


def test_device_only_is_the_plain_radix_cache():
    """Oracle: with a host pool of 0 nothing is ever backed up, so the host-tier cache must hit
    exactly what RadixCache (unified flavor) hits on the same requests, request by request:
    the customer-support example (26 requests with their replies) at a device of 3,274 tokens,
    its longest request, where 51,750 prompt tokens hit and 11,336 are evicted on the way."""
    from radix.hosttier.replay import trace_units
    from radix.traces import load_trace
    from radix.tree.radix_cache import RadixCache

    _, reqs = trace_units(load_trace("examples/traces/customer_support.jsonl.gz"))
    size = max(len(u) + len(r) for u, r, _ in reqs)
    ours = HostTierCache(SlotAllocator(size), 0)
    alloc = SlotAllocator(size)
    plain = RadixCache(allocator=alloc)
    hits = 0
    for prompt, reply, _ in reqs:
        got = serve_request(ours, prompt, reply)
        m = plain.match_prefix(prompt[:-1])
        plain.inc_lock_ref(m.last_node)
        tokens, prefix = prompt + reply, m.slot_ids
        short = len(tokens) - len(prefix) - alloc.available_size()
        if short > 0:
            plain.evict(short)
        row = list(prefix) + alloc.alloc(len(tokens) - len(prefix))
        done = plain.insert(tokens, row)
        alloc.free(row[len(prefix):done.prefix_len])
        plain.dec_lock_ref(m.last_node)
        assert (got.device_hit, got.host_hit) == (m.prefix_len, 0)
        hits += m.prefix_len
    assert (size, hits, ours.counts().dropped_unbacked) == (3274, 51750, 11336)
    assert ours.evictable_size_ == plain.evictable_size()


def _aba(tmp_path):
    """Chat A (tokens 1..12), chat B (101..112), chat A again, 100 s apart."""
    path = tmp_path / "aba.jsonl"
    rows = [("a1", 0.0, range(1, 13)), ("b", 100.0, range(101, 113)),
            ("a2", 200.0, range(1, 13))]
    path.write_text("".join(json.dumps({"rid": r, "arrival": t, "tokens": list(toks),
                                        "output_len": 1}) + "\n" for r, t, toks in rows))
    return path


def test_cluster_splits_each_replicas_hits_by_tier(tmp_path, capsys):
    """A = 1..12, B = 101..112, then A again, 100 s apart; each replica's device pool 16
    tokens, host 2x = 32 + 1 padding page = 33. One replica: B's 12 tokens need A's slots;
    with no host A is dropped and the second A misses all 12; with the host, A was backed up at
    insert (write_through), is demoted, and its match of A[:-1] finds 11 tokens on the host,
    at least the load-back threshold (10), so they are loaded back (B is demoted for room).
    Two replicas, round robin: A, B, A go to replicas 0, 1, 0, so the second A finds its 11
    tokens still on replica 0's device, host or not.
    (device, host, miss) over the 36 prompt tokens: N=1 (0, 0, 36) and (0, 11, 25);
    N=2 (11, 0, 25) twice."""
    path = _aba(tmp_path)
    argv = ["cluster", str(path), "--replicas", "1,2", "--router", "round-robin",
            "--capacity", "16", "--host-ratio", "2"]
    assert radix_main(argv + ["--json"]) == 0
    got = [[(t["device_hit"], t["host_hit"], t["miss"]) for t in r["host_tier"]]
           for r in json.loads(capsys.readouterr().out)]
    assert got == [[(0, 0, 36), (0, 11, 25)], [(11, 0, 25), (11, 0, 25)]]
    assert radix_main(argv) == 0
    assert "2 round-robin     host 2x" in capsys.readouterr().out
    assert radix_main(argv[:6] + ["--host-ratio", "2"]) == 2
    assert "needs a bounded --capacity" in capsys.readouterr().err
    assert radix_main(["cluster", "examples/traces/mooncake_excerpt.jsonl", "--replicas", "1",
                       "--router", "round-robin", "--capacity", "100", "--host-ratio", "2"]) == 2
    assert "--capacity: capacity 100 is under one 512-token unit" in capsys.readouterr().err


def test_tour_frames_rebuild_each_requests_tree_from_its_events():
    """run_frames (scenarios/hosttier.py): the tree after each request's last move, rebuilt from
    the events alone, is the cache's own tree after that request (run_walk), node for node;
    the moves in order are A inserted, backed up; A demoted, B inserted, backed up; A split,
    B demoted, A's 5 tokens loaded back, A's last token restored."""
    from scenarios.hosttier import run_frames, run_walk

    frames, steps = run_frames(), run_walk()
    for k, step in enumerate(steps):
        last = [f for f in frames if f.request == k][-1]
        assert last.nodes == step.nodes
    assert [(type(f.event).__name__, f.moved) for f in frames[1:]] == [
        ("NodeInserted", (1,)), ("KVBackedUp", (1,)), ("NodeDemoted", (1,)),
        ("NodeInserted", (2,)), ("KVBackedUp", (2,)), ("NodeSplit", (3, 1)),
        ("NodeDemoted", (2,)), ("KVLoadedBack", (3,)), ("DeviceRestored", (1,))]


def test_configs_splits_the_page1_configurations_by_tier(tmp_path, capsys):
    """configs --host-ratio on the A, B, A trace (device 16, host 33): both page-1
    configurations (LRU and SLRU: A is the only leaf to evict for B, B the only one for A's
    load back) give device only (0, 0, 36) and host 2x (0, 11, 25), as the cluster test's
    one replica; page 16 and the disabled cache are left out, saying why."""
    argv = ["configs", str(_aba(tmp_path)), "--capacity", "16", "--host-ratio", "2",
            "--jobs", "1"]
    assert radix_main(argv + ["--json"]) == 0
    tiers = json.loads(capsys.readouterr().out)["host_tier"]
    for name in ("fcfs+lru+page1", "lpm+slru"):
        assert [(t["device_hit"], t["host_hit"], t["miss"]) for t in tiers[name]] == [
            (0, 0, 36), (0, 11, 25)]
    assert tiers["page16"].startswith("left out") and tiers["no-cache"].startswith("left out")
    assert radix_main(argv + ["--chunk", "8"]) == 2
    assert "no --chunk" in capsys.readouterr().err
