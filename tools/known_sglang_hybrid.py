"""The hybrid known answers measured on SGLang 0.5.23's own code (not a test): its
UnifiedRadixCache over the Rust and the Python TreeCore and its pools on CPU
(tools/sglang_hybrid.py), requests served one after another. tests/radix/tree/
test_hybrid_known_answers.py holds ours to the same numbers.

    qwen3.5   FULL + MAMBA (3 linear-attention layers to 1 full; the GDN chunk of 64, page 1):
              64 requests of S shared + U unique tokens, one output token each, for
              (S, U) = (1600, 600), (1500, 700), (480, 100), strategies extra_buffer (the CUDA
              default: overlap scheduler on) and no_buffer (overlap off)
    swa       FULL + SWA, window W = 128 (gpt-oss) and 1,024 (Gemma 3): A caches a prompt P of
              8W tokens; SWA eviction tombstones all but its last window; B = P + 64 tokens
              still hits 8W; C = P[:4W] + 64 hits 0 (the window before 4W is gone) and, on its
              checkpoint, recovers the window before 4W from its own slots; D = P[:4W] + 64
              others then hits 4W

    python tools/known_sglang_hybrid.py /tmp/sgl/ex
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sglang_hybrid import SGReq, SGSide  # noqa: E402
from sglang_unified import CORES, load_unified  # noqa: E402
from wheels import wheel_args, wheel_parser  # noqa: E402

SPLITS = ((1600, 600), (1500, 700), (480, 100))
WINDOWS = (128, 1024)


def side(usg, components, core: str, extra: bool, window=None, size=200_000, width=4096,
         mamba_size: int = 300):
    k = SimpleNamespace(components=components, core=core, page=1, policy="lru", config={},
                        chunk=64, size=size, size_swa=size, window=window, width=width,
                        mamba_size=mamba_size, extra_buffer=extra, overlap=extra,
                        max_states_per_path=-1, track_interval=256, swa_interval=128,
                        release_prefill_swa=False)
    return SGSide(usg, k)


def serve(sg: SGSide, req) -> int:
    """match, lock, slots, one extend, the first token; decode to max_new_tokens; release."""
    sg.match(req)
    hit = req.prefix_len
    sg.lock(req)
    sg.admit(req)
    sg.extend(req, len(req.full_untruncated_fill_ids))
    if not sg.prefill_done(req, 0):
        while not req.finished():
            sg.check_decode([req])
            sg.decode([req], [0])
        sg.release(req, checkpoint=True)
    return hit


def qwen35(usg, core: str, extra: bool, shared: int, unique: int, n: int = 64) -> list[int]:
    sg = side(usg, ("full", "mamba"), core, extra)
    return [serve(sg, SGReq(f"r{i}", list(range(shared)) +
                            [10**6 + i * 10_000 + j for j in range(unique)], 1))
            for i in range(n)]


def swa_walk(usg, core: str, w: int) -> tuple[list[int], int]:
    """Hits of A, B, C, D, and the SWA tokens the eviction tombstoned after A."""
    n = 8 * w
    sg = side(usg, ("full", "swa"), core, True, window=w, size=4 * n, width=n + 256)
    p = list(range(n))
    hits = [serve(sg, SGReq("A", p, 1))]
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    evicted = sg.tree.evict(EvictParams(swa_num_tokens=1)).swa_num_tokens_evicted
    hits.append(serve(sg, SGReq("B", p + [10**6 + j for j in range(64)], 1)))
    hits.append(serve(sg, SGReq("C", p[: n // 2] + [2 * 10**6 + j for j in range(64)], 2)))
    hits.append(serve(sg, SGReq("D", p[: n // 2] + [3 * 10**6 + j for j in range(64)], 1)))
    return hits, evicted


def summary(hits: list[int]) -> str:
    rest = sorted(set(hits[2:]))
    return f"{hits[0]:,}, {hits[1]:,}, then {', '.join(f'{h:,}' for h in rest)}"


def main() -> int:
    args = wheel_args(wheel_parser(__doc__, "sglang"), "sglang/srt/mem_cache/common.py")
    usg = load_unified(args.root)
    for core in CORES:
        for extra in (True, False):
            for shared, unique in SPLITS:
                hits = qwen35(usg, core, extra, shared, unique)
                name = "extra_buffer" if extra else "no_buffer"
                print(f"qwen3.5  {core:6} {name:12} {shared:,} + {unique}:  {summary(hits)}",
                      flush=True)
        for w in WINDOWS:
            hits, evicted = swa_walk(usg, core, w)
            print(f"swa      {core:6} window {w:5,}: A B C D hit {hits}, SWA tombstoned "
                  f"{evicted:,} tokens", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
