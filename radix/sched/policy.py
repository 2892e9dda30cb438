"""Schedule policies: the order in which waiting requests are offered to admission.

Follows SGLang's `SchedulePolicy` (python/sglang/srt/managers/schedule_policy.py): lpm, dfs-weight,
fcfs, lof, random and routing-key; LPM's in-batch prefix deprioritization through a throwaway
radix tree of this round's waiting requests; LPM falling back to FCFS past 128 waiting requests;
the LRU refresh of waiting prefixes after cache-agnostic sorts. Checked by
tools/diff_sglang_schedule.py. Unlike SGLang the fallback is loud (`PolicyFellBack`).
Leaves out: hrrn, shortest-prefill-first, hierarchical (host) cache hits.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from radix.events import Event, EventSink, PolicyFellBack, QueueSorted, RequestRanked
from radix.request import Req
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

POLICIES = ("lpm", "dfs-weight", "fcfs", "lof", "random", "routing-key")
CACHE_AWARE = ("lpm", "dfs-weight")
WAITING_QUEUE_PREFIX_MATCH_MAX = 128  # SGLang: LPM's FCFS fallback and the refresh's reach
WAITING_PREFIX_REFRESH_INTERVAL = 32  # SGLang: the refresh runs on every 32nd cache-agnostic sort


class SortReport(NamedTuple):
    active_policy: str  # the policy that ran this round
    notice: str | None  # the fallback notice, or None
    prefix_lens: dict[str, int]  # rid -> capped cached match (cache-aware policies only)
    deprioritized: frozenset[str]  # rids sorted last by in-batch prefix caching


def request_key(req: Req, token_ids: Sequence[int] | None = None) -> RadixKey:
    """The tree key of a request: its tokens in its namespace.

    >>> request_key(Req("a", [1, 2, 3], extra_key="lora")).namespace
    ('lora', None)
    """
    ids = req.all_ids if token_ids is None else token_ids
    return RadixKey(ids, extra_key=req.extra_key, cache_salt=req.cache_salt)


def _routing_key(req: Req) -> str | None:
    return getattr(req, "routing_key", None)


class SchedulePolicy:
    """Sorts a waiting queue in place, as SGLang's `calc_priority` does.

    >>> from radix.tree.radix_cache import RadixCache
    >>> tree = RadixCache(); _ = tree.insert(RadixKey([1, 2, 3, 4]))
    >>> q = [Req("cold", [9, 9, 9]), Req("warm", [1, 2, 3, 4, 5])]
    >>> SchedulePolicy("lpm", tree).calc_priority(q).prefix_lens
    {'cold': 0, 'warm': 4}
    >>> [r.rid for r in q]
    ['warm', 'cold']
    """

    def __init__(
        self,
        policy: str,
        tree_cache: Any,
        *,
        check_threshold: int = 32,  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD; -1 disables
        deprioritize_threshold: int = 32,  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD
        fcfs_fallback_len: int = WAITING_QUEUE_PREFIX_MATCH_MAX,  # LPM is FCFS past this many
        enable_priority_scheduling: bool = False,
        schedule_low_priority_values_first: bool = False,
        seed: int = 0,  # for "random"
        routing_key: Callable[[Req], str | None] = _routing_key,
        sink: EventSink | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown schedule policy {policy!r}; choose from {POLICIES}")
        # SGLang: a cache-aware policy over a disabled cache is plain FCFS.
        disabled = getattr(tree_cache, "disable", False)
        self.policy = "fcfs" if disabled and policy in CACHE_AWARE else policy
        self.tree_cache = tree_cache
        self.check_threshold = check_threshold
        self.deprioritize_threshold = deprioritize_threshold
        self.fcfs_fallback_len = fcfs_fallback_len
        self.enable_priority_scheduling = enable_priority_scheduling
        self.priority_sign = 1 if schedule_low_priority_values_first else -1
        self.routing_key = routing_key
        self._rng = random.Random(seed)
        self._refresh_calls = 0  # cache-agnostic sorts so far (the waiting-prefix refresh)
        self._sink = sink
        # The throwaway tree of this round's waiting requests (SGLang: page_size 1, no KV).
        self.waiting_queue_radix_tree = RadixCache(page_size=1)

    def active_policy(self, queue_len: int) -> str:
        """The policy that runs for a queue of this length (LPM past the limit runs FCFS)."""
        if self.policy == "lpm" and queue_len > self.fcfs_fallback_len:
            return "fcfs"
        return self.policy

    def calc_priority(self, waiting_queue: list[Req], running: Sequence[Req] = ()) -> SortReport:
        """Sorts `waiting_queue` in place; `running` matters to routing-key only."""
        before = tuple(r.rid for r in waiting_queue) if self._sink is not None else ()
        active = self.active_policy(len(waiting_queue))
        notice = None
        if active != self.policy:
            notice = (f"LPM fell back to FCFS: {len(waiting_queue)} requests wait, more than "
                      f"{self.fcfs_fallback_len}; no prefix matching or sorting this round")
            self._emit(PolicyFellBack(self.policy, active, len(waiting_queue),
                                      self.fcfs_fallback_len, notice))
        prefix_lens: dict[str, int] = {}
        deprioritized: set[str] = set()
        if active in CACHE_AWARE:
            last_nodes = self._compute_prefix_matches(waiting_queue, prefix_lens, deprioritized)
            if active == "lpm":
                # Stable sort: ties keep queue order; deprioritized go last, in queue order.
                waiting_queue.sort(key=lambda r: float("inf") if r.rid in deprioritized
                                   else -prefix_lens[r.rid])
            else:
                waiting_queue[:] = dfs_weight_order(self.tree_cache, waiting_queue, last_nodes)
        else:
            self._sort_agnostic(active, waiting_queue, running)
            self._touch_waiting_prefixes(waiting_queue)
        if self._sink is not None:  # (the tuples cost O(queue) a round: only for a listener)
            self._emit(QueueSorted(self.policy, active, before,
                                   tuple(r.rid for r in waiting_queue),
                                   tuple(r.rid for r in waiting_queue if r.rid in deprioritized)))
        return SortReport(active, notice, prefix_lens, frozenset(deprioritized))

    def _compute_prefix_matches(self, waiting_queue: list[Req], prefix_lens: dict[str, int],
                                deprioritized: set[str]) -> dict[str, Any]:
        """Matches each waiting request, fills prefix_lens and deprioritized; returns last nodes."""
        wq_tree = self.waiting_queue_radix_tree
        wq_tree.reset()
        last_nodes = {}
        for r in waiting_queue:
            key = request_key(r)
            match = self.tree_cache.match_prefix(key, rid=r.rid)
            last_nodes[r.rid] = match.last_node
            prefix_lens[r.rid] = min(match.prefix_len, max(len(key) - 1, 0))
            in_batch = None
            if match.prefix_len <= self.check_threshold:
                in_batch = wq_tree.match_prefix(key).prefix_len
                if in_batch >= self.deprioritize_threshold:
                    deprioritized.add(r.rid)
                else:
                    wq_tree.insert(key)
            self._emit(RequestRanked(r.rid, prefix_lens[r.rid], in_batch, r.rid in deprioritized,
                                     self._reason(match.prefix_len, in_batch)))
        return last_nodes

    def _reason(self, cached: int, in_batch: int | None) -> str:
        if in_batch is None:
            return f"cached match {cached} > {self.check_threshold}: no in-batch check"
        if in_batch >= self.deprioritize_threshold:
            return (f"cached match {cached} <= {self.check_threshold} and {in_batch} tokens "
                    f"shared with an earlier waiting request >= {self.deprioritize_threshold}: "
                    "wait for it to fill the cache")
        return (f"cached match {cached} <= {self.check_threshold}, in-batch match {in_batch} < "
                f"{self.deprioritize_threshold}: added to the waiting-queue tree")

    def _sort_agnostic(self, active: str, queue: list[Req], running: Sequence[Req]) -> None:
        sign = self.priority_sign
        if active == "fcfs":
            # SGLang sorts by priority only when FCFS is the configured policy: LPM's fallback
            # to FCFS keeps the queue as it is, priorities or not.
            if self.enable_priority_scheduling and self.policy == "fcfs":
                queue.sort(key=lambda r: (r.priority * sign, r.arrival))
        elif active == "lof":
            if self.enable_priority_scheduling:
                queue.sort(key=lambda r: (r.priority * sign, -r.max_new_tokens))
            else:
                queue.sort(key=lambda r: -r.max_new_tokens)
        elif active == "random":
            self._rng.shuffle(queue)
        elif active == "routing-key":
            counts = Counter(k for k in map(self.routing_key, running) if k)
            if counts:
                def key(r: Req) -> tuple[int, int, str]:
                    k = self.routing_key(r)
                    return (0, -counts[k], k) if k in counts else (1, 0, k or "")
                queue.sort(key=key)

    def _touch_waiting_prefixes(self, queue: list[Req]) -> None:
        """SGLang's waiting-prefix refresh (SGLANG_ENABLE_WAITING_PREFIX_REFRESH, on by default):
        under LRU, a cache-agnostic sort re-matches the first 128 waiting prefixes, head last,
        on every 32nd call (the first included), so LRU evicts in reverse admission order."""
        tree = self.tree_cache
        if (not queue or getattr(tree, "eviction_policy", "lru") != "lru"
                or getattr(tree, "disable", False)):
            return
        calls, self._refresh_calls = self._refresh_calls, self._refresh_calls + 1
        if calls % WAITING_PREFIX_REFRESH_INTERVAL == 0:
            for r in reversed(queue[:WAITING_QUEUE_PREFIX_MATCH_MAX]):
                tree.match_prefix(request_key(r), rid=r.rid)

    def _emit(self, event: Event) -> None:
        if self._sink is not None:
            self._sink.emit(event)


def dfs_weight_order(tree_cache: Any, queue: Sequence[Req], last_nodes: dict[str, Any]) -> list:
    """SGLang's dfs-weight order: a node weighs the requests ending there plus its children's
    weights; visit children heaviest first (ties: child order), a node's own requests after its
    subtree.

    Two requests ending at node A (under root) and one at B (under A), one at C (under root):
    weights A=3 (2 + B's 1), C=1, so the order is B's request, then A's two, then C's.
    """
    own: dict[int, list[Req]] = {}
    nodes: dict[int, Any] = {}
    for r in queue:
        node = last_nodes[r.rid]
        own.setdefault(id(node), []).append(r)
        nodes[id(node)] = node
    weight: dict[int, int] = {k: len(v) for k, v in own.items()}
    for node in list(nodes.values()):  # add each request's weight to every ancestor
        w, parent = len(own[id(node)]), node.parent
        while parent is not None:
            weight[id(parent)] = weight.get(id(parent), 0) + w
            parent = parent.parent
    out: list[Req] = []
    stack: list[tuple[Any, bool]] = [(tree_cache.root_node, False)]
    while stack:  # iterative post-order: children (heaviest first), then the node's own
        node, expanded = stack.pop()
        if expanded:
            out.extend(own.get(id(node), ()))
            continue
        stack.append((node, True))
        kids = [c for c in node.children.values() if weight.get(id(c), 0) > 0]
        kids.sort(key=lambda c: -weight[id(c)])
        stack.extend((c, False) for c in reversed(kids))
    return out
