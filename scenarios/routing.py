"""The Cluster page's runs: a classroom-sized cluster (3 replicas) behind each router.

`classroom_trace` is four conversations of three turns sharing a short system prompt, then a
burst: five follow-ups of conversation A at the same instant (an agent's parallel tool calls)
with long replies, so they stay in flight. Round robin scatters every conversation over the
replicas; cache-aware keeps each on its replica until the burst piles onto A's replica and the
imbalance test sends the rest to the shortest queue. `run_routing` replays a trace through
radix.cluster.sim and returns plain data for viz/routing.py: each request's decision (scores,
loads, the sentence), the replicas' final trees, the router's own view, and `frames`: every
replica's tree and the router's view right after each request (as at the next arrival, every
replica stepped up to it; a request still queued there is not in its tree yet), each with the
request's prompt (scenarios/routing_steps.py says what a step changed). At
most MAX_FRAMES are kept: a longer upload keeps every `stride`-th request's from the first (and
the last), and a step between shows the one before it. The classroom lowers cache-aware's
balance thresholds to its size (abs 2, rel 1.5; sgl-router's defaults are 64 and 1.5), and says
so. `upload_trace` loads and bounds an upload. Leaves out: drawing (viz/routing.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from radix.cluster import ROUTERS, CacheAwareConfig
from radix.cluster.sim import simulate_cluster
from radix.cluster.sweep import Grid, grid_cells, sweep_serial
from radix.runs.sim import SimConfig
from radix.traces import Trace, TraceRequest, load_trace

REPLICAS = 3
MAX_UPLOAD_REQUESTS = 300  # an uploaded trace is drawn request by request: keep it small
MAX_FRAMES = 120  # tree snapshots kept per run (an upload of up to 300 requests keeps keyframes)
SYSTEM = tuple(range(1, 33))  # 32 tokens: 2 blocks of 16
CONVERSATIONS = "ABCD"
CLASSROOM_CACHE_AWARE = CacheAwareConfig(balance_abs_threshold=2, balance_rel_threshold=1.5,
                                         block_size=16)
NOTE = ("cache-aware's balance thresholds lowered to classroom size: abs 2, rel 1.5 "
        "(sgl-router's defaults: 64, 1.5)")


def classroom_trace() -> Trace:
    """Turn t of conversation c: the system prompt + 96 x t tokens of its own (each turn
    extends the last), 8 tokens out; turns 5 s apart, conversations 0.2 s apart. At 12 s,
    five follow-ups of A (its turn-3 prompt + 32 tokens of their own), 200 tokens out each.

    >>> t = classroom_trace(); len(t.requests), t.requests[-1].rid
    (17, 'A-t8')
    """
    reqs = []
    for turn in (1, 2, 3):
        for k, conv in enumerate(CONVERSATIONS):
            own = tuple(1000 * (k + 1) + j for j in range(96 * turn))
            reqs.append(TraceRequest(f"{conv}-t{turn}", 5.0 * (turn - 1) + 0.2 * k,
                                     SYSTEM + own, 8))
    a3 = reqs[8].token_ids  # A's turn 3
    for i in range(5):
        tail = tuple(50_000 + 100 * i + j for j in range(32))
        reqs.append(TraceRequest(f"A-t{4 + i}", 12.0, a3 + tail, 200))
    return Trace("request", reqs, source="classroom")


class Routed(NamedTuple):
    rid: str
    arrival: float  # s
    replica: int
    reason: str
    scores: tuple[float, ...]  # the router's per-replica scores (see radix.cluster)
    loads: tuple[int, ...]  # requests in flight per replica when it was routed
    why: str
    input_tokens: int
    matched_tokens: int  # the chosen replica's tree hit


class Frame(NamedTuple):
    after: int  # index into `routed`: the trees as they were right after this request
    trees: tuple[Any, ...]  # each replica's TreeSnapshot
    prompt: tuple[int, ...]  # the request's tokens (viz marks their path in its replica's tree)
    view: dict[str, Any]  # the router's own view then (see `router_view`)


class RoutingRun(NamedTuple):
    router: str
    routed: list[Routed]
    totals: dict[str, Any]  # radix.cluster.sim's totals
    per_replica: list[dict[str, Any]]
    trees: list[Any]  # each replica's final TreeSnapshot
    view: dict[str, Any]  # the router's view: {"kind": ..., ...} (see `router_view`)
    frames: list[Frame]  # kept snapshots, in request order (see the module docstring)

    def frame_at(self, index: int) -> Frame:
        """The kept frame at or just before request `index` (0-based; request 0's is kept)."""
        return max((f for f in self.frames if f.after <= index), key=lambda f: f.after)


def upload_trace(data: bytes) -> Trace:
    """An uploaded trace for the Cluster page. TraceError (a ValueError naming the line and
    field) for a bad file; ValueError for a trace of another format or of more than
    MAX_UPLOAD_REQUESTS requests."""
    trace = load_trace(data)
    if trace.format not in ("request", "mooncake") or len(trace.requests) > MAX_UPLOAD_REQUESTS:
        raise ValueError(f"the Cluster page draws request or Mooncake traces of at most "
                         f"{MAX_UPLOAD_REQUESTS} requests (`python -m radix cluster` takes any)")
    return trace


def run_routing(trace: Trace, router: str, replicas: int = REPLICAS) -> RoutingRun:
    seen: list[tuple[Any, Any, Any]] = []
    frames: list[Frame] = []
    n = len(trace.requests)
    stride = max(1, -(-n // MAX_FRAMES))

    def keep(sims: list[Any], chooser: Any) -> None:  # before routing request len(seen)
        k = len(seen) - 1
        if k >= 0 and k % stride == 0:
            frames.append(_frame(k, seen[k], sims, chooser))

    config = CLASSROOM_CACHE_AWARE if router == "cache-aware" else None
    res = simulate_cluster(trace, replicas, router, SimConfig(), keep_state=True,
                           router_config=config, watch=keep,
                           on_route=lambda req, d, loads: seen.append((req, d, loads)))
    if seen and (not frames or frames[-1].after != len(seen) - 1):
        frames.append(_frame(len(seen) - 1, seen[-1], res.sims, res.chooser))
    routed = [Routed(req.rid, req.arrival, d.rank, d.reason, d.scores,
                     tuple(x.requests for x in loads), d.why, len(req.origin_input_ids),
                     int(req.metrics.get("matched_tokens", 0)))
              for req, d, loads in seen]
    return RoutingRun(router, routed, res.totals, res.per_replica, list(frames[-1].trees),
                      router_view(res.chooser), frames)


def _frame(k: int, seen: tuple[Any, Any, Any], sims: list[Any], chooser: Any) -> Frame:
    return Frame(k, tuple(sim.tree.snapshot() for sim in sims),
                 tuple(seen[0].origin_input_ids), router_view(chooser))


def router_view(chooser: Any) -> dict[str, Any]:
    """What the router itself holds: the approximate tree (cache-aware, prefix-affinity) as
    its chains (`approx_chains`), or kv-overlap's blocks per replica; else nothing."""
    tree = getattr(chooser, "tree", None)
    if tree is not None:
        return {"kind": "approx-tree", "chains": approx_chains(tree.root),
                "sizes": list(tree.sizes)}
    index = getattr(chooser, "index", None)
    if index is not None and hasattr(index, "blocks"):
        return {"kind": "block-index", "blocks": [len(b) for b in index.blocks]}
    return {"kind": "none"}


def approx_chains(root: Any) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """The approximate tree as drawn: each run of blocks with one child each and the same
    tenants merged into one box (key of its first block, parent box's key or 0 for the router,
    blocks, tenants), parents before children. Keys are the blocks' chained keys, so a box
    keeps its key from step to step (scenarios/routing_steps.py compares them).

    >>> from types import SimpleNamespace as N
    >>> c = N(key=3, children={}, tenants={0: 1.0}); b = N(key=2, children={3: c}, tenants={0: 1.0})
    >>> approx_chains(N(key=None, children={2: b}, tenants={}))
    [(2, 0, 2, (0,))]
    """
    out: list[tuple[int, int, int, tuple[int, ...]]] = []
    stack = [(child, 0) for child in root.children.values()]
    while stack:
        node, parent = stack.pop()
        tenants = tuple(sorted(node.tenants))
        first, count = node.key, 1
        while len(node.children) == 1:
            (only,) = node.children.values()
            if tuple(sorted(only.tenants)) != tenants:
                break
            node, count = only, count + 1
        out.append((first, parent, count, tenants))
        stack.extend((child, first) for child in node.children.values())
    return out


def compare_routers(trace: Trace, replicas: int = REPLICAS) -> list[dict[str, Any]]:
    """Every router on `trace`: hit rate, TTFT p99, load spread, fallbacks."""
    out = []
    for router in ROUTERS:
        run = run_routing(trace, router, replicas)
        t = run.totals
        out.append({"router": router, "hit_rate": t["hit_rate"], "ttft_p99_s": t["ttft_p99_s"],
                    "load_spread": t["load_spread"],
                    "fallbacks": sum(r.reason == "imbalance" for r in run.routed)})
    return out


def classroom_sweep(trace: Trace, replicas: tuple[int, ...] = (1, 2, 3, 4)) -> list[dict]:
    """`python -m radix sweep`'s rows for `trace`: every router at each replica count, the
    routers' documented defaults (run here, one after another: a few seconds)."""
    return sweep_serial(trace, grid_cells(Grid(replicas=replicas)))
