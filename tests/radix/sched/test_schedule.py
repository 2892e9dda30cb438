"""Schedule policies: LPM with in-batch deprioritization, the loud fallback, DFS weight, others."""

from __future__ import annotations

from radix.events import ListSink, PolicyFellBack, QueueSorted, RequestRanked
from radix.request import Req
from radix.sched.policy import SchedulePolicy, dfs_weight_order
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache


def rids(queue):
    return [r.rid for r in queue]


def test_lpm_sorts_by_capped_match_and_deprioritizes_in_batch_duplicates():
    """Tree holds [0..99]. Queue: a = 40 cold tokens, b = [0..99] exactly (match 100, capped at
    input_len - 1 = 99), c = [0..49] + cold (match 50), d = a's 40 tokens + 1 (cached match 0 <= 32,
    in-batch match 40 >= 32: deprioritized), e = 10 cold tokens different from a (in-batch 0).
    LPM: b (99), c (50), a (0), e (0), then d last."""
    tree = RadixCache()
    tree.insert(RadixKey(range(100)))
    cold = list(range(1000, 1040))
    q = [Req("a", cold), Req("b", list(range(100))), Req("c", list(range(50)) + [7777] * 5),
         Req("d", cold + [5]), Req("e", list(range(2000, 2010)))]
    sink = ListSink()
    report = SchedulePolicy("lpm", tree, sink=sink).calc_priority(q)
    assert rids(q) == ["b", "c", "a", "e", "d"]
    assert report.prefix_lens == {"a": 0, "b": 99, "c": 50, "d": 0, "e": 0}
    assert report.deprioritized == {"d"}
    ranked = {e.rid: e for e in sink.events if isinstance(e, RequestRanked)}
    assert ranked["d"].in_batch_len == 40 and ranked["d"].deprioritized
    assert ranked["b"].in_batch_len is None and "no in-batch check" in ranked["b"].reason
    (sorted_ev,) = [e for e in sink.events if isinstance(e, QueueSorted)]
    assert sorted_ev.order_before == ("a", "b", "c", "d", "e")
    assert sorted_ev.order_after == ("b", "c", "a", "e", "d") and sorted_ev.deprioritized == ("d",)


def test_in_batch_thresholds_are_configurable_and_minus_one_disables():
    """Two requests share 20 cold tokens: under the default 32 nothing is deprioritized; with
    deprioritize_threshold 16 the second waits; with check_threshold -1 nobody is checked."""
    shared = list(range(500, 520))
    def queue():
        return [Req("x", shared + [1]), Req("y", shared + [2])]
    assert SchedulePolicy("lpm", RadixCache()).calc_priority(queue()).deprioritized == set()
    low = SchedulePolicy("lpm", RadixCache(), deprioritize_threshold=16)
    assert low.calc_priority(queue()).deprioritized == {"y"}
    off = SchedulePolicy("lpm", RadixCache(), deprioritize_threshold=16, check_threshold=-1)
    assert off.calc_priority(queue()).deprioritized == set()


def test_lpm_falls_back_to_fcfs_past_128_waiting_and_says_so():
    """128 waiting: LPM sorts (the warm request goes first). 129: SGLang turns LPM into FCFS
    (queue order kept); here a PolicyFellBack event and a notice say so."""
    tree = RadixCache()
    tree.insert(RadixKey(range(64)))
    def queue(n):
        return [Req(f"r{i:03d}", [10_000 + i] * 3) for i in range(n - 1)] + [
            Req("warm", list(range(64)) + [1])]
    sink = ListSink()
    policy = SchedulePolicy("lpm", tree, sink=sink)
    q = queue(128)
    assert policy.calc_priority(q).notice is None and q[0].rid == "warm"
    assert not any(isinstance(e, PolicyFellBack) for e in sink.events)
    q = queue(129)
    report = policy.calc_priority(q)
    assert report.active_policy == "fcfs" and q[-1].rid == "warm"
    assert "129" in report.notice and "FCFS" in report.notice
    (fell,) = [e for e in sink.events if isinstance(e, PolicyFellBack)]
    assert (fell.queue_len, fell.limit, fell.fallback) == (129, 128, "fcfs")


