"""The explainer's probes: one simulated run watched, every prompt token put in one bucket.

While the simulator runs (sim.py), probes record per cache everything it ever held (prefix
tries per namespace and across them, radix/tokens/runs.py), every eviction, and the prompts that
had arrived; at a request's first admission (tree) or lookup (blocks) its prompt splits at
nested lengths (`split`), so its buckets add up to its tokens by construction.
Follows nothing upstream. Leaves out: the report and the what-ifs (explain.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from radix import events as ev
from radix.request import Req
from radix.runs.sim import SimConfig, SimRun, build, run
from radix.sched.scheduler import Runner
from radix.tokens import TokenRuns
from radix.tokens.runs import PrefixTrie, Walk
from radix.traces.hashview import stretch_hash_ids
from radix.traces.trace import Trace

BUCKETS = ("hit", "evicted", "last_token_cap", "block_rounding", "block_floor", "in_flight",
           "other_namespace", "first_seen", "rejected")
BLOCK_POLICY = "vLLM free queue (LRU: the block whose ref_cnt reached 0 first goes first)"


class Eviction(NamedTuple):
    """The policy decision that evicted the first token a request missed."""

    cache: str  # "tree" or "blocks"
    step: int  # the simulator step it happened in (StepReport index)
    time: float  # simulated seconds at that step
    policy: str  # the tree's eviction policy, or BLOCK_POLICY
    node_id: int | None  # tree: the evicted node
    tokens: int  # tokens that eviction (node, or pop of blocks) freed in all


class RequestBuckets(NamedTuple):
    rid: str
    index: int  # place in the trace (arrival order)
    prompt_tokens: int
    step: int | None  # simulator step of its first admission (None: rejected)
    time: float | None  # simulated seconds then
    tree: dict[str, int]  # bucket -> tokens (BUCKETS), adding up to prompt_tokens
    blocks: dict[str, int] | None  # the block cache's buckets (None: no shadow)
    tree_evicted_by: Eviction | None  # set when tree["evicted"] > 0
    blocks_evicted_by: Eviction | None
    recomputed_tree: int  # tokens prefilled again after a retraction (not in the buckets)
    recomputed_blocks: int


def one_namespace(reqs: Sequence[Req]) -> bool:
    """Whether every request has the same (extra_key, cache_salt): one namespace in both
    caches.

    >>> a, b, salted = Req("a", [1]), Req("b", [2]), Req("c", [3], cache_salt="s")
    >>> one_namespace([a, b]), one_namespace([a, salted])
    (True, False)
    """
    return len({(r.extra_key, r.cache_salt) for r in reqs}) <= 1


def namespace(req: Req, blocks: bool) -> Hashable:
    """The tree keys namespaces by (extra_key, cache_salt); vLLM treats "" as none."""
    if blocks:
        return (req.extra_key or None, req.cache_salt or None)
    if req.extra_key is None and req.cache_salt is None:
        return None
    return (req.extra_key, req.cache_salt)


def split(n: int, hit: int, done: int, seen: int, any_ns: int, unit: int) -> dict[str, int]:
    """The buckets of an n-token prompt from its nested lengths (unit: page or block size):

        0 ... hit ... capped ... no-cap ... done ....... seen ....... any ............. n
        | hit | evicted | last-token | block    | in flight | other     | first seen |
                        | cap        | rounding |           | namespace |            |
                                     | or floor |

    done: the longest prefix this cache ever held before (same namespace); capped / no-cap:
    what an unbounded cache would have matched with / without the input_len - 1 rule, in whole
    units; seen: also counting earlier requests not yet prefilled; any: in any namespace.
    done - no-cap is the block floor when no whole unit was shared (done < unit: vLLM's
    `queries > 0, hits = 0` for a shared prefix shorter than one block), else block rounding.

    A 40-token prompt, blocks of 16, all of it cached before and 32 tokens hit: the cap keeps
    (40 - 1) // 16 = 2 blocks, so nothing was evicted and 8 tokens are the partial last block.
    >>> split(40, 32, 40, 40, 40, 16)["block_rounding"]
    8
    >>> split(32, 16, 32, 32, 32, 16)["last_token_cap"]  # the whole last block recomputes
    16
    >>> split(300, 0, 240, 240, 240, 784)["block_floor"]  # 240 shared, blocks of 784
    240
    """
    nocap = done // unit * unit
    capped = min(done, n - 1) // unit * unit
    out = {"hit": hit, "evicted": capped - hit, "last_token_cap": nocap - capped,
           "block_rounding": done - nocap if nocap else 0,
           "block_floor": 0 if nocap else done, "in_flight": seen - done,
           "other_namespace": any_ns - seen, "first_seen": n - any_ns, "rejected": 0}
    if min(out.values()) < 0:
        raise AssertionError(f"buckets out of order: {out} (n={n})")
    return out


class Side:
    """One cache's record: what it ever held (per namespace and across them). `single`: the
    trace has one namespace, so the trie across namespaces would get exactly `ever`'s inserts
    (the same nodes, under another root key): `ever_any` is then `ever` itself, not built twice,
    and a prompt's length across namespaces is its length in its own."""

    def __init__(self, single: bool = False) -> None:
        self.single = single
        self.ever = PrefixTrie()
        self.ever_any = self.ever if single else PrefixTrie()
        self.arrived = PrefixTrie()  # prompts of the requests arrived so far
        self.walks: dict[str, tuple[Walk, Walk]] = {}  # rid -> its last walks (ns, any)

    def record(self, tokens: Sequence[int], ns: Hashable, owner: Req | None = None) -> None:
        """Adds `tokens` to what was ever held. With `owner`, a sequence that only grows: its
        last walks resume, and its own nodes grow in place (O(1) a record, not O(path))."""
        if not len(tokens):
            return
        n = len(tokens)
        if owner is None:
            self.ever.insert(tokens, ns, n)
            if not self.single:
                self.ever_any.insert(tokens, None, n)
            return
        last = self.walks.get(owner.rid, (None, None))
        walk = self.ever.insert(tokens, ns, n, owner, last[0])
        self.walks[owner.rid] = (walk, walk if self.single else
                                 self.ever_any.insert(tokens, None, n, owner, last[1]))

    def lengths(self, prompt: Sequence[int], ns: Hashable, arrived: tuple[int, int]
                ) -> tuple[int, int, int]:
        """(done, seen, any) for a prompt now; `arrived` = (seen, any) at its arrival."""
        n = len(prompt)
        done = self.ever.known(prompt, ns, n)
        seen = max(arrived[0], done)
        across = done if self.single else self.ever_any.known(prompt, None, n)
        return done, seen, max(arrived[1], across, seen)


