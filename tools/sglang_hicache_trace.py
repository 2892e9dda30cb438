"""A trace through SGLang 0.5.23's own UnifiedRadixCache with the host tier off and on, beside
radix/hosttier's replay of it, request by request (not a test).

Runs what `python -m radix simulate TRACE --capacity N --host-ratio R` runs (radix/hosttier/
replay.py: requests one at a time, a Mooncake trace in its 512-token blocks) on both sides:
SGLang's cache built on CPU as tools/diff_sglang_hicache.py builds it (tools/hicache_stubs.py),
once with HiCache off (the plain device-only server) and once per host ratio with it on; ours
with a host pool of 0 tokens (replay.py's "device only") and of each ratio. Prints each run's
device / host / miss split and the first request whose split differs, if any. For the question
"does SGLang's device hit rate under SLRU fall when the host tier is added?" (docs/HOST_TIER.md):

    python tools/sglang_hicache_trace.py /tmp/sgl/ex examples/traces/mooncake_excerpt.jsonl \\
        --capacity 100000 --host-ratio 16 --eviction slru
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hicache_stubs import SGSide  # noqa: E402
from sglang_unified import CORES, load_unified  # noqa: E402

from radix.hosttier.capacity import WRITE_POLICIES, host_token_capacity  # noqa: E402
from radix.hosttier.replay import load_back_units, replay_host_tier, trace_units  # noqa: E402
from radix.traces import load_trace  # noqa: E402


def sglang_splits(usg, trace, capacity: int, ratio: float | None, core: str, eviction: str,
                  write: str) -> list[tuple[int, int, int]]:
    """Each request's (device hit, loaded back, miss) in real tokens, as replay.py counts them,
    through SGLang's cache (ratio None: HiCache off)."""
    scale, reqs = trace_units(trace)
    device = capacity // scale
    host = None if ratio is None else host_token_capacity(device, ratio)
    side = SGSide(usg, core, device, host, 1, eviction, write, {})
    side.tree.load_back_threshold = load_back_units(scale)  # init_hicache's 10 tokens
    out = []
    for units, reply, n in reqs:
        if len(units) + len(reply) > device:
            out.append((0, 0, n))
            continue
        dev, hst, _ = side.serve(units, reply, 0)
        d = min(dev * scale, n)
        h = min(hst * scale, n - d)
        out.append((d, h, n - d - h))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="folder holding the unpacked sglang package")
    ap.add_argument("trace", help="a request or Mooncake trace")
    ap.add_argument("--capacity", type=int, required=True, help="device pool, real tokens")
    ap.add_argument("--host-ratio", type=float, action="append", required=True)
    ap.add_argument("--eviction", default="slru")
    ap.add_argument("--write-policy", choices=WRITE_POLICIES, default="write_through")
    ap.add_argument("--core", choices=CORES, default="rust")
    args = ap.parse_args()
    usg = load_unified(args.root)
    trace = load_trace(args.trace)
    total = sum(len(r.token_ids) for r in trace.requests) or 1
    differ = 0
    for ratio in [None, *args.host_ratio]:
        theirs = sglang_splits(usg, trace, args.capacity, ratio, args.core, args.eviction,
                               args.write_policy)
        ours: list[tuple[int, int, int]] = []
        replay_host_tier(trace, args.capacity, ratio, args.write_policy, args.eviction,
                         on_request=lambda k, s, rows=ours: rows.append(tuple(s[:3])))
        name = "HiCache off / device only" if ratio is None else f"host {ratio:g}x"
        for side, rows in (("SGLang", theirs), ("ours", ours)):
            d, h = sum(r[0] for r in rows), sum(r[1] for r in rows)
            print(f"{name:26} {side:7} device {d / total:6.2%}  host {h / total:6.2%}  "
                  f"({d:,} / {h:,} tokens)")
        bad = [k for k, (a, b) in enumerate(zip(theirs, ours, strict=True)) if a != b]
        if bad:
            differ += 1
            k = bad[0]
            print(f"  {len(bad)} requests differ; first {trace.requests[k].rid}: SGLang "
                  f"{theirs[k]}, ours {ours[k]}")
        else:
            print(f"  all {len(ours):,} requests split the same")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