def test_dfs_weight_order_on_a_constructed_queue():
    """Tree: root -> A=[1,2] -> B=[1,2,3,4]; root -> C=[9,9]. Waiting: a1, a2 end at A, b1 at B,
    c1, c2, c3 at C. Weights: A = 2 + 1 = 3, C = 3; tie, so child order (A inserted first).
    Post-order: B's b1, then A's a1 a2, then C's c1 c2 c3. With one more request at B,
    A weighs 4 and still goes first; with a fourth at C, C (4) beats A (3) and goes first."""
    tree = RadixCache()
    tree.insert(RadixKey([1, 2, 3, 4]))
    tree.insert(RadixKey([1, 2, 5]))  # splits [1,2,3,4] into A=[1,2] and B=[3,4]
    tree.insert(RadixKey([9, 9]))
    def q(n_c):
        return ([Req("a1", [1, 2, 7]), Req("c1", [9, 9, 0])] + [Req("b1", [1, 2, 3, 4, 8])]
                + [Req(f"c{i}", [9, 9, i]) for i in range(2, n_c + 1)] + [Req("a2", [1, 2, 6])])
    queue = q(3)
    SchedulePolicy("dfs-weight", tree).calc_priority(queue)
    assert rids(queue) == ["b1", "a1", "a2", "c1", "c2", "c3"]
    queue = q(4)
    SchedulePolicy("dfs-weight", tree).calc_priority(queue)
    assert rids(queue) == ["c1", "c2", "c3", "c4", "b1", "a1", "a2"]


def test_dfs_weight_order_helper_puts_a_node_after_its_subtree():
    tree = RadixCache()
    tree.insert(RadixKey([1, 2, 3]))
    tree.insert(RadixKey([1, 4]))
    short, deep = Req("short", [1]), Req("deep", [1, 2, 3])
    nodes = {r.rid: tree.match_prefix(RadixKey(r.origin_input_ids)).last_node for r in
             (short, deep)}
    assert rids(dfs_weight_order(tree, [short, deep], nodes)) == ["deep", "short"]


def test_agnostic_policies():
    """fcfs keeps order (with priority scheduling: larger priority first, then arrival);
    lof: longest max_new_tokens first; random: reproducible by seed; routing-key: keys most
    frequent in the running batch first."""
    tree = RadixCache()
    q = [Req("a", [1], max_new_tokens=5, priority=0, arrival=0.0),
         Req("b", [2], max_new_tokens=50, priority=2, arrival=1.0),
         Req("c", [3], max_new_tokens=20, priority=2, arrival=0.5)]
    fcfs = list(q)
    SchedulePolicy("fcfs", tree).calc_priority(fcfs)
    assert rids(fcfs) == ["a", "b", "c"]
    SchedulePolicy("fcfs", tree, enable_priority_scheduling=True).calc_priority(fcfs)
    assert rids(fcfs) == ["c", "b", "a"]
    lof = list(q)
    SchedulePolicy("lof", tree).calc_priority(lof)
    assert rids(lof) == ["b", "c", "a"]
    many = [Req(str(i), [i]) for i in range(20)]
    r1, r2 = list(many), list(many)
    SchedulePolicy("random", tree, seed=7).calc_priority(r1)
    SchedulePolicy("random", tree, seed=7).calc_priority(r2)
    assert rids(r1) == rids(r2) != rids(many)
    keyed = list(q)
    for r, k in zip(keyed, ["x", "y", None]):
        r.routing_key = k
    running = [Req("r1", [0]), Req("r2", [0]), Req("r3", [0])]
    for r, k in zip(running, ["y", "y", "x"]):
        r.routing_key = k
    SchedulePolicy("routing-key", tree).calc_priority(keyed, running)
    assert rids(keyed) == ["b", "a", "c"]


def test_cache_aware_policy_on_a_disabled_cache_is_fcfs_and_unknown_policy_is_refused():
    assert SchedulePolicy("lpm", RadixCache(disable=True)).policy == "fcfs"
    try:
        SchedulePolicy("sjf", RadixCache())
    except ValueError as exc:
        assert "sjf" in str(exc)
    else:
        raise AssertionError("an unknown policy was accepted")


def test_lpm_fallback_to_fcfs_ignores_priorities_as_sglang_does():
    """SGLang sorts FCFS by (priority, arrival) only when FCFS is the configured policy; LPM's
    fallback past 128 waiting keeps the queue as it is (found by tools/diff_sglang_schedule.py).
    129 requests, the last one with priority 5: configured FCFS puts it first, LPM's fallback
    leaves it last."""
    def queue():
        return [Req(f"r{i:03d}", [i], arrival=float(i)) for i in range(128)] + [
            Req("vip", [999], priority=5, arrival=200.0)]
    fcfs, lpm = queue(), queue()
    SchedulePolicy("fcfs", RadixCache(), enable_priority_scheduling=True).calc_priority(fcfs)
    assert fcfs[0].rid == "vip"
    report = SchedulePolicy("lpm", RadixCache(), enable_priority_scheduling=True).calc_priority(lpm)
    assert report.active_policy == "fcfs" and rids(lpm) == rids(queue())