class _TreeEvents:
    """The tree's kv_sink: tells the probe every key inserted and every leaf evicted."""

    def __init__(self) -> None:
        self.probe: Probe | None = None

    def emit(self, event: ev.Event) -> None:
        if type(event) is ev.KeyInserted:
            self.probe.tree.record(event.token_ids, event.namespace)
        elif type(event) is ev.LeafEvicted:
            self.probe.on_tree_evicted(event)


class PrefixSaved(NamedTuple):
    """A stretch of cached prefix and the prompt tokens its hits saved."""

    cache: str  # "tree" or "blocks"
    tokens_saved: int
    requests: int  # hits that went through it
    start: int  # token offset where the stretch begins
    end: int  # the deepest token a hit reached in it
    namespace: Any  # None: the default namespace
    head: list[int]  # its first tokens (Mooncake: hash id = token // 512)
    hash_ids: list[int] | None = None  # Mooncake: the trace's hash ids of its first blocks


class Probe:
    """Watches one simulated run; `rows()` gives every request's buckets afterwards."""

    def __init__(self, sim: SimRun) -> None:
        self.sim = sim
        # one (extra_key, cache_salt) in the whole trace: one namespace in either cache, so
        # the tries across namespaces are the per-namespace ones (Side)
        self.single = one_namespace(sim.reqs)
        self.tree, self.blocks = Side(self.single), Side(self.single)
        self.arrived_any = PrefixTrie()
        self.at_arrival: dict[str, tuple[int, int, int]] = {}
        self.tree_rows: dict[str, tuple[int, float, dict[str, int], Eviction | None]] = {}
        self.block_rows: dict[str, tuple[dict[str, int], Eviction | None]] = {}
        self.dirty: dict[str, tuple[Req, int]] = {}  # rid -> (req, tokens computed)
        self.saved: dict[str, dict[int, list]] = {"tree": {}, "blocks": {}}

    # ------------------------------------------------------------------ hooks
    def on_arrival(self, req: Req) -> None:
        p, n = req.origin_input_ids, len(req.origin_input_ids)
        if self.single:  # the three tries would get the same prompts: one is kept
            walk = self.arrived_any.walk(p, None, n)
            self.at_arrival[req.rid] = (walk.pos, walk.pos, walk.pos)
            self.arrived_any.insert(p, None, n, resume=walk)
            return
        t_ns, b_ns = namespace(req, False), namespace(req, True)
        # each insert resumes the walk that measured how much was known (nothing changed the
        # trie between the two): one walk a trie, not two
        walks = (self.tree.arrived.walk(p, t_ns, n), self.blocks.arrived.walk(p, b_ns, n),
                 self.arrived_any.walk(p, None, n))
        self.at_arrival[req.rid] = (walks[0].pos, walks[1].pos, walks[2].pos)
        self.tree.arrived.insert(p, t_ns, n, resume=walks[0])
        self.blocks.arrived.insert(p, b_ns, n, resume=walks[1])
        self.arrived_any.insert(p, None, n, resume=walks[2])

    def on_extend(self, reqs: list[Req]) -> None:
        """A prefill batch is about to run: its matches are final, its inserts to come."""
        for req in reqs:
            if req.rid not in self.tree_rows:
                self._explain_tree(req)

    def on_tree_evicted(self, e: ev.LeafEvicted) -> None:
        tokens = e.token_ids
        start = len(tokens) - e.num_tokens
        mark = Eviction("tree", self.sim.num_steps, self.sim.clock.now, self.sim.config.eviction,
                        e.node_id, e.num_tokens)
        for tnode, lo, hi in self.tree.ever.walk(tokens, e.namespace, len(tokens)).pieces:
            if hi > start:
                tnode.add_mark(max(lo, start), hi, mark)

    def on_lookup(self, req: Req, hit: Any) -> None:
        if req.rid in self.block_rows:
            return  # a re-admission after retraction: its first lookup counted
        self._flush()
        p, ns = req.origin_input_ids, namespace(req, True)
        a = self.at_arrival[req.rid]
        done, seen, any_ns = self.blocks.lengths(p, ns, (a[1], a[2]))
        bs = self.sim.shadow.block_size
        buckets = split(len(p), hit.num_computed_tokens, done, seen, any_ns, bs)
        by = None
        if buckets["evicted"]:
            mark = self.sim.shadow.manager.last_eviction(p, ns, hit.num_computed_tokens // bs)
            if mark is not None:
                by = Eviction("blocks", mark.now[0], mark.now[1], BLOCK_POLICY, None,
                              mark.num_blocks * bs)
        self.block_rows[req.rid] = (buckets, by)
        self._credit("blocks", self.blocks.ever, p, ns, hit.num_computed_tokens)

    def on_compute(self, req: Req) -> None:
        self.dirty[req.rid] = (req, self.sim.shadow.computed[req.rid])

    # ------------------------------------------------------------------ work
    def _flush(self) -> None:
        """Records what the block cache computed since the last lookup (lazily: a lookup is
        the only reader)."""
        for req, computed in self.dirty.values():
            tokens = req.all_ids[:computed]
            self.blocks.record(tokens, namespace(req, True), req)
        self.dirty.clear()

    def _explain_tree(self, req: Req) -> None:
        p, ns, page = req.origin_input_ids, namespace(req, False), self.sim.tree.page_size
        a = self.at_arrival[req.rid]
        hit = int(req.metrics.get("matched_tokens", 0))
        done, seen, any_ns = self.tree.lengths(p, ns, (a[0], a[2]))
        buckets = split(len(p), hit, done, seen, any_ns, page)
        by = None
        if buckets["evicted"]:
            by = self._tree_eviction(p, ns, hit, page)
        self.tree_rows[req.rid] = (self.sim.num_steps, self.sim.clock.now, buckets, by)
        self._credit("tree", self.tree.ever, p, ns, hit)

    def _tree_eviction(self, p: Sequence[int], ns: Hashable, hit: int, page: int
                       ) -> Eviction | None:
        """The latest eviction of the first missed token (of the first missed page)."""
        walk = self.tree.ever.walk(p, ns, hit + page)
        for pos in range(hit, min(hit + page, walk.pos)):
            node = next(t for t, lo, hi in walk.pieces if lo <= pos < hi)
            for lo, hi, mark in reversed(node.marks):
                if lo <= pos < hi:
                    return mark
        return None

    def _credit(self, cache: str, trie: PrefixTrie, p: Sequence[int], ns: Hashable,
                upto: int) -> None:
        if upto <= 0:
            return
        saved = self.saved[cache]
        for node, lo, hi in trie.walk(p, ns, upto).pieces:
            entry = saved.setdefault(id(node), [node, 0, 0, 0])
            entry[1] += hi - lo
            entry[2] += 1
            entry[3] = max(entry[3], hi)

    def top_prefixes(self, cache: str, top: int) -> list[PrefixSaved]:
        trie = (self.tree if cache == "tree" else self.blocks).ever
        names = {id(root): ns for ns, root in trie.roots.items()}
        best = sorted(self.saved[cache].values(), key=lambda e: (-e[1], e[0].d0))[:top]
        out = []
        for node, tokens, requests, deepest in best:
            root = node
            while root.parent is not None:
                root = root.parent
            ns = names[id(root)]
            content = node.content
            out.append(PrefixSaved(cache, tokens, requests, node.d0, deepest,
                                   None if ns == (None, None) else ns,
                                   list(content[node.d0:min(deepest, node.d0 + 8)]),
                                   stretch_hash_ids(content, node.d0, deepest)
                                   if isinstance(content, TokenRuns) else None))
        return out


class _Runner:
    """The simulator's runner, passing each prefill batch to the probe first."""

    def __init__(self, inner: Runner, probe: Probe) -> None:
        self.inner, self.probe = inner, probe

    def extend(self, reqs, prefix_lens):
        self.probe.on_extend(reqs)
        return self.inner.extend(reqs, prefix_lens)

    def __getattr__(self, name: str) -> Any:  # decode, decode_span, span_tokens
        return getattr(self.inner, name)


def watched_run(trace: Trace, config: SimConfig | None = None,
                on_arrival: Any = None) -> tuple[Probe, Any]:
    """Builds and runs the simulator with the probes in; returns (probe, SimResult). The block
    shadow is the block-extent cache (same figures as the per-block one, and it keeps marks).
    `on_arrival(req)` sees each arrival after the probe (progress; it may raise to stop)."""
    tree_events = _TreeEvents()
    sim = build(trace, config, kv_sink=tree_events, record_evictions=True, extent_shadow=True)
    probe = tree_events.probe = Probe(sim)
    sim.sched.runner = _Runner(sim.sched.runner, probe)
    if sim.shadow is not None:
        sim.shadow.on_lookup, sim.shadow.on_compute = probe.on_lookup, probe.on_compute
        sim.shadow.manager.pool.clock = lambda: (sim.num_steps, sim.clock.now)
    if on_arrival is None:
        return probe, run(sim, on_arrival=probe.on_arrival)

    def both(req: Req) -> None:
        probe.on_arrival(req)
        on_arrival(req)
    return probe, run(sim, on_arrival=both)
