"""`python -m radix demo` and `python -m radix replay FILE [--json]`.

demo: SGLang's own radix_cache.py demo (five inserts, a pretty_print, one match), saying which
call split which node; `--scenario three-requests` walks DESIGN.md's R1, R2, R3.
replay: runs an op trace (radix/traces/ops.py) and prints pretty_print and stats, or with --json a
canonical dump: the tree in pre-order, siblings sorted, and one result per op.
"""

from __future__ import annotations

import argparse
import json

from radix import events as ev
from radix.cli import InputError
from radix.runs.ops import replay_ops
from radix.traces.ops import OpTraceError, load_ops
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog

DEMO_KEYS = ([1, 2, 3], [1, 2, 3], [1, 2, 4, 5], [1, 2, 4, 5, 6, 7], [8, 9, 10, 11, 12])


def register(sub) -> None:
    p = sub.add_parser("demo", help="insert a few keys, print the tree, explain each split")
    p.add_argument("--scenario", choices=["basic", "three-requests"], default="basic")
    p.set_defaults(func=run_demo)
    p = sub.add_parser("replay", help="run an op trace (JSONL) and print the tree and stats")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="canonical JSON dump instead of text")
    p.set_defaults(func=run_replay)


def three_request_keys() -> dict[str, list[int]]:
    """DESIGN.md's walk: S (512) + F (1,543) shared; R1 asks 96 tokens, R2 80; R3 = S + 2,112."""
    s, f = list(range(10_000, 10_512)), list(range(20_000, 21_543))
    return {
        "R1": s + f + list(range(30_000, 30_096)),
        "R2": s + f + list(range(40_000, 40_080)),
        "R3": s + list(range(50_000, 52_112)),
    }


def explain_step(events: list[ev.Event]) -> list[str]:
    """One line per split or new leaf of a step."""
    lines = []
    for e in events:
        if isinstance(e, ev.NodeSplit):
            lines.append(f"  split: node {e.node_id} cut after {e.split_len:,} tokens; "
                         f"new prefix node {e.new_node_id} under node {e.parent_id}")
        elif isinstance(e, ev.NodeInserted):
            lines.append(f"  new leaf: node {e.node_id} ({len(e.token_ids):,} tokens) "
                         f"under node {e.parent_id}")
    return lines


def run_demo(args: argparse.Namespace) -> int:
    log = EventLog()
    cache = RadixCache(sink=log)
    if args.scenario == "basic":
        named = [(f"insert {k}", k) for k in DEMO_KEYS]
    else:
        named = [(name, k) for name, k in three_request_keys().items()]
    for name, key in named:
        r = cache.insert(RadixKey(key), rid=name)
        print(f"{name}: {len(key):,} tokens, {r.prefix_len:,} already cached")
        print("\n".join(explain_step(log.events_of(log.num_steps - 1))))
    cache.pretty_print()
    if args.scenario == "basic":
        m = cache.match_prefix(RadixKey([1, 2, 3, 13, 14]))
        print(f"match [1, 2, 3, 13, 14]: prefix_len={m.prefix_len}, slot_ids={m.slot_ids}, "
              f"last node {m.last_node.id}")
    else:
        apart = sum(len(k) for _, k in named)
        held = cache.total_size()
        print(f"the tree holds {held:,} tokens; stored apart they need {apart:,}; "
              f"saving {apart - held:,} tokens "
              f"({(apart - held) * 131_072 / 2**20:,.0f} MiB of Llama-3-8B KV, derived)")
    cache.check_invariants()
    return 0


def canonical_dump(cache: RadixCache, results: list[dict]) -> dict:
    nodes = [
        {"id": n.id, "parent": n.parent, "key": list(n.token_ids), "value": list(n.slot_ids),
         "lock_ref": n.lock_ref, "hit_count": n.hit_count, "priority": n.priority,
         "evictable_leaf": n.evictable_leaf, "extra_key": n.extra_key,
         "cache_salt": n.cache_salt}
        for n in cache.snapshot().nodes
    ]
    nodes[0]["priority"] = None  # the root's sentinel is an implementation detail
    stats = {"evictable_size": cache.evictable_size(), "protected_size": cache.protected_size(),
             "total_size": cache.total_size(), "num_nodes": len(nodes)}
    return {"tree": nodes, "results": results, "stats": stats}


def run_replay(args: argparse.Namespace) -> int:
    try:
        trace = load_ops(args.file)
        out = replay_ops(trace)
    except OpTraceError as exc:
        raise InputError(f"{args.file}: {exc}") from None
    if args.json:
        dump = canonical_dump(out.cache, out.results)
        dump["first_bad_line"], dump["violation"] = out.first_bad_line, out.violation
        print(json.dumps(dump, sort_keys=True))
    else:
        out.cache.pretty_print(show_hits=True, mark_leaves=True)
        c = out.cache
        print(f"ops: {len(out.results)}  nodes: {len(c.snapshot().nodes)}  "
              f"evictable: {c.evictable_size():,}  protected: {c.protected_size():,}")
        if out.first_bad_line is not None:
            print(f"invariant broken after line {out.first_bad_line}: {out.violation}")
    return 0 if out.first_bad_line is None else 1