def test_cache_agnostic_sort_refreshes_waiting_prefixes_head_last_under_lru():
    """SGLang's waiting-prefix refresh (on by default): under LRU, the 1st, 33rd, 65th...
    cache-agnostic sort re-matches the first 128 waiting prefixes, head last, so LRU evicts in
    reverse admission order. Tree: A = [1,1,1,1] inserted before B = [2,2,2,2], so A is older.
    Sort 1 over [a, b] (a = A + [5], b = B + [5]) touches b then a: A is now the newest.
    Sort 2 over [b, a] touches nothing (were it to, B would be newest). evict(4) takes B.
    Under LFU no sort touches: a request for [1,1,5] leaves A whole instead of splitting it."""
    tree = RadixCache(eviction_policy="lru")
    tree.insert(RadixKey([1, 1, 1, 1]))
    tree.insert(RadixKey([2, 2, 2, 2]))
    policy = SchedulePolicy("fcfs", tree)
    a, b = Req("a", [1, 1, 1, 1, 5]), Req("b", [2, 2, 2, 2, 5])
    policy.calc_priority([a, b])
    policy.calc_priority([b, a])
    assert tree.evict(4).num_evicted == 4
    assert [list(c.key.token_ids) for c in tree.root_node.children.values()] == [[1, 1, 1, 1]]
    for eviction, lens in (("lru", [2]), ("lfu", [4])):
        other = RadixCache(eviction_policy=eviction)
        other.insert(RadixKey([1, 1, 1, 1]))
        SchedulePolicy("lof", other).calc_priority([Req("a", [1, 1, 5])])
        assert [len(c.key) for c in other.root_node.children.values()] == lens


def _adder(capacity: int, **kw):
    from radix.request import SlotAllocator
    from radix.sched.admission import PrefillAdder
    tree = RadixCache()
    return tree, PrefillAdder(tree, SlotAllocator(capacity), [], **kw)


def _offer(tree, adder, req):
    from radix.sched.admission import match_for_admission
    match_for_admission(tree, req)
    return adder.add_one_req(req)


def test_admission_follows_sglang_0_5_23_prefill_budget():
    """Facts from SGLang 0.5.23's PrefillAdder / PrefillBudget (schedule_policy.py, read by
    hand beside tools/diff_sglang_schedule.py):
    - a request must fit extend + max_new + one page (per_req_token_overhead) < free+evictable:
      1,000 slots, a cold 900-token prompt with max_new 99: 900 + 99 + 1 = 1,000 is not
      < 1,000, so NO_TOKEN; with max_new 98, 999 fits;
    - each admission reserves one page more: rem_total offset 900 + 1 + 98 = 999;
    - with chunking on, the input budget does not stop a request (budget_state does): input
      budget 100, chunk budget 100; a (60 tokens) leaves 40 of each; b (50) is chunked to 40
      instead of being refused as 50 >= 40;
    - a retracted request reserves its whole max_new_tokens again: 30 outputs of 40 allowed,
      the offset still grows by 40, not 10."""
    from radix.sched.admission import AddReqResult
    tree, adder = _adder(1000)
    assert _offer(tree, adder, Req("big", list(range(900)), max_new_tokens=99)) \
        == AddReqResult.NO_TOKEN
    assert _offer(tree, adder, Req("fits", list(range(900)), max_new_tokens=98)) \
        == AddReqResult.CONTINUE
    assert [r.rid for r in adder.can_run_list] == ["fits"]
    assert adder.rem_total_token_offset == 999
    tree, adder = _adder(10_000, rem_input_tokens=100, rem_chunk_tokens=100)
    assert _offer(tree, adder, Req("a", list(range(60)))) == AddReqResult.CONTINUE
    assert _offer(tree, adder, Req("b", list(range(100, 150)))) == AddReqResult.OTHER
    assert adder.extend_lens == [60, 40] and adder.new_chunked_req.rid == "b"
    tree, adder = _adder(10_000)
    back = Req("back", [5, 6, 7], list(range(30)), max_new_tokens=40)
    _offer(tree, adder, back)
    assert adder.rem_total_token_offset == 33 + 1 + 40
