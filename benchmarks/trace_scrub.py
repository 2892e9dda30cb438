"""Time the Trace debugger on a big trace: the replay, its memory, and each move of the step.

Replays a trace through both caches as the page does (scenarios/trace.py: compact event log,
the block cache's summary and keyframes; checkouts before those came with the summary build
every block keyframe here, as their page did on demand), then times what one move costs the page in
Python: the tree at the step (keyframe + replay), the folded scene (viz/scene.py),
pretty_print's text, and, when the move crosses a request boundary, vLLM's pool after that many
requests (keyframe + replay) and its grid figure. Moves: 30 random jumps (the slider), 30 steps
forward (ArrowRight) and 30 back.
Default trace: the Mooncake synthetic sample (13,445 tree steps). Prints JSON, then medians and
maxima in ms; the target (issue 13) is under 1 s per move.
Usage: python benchmarks/trace_scrub.py [TRACE] [--capacity 1000000] [--moves 30]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from radix.tree.snapshot import format_tree  # noqa: E402
from runtime.budget import Budget  # noqa: E402
from scenarios.trace import replay  # noqa: E402
from viz.blocks import block_grid_figure  # noqa: E402
from viz.roles import step_highlight  # noqa: E402
from viz.scene import tree_scene  # noqa: E402

SAMPLES = [ROOT / "examples" / "traces" / "mooncake_synthetic_trace.jsonl",
           Path("/work/shared/traces/mooncake_synthetic_trace.jsonl")]


def move(r, step: int, last_blocks: list) -> dict:
    """What the page computes for one step: tree, scene, text; blocks if the request count
    changed (the page keeps the last pool)."""
    t0 = time.perf_counter()
    snap = r.log.snapshot_at(step)
    events = r.log.events_of(step - 1) if step else []
    scene = tree_scene(snap, highlight=step_highlight(events, snap), rankdir="LR",
                       max_children=12)
    format_tree(snap, mark_leaves=True)
    t1 = time.perf_counter()
    n = r.requests_done(step)
    blocks_ms = 0.0
    if n != last_blocks[0]:
        at = r.blocks.at(n)
        block_grid_figure(at.snapshot)
        last_blocks[0] = n
        blocks_ms = (time.perf_counter() - t1) * 1000
    return {"step": step, "tree_ms": round((t1 - t0) * 1000, 1), "blocks_ms": round(blocks_ms, 1),
            "total_ms": round((time.perf_counter() - t0) * 1000, 1),
            "drawn": len(scene["nodes"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--capacity", type=int, default=1_000_000)
    ap.add_argument("--moves", type=int, default=30)
    args = ap.parse_args()
    path = args.trace or next(p for p in SAMPLES if p.is_file())
    data = path.read_bytes()
    started = time.perf_counter()
    r = replay(data, path.name, args.capacity, budget=Budget(2**36, 2**37))
    replay_s = time.perf_counter() - started
    started = time.perf_counter()  # every block keyframe, where the block view built them on
    getattr(r.blocks, "build", lambda: None)()  # demand (before they came with the summary)
    keyframes_s = time.perf_counter() - started
    n = r.log.num_steps
    rng = random.Random(0)
    last = [-1]
    jumps = [move(r, rng.randrange(n + 1), last) for _ in range(args.moves)]
    at = rng.randrange(n // 2)
    forward = [move(r, at + i, last) for i in range(1, args.moves + 1)]
    back = [move(r, at + args.moves - i, last) for i in range(1, args.moves + 1)]
    out = {"trace": path.name, "requests": len(r.trace.requests), "steps": n,
           "replay_s": round(replay_s, 1), "keyframes_s": round(keyframes_s, 1),
           "replay_mib_estimate": round(r.nbytes / 2**20, 1),
           "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "keyframes": len(r.blocks.frames)}
    for name, rows in (("jump", jumps), ("forward", forward), ("back", back)):
        totals = [x["total_ms"] for x in rows]
        out[name] = {"median_ms": statistics.median(totals), "max_ms": max(totals),
                     "median_blocks_ms": statistics.median(x["blocks_ms"] for x in rows),
                     "median_tree_ms": statistics.median(x["tree_ms"] for x in rows)}
    print(json.dumps(out, indent=1))
    print(f"\n{out['trace']}: {out['requests']:,} requests, {n:,} steps; replay "
          f"{out['replay_s']} s, block keyframes {out['keyframes_s']} s, "
          f"~{out['replay_mib_estimate']} MiB held, max RSS "
          f"{out['max_rss_mib']} MiB")
    print(f"{'move':<9}{'median ms':>10}{'max ms':>9}{'tree ms':>9}{'blocks ms':>11}")
    for name in ("jump", "forward", "back"):
        m = out[name]
        print(f"{name:<9}{m['median_ms']:>10.0f}{m['max_ms']:>9.0f}{m['median_tree_ms']:>9.0f}"
              f"{m['median_blocks_ms']:>11.0f}")


if __name__ == "__main__":
    main()
