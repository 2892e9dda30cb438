"""Engine benchmark: warm vs cold TTFT, a shared-prefix workload, model load time.

1. TTFT of R2 (2,055 cached + 80 new tokens) after R1, vs R2 on a cache-less engine.
2. N requests (default 32) sharing a 2,048-token prefix, 64-token questions, 32 output tokens,
   submitted together: our engine vs transformers' generate() per request (no sharing) vs our
   engine with the cache disabled. Greedy outputs of all three are compared.
3. Model load: first start (GGUF dequantized, into a fresh cache folder) and second start.
Measured numbers (model, device) are printed beside derived Llama-3-8B/H100 figures for the same
token counts (radix/runs/costs.py). Prints a table, then JSON. Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engine.model import LoadedModel, load_model  # noqa: E402
from engine.service import EngineService, fit_to_vocab  # noqa: E402
from examples.workloads import Tokens, three_requests  # noqa: E402
from radix.runs.costs import CostModel  # noqa: E402
from radix.sched.scheduler import SchedulerConfig  # noqa: E402

COST = CostModel()


def bench_ttft(loaded: LoadedModel) -> dict:
    prompts = fit_to_vocab(three_requests(0), loaded.model.config.vocab_size)
    with EngineService(loaded, 8_192) as warm:
        warm.submit(prompts[0], 1, rid="R1").result()
        r2 = warm.submit(prompts[1], 1, rid="R2").result().metrics
    with EngineService(loaded, 8_192, no_cache=True) as cold:
        c2 = cold.submit(prompts[1], 1, rid="R2").result().metrics
    derived_cold = COST.prefill_seconds(2_135)
    derived_warm = COST.prefill_seconds(80)
    return {"warm_ttft_s": r2["ttft"], "cold_ttft_s": c2["ttft"],
            "matched_tokens": r2["matched_tokens"], "speedup": c2["ttft"] / r2["ttft"],
            "derived_warm_s": derived_warm, "derived_cold_s": derived_cold,
            "derived_speedup": derived_cold / derived_warm}


def shared_prefix_prompts(n: int, prefix: int, question: int, vocab: int) -> list[list[int]]:
    t = Tokens(1)
    shared = t.take(prefix)
    return fit_to_vocab([shared + t.take(question) for _ in range(n)], vocab)


def run_engine(loaded: LoadedModel, prompts: list[list[int]], out: int, no_cache: bool,
               budget: int) -> dict:
    capacity = len(prompts) * (len(prompts[0]) + out) + 1_024
    config = SchedulerConfig(max_prefill_tokens=budget)
    with EngineService(loaded, capacity, no_cache=no_cache, config=config) as service:
        start = time.perf_counter()
        handles = [service.submit(p, out, rid=f"q{i}") for i, p in enumerate(prompts)]
        results = [h.result() for h in handles]
        wall = time.perf_counter() - start
        decode = [s.seconds for s in service.steps if s.kind == "decode"]
        prefill_s = sum(s.seconds for s in service.steps if s.kind == "prefill")
    prefilled = sum(r.metrics["prefilled_tokens"] for r in results)
    return {"wall_s": wall, "output_tok_s": len(prompts) * out / wall, "prefilled": prefilled,
            "prefill_s": prefill_s, "decode_steps": len(decode),
            "decode_step_mean_s": sum(decode) / max(len(decode), 1),
            "outputs": [r.output_ids for r in results]}


@torch.inference_mode()
def run_generate(loaded: LoadedModel, prompts: list[list[int]], out: int) -> dict:
    start, outputs = time.perf_counter(), []
    for p in prompts:
        ids = torch.tensor([p], device=loaded.device)
        gen = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=out,
                                    min_new_tokens=out, do_sample=False, pad_token_id=0)
        outputs.append(gen[0, len(p):].tolist())
    wall = time.perf_counter() - start
    return {"wall_s": wall, "output_tok_s": len(prompts) * out / wall,
            "prefilled": sum(map(len, prompts)), "outputs": outputs}


def derived_workload(n: int, prefix: int, question: int, out: int, prefilled: int,
                     batched: bool) -> float:
    """Llama-3-8B/H100 seconds: prefill of `prefilled` tokens plus `out` decode steps, batched
    (one step for all n requests) or one request at a time."""
    ctx = prefix + question + out // 2  # mean context during decode
    if batched:
        return COST.prefill_seconds(prefilled) + out * COST.decode_seconds(n * ctx)
    return COST.prefill_seconds(prefilled) + n * out * COST.decode_seconds(ctx)


def bench_load() -> dict:
    code = ("from engine.model import load_model; m = load_model(device='cpu'); "
            "print(m.source, m.load_seconds)")
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RADIXLENS_CACHE": tmp, "PYTHONPATH": str(Path.cwd())}
        for label in ("first", "second"):
            start = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True, check=True).stdout.split()
            times[label] = {"source": out[-2], "load_s": float(out[-1]),
                            "process_s": time.perf_counter() - start}
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prefix", type=int, default=2_048)
    ap.add_argument("--question", type=int, default=64)
    ap.add_argument("--output", type=int, default=32)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--max-prefill-tokens", type=int, default=4_096,
                    help="prefill budget per round (SGLang's default is 16384 on a GPU)")
    ap.add_argument("--skip-load", action="store_true", help="skip the load-time subprocesses")
    args = ap.parse_args()
    loaded = load_model(device=args.device)
    n, out = args.requests, args.output
    report = {"model": loaded.label, "ttft": bench_ttft(loaded)}
    prompts = shared_prefix_prompts(n, args.prefix, args.question,
                                    loaded.model.config.vocab_size)
    budget = args.max_prefill_tokens
    report["max_prefill_tokens"] = budget
    runs = {"engine": run_engine(loaded, prompts, out, False, budget),
            "engine --no-cache": run_engine(loaded, prompts, out, True, budget),
            "generate() per request": run_generate(loaded, prompts, out)}
    ref = runs["generate() per request"]["outputs"]
    for name, run in runs.items():
        run["same_greedy_as_generate"] = sum(a == b for a, b in zip(run.pop("outputs"), ref))
        run["derived_s"] = derived_workload(n, args.prefix, args.question, out, run["prefilled"],
                                            batched=name != "generate() per request")
    report["shared_prefix"] = runs
    if not args.skip_load:
        report["load"] = bench_load()
    print_table(report, n, out)
    print(json.dumps(report, indent=2))


def print_table(report: dict, n: int, out: int) -> None:
    t = report["ttft"]
    print(f"measured: {report['model']} | derived, not measured: Llama-3-8B on H100")
    print(f"{'TTFT of R2':<30}{'measured':>14}{'derived':>14}")
    print(f"{'  cold (2,135 prefilled)':<30}{t['cold_ttft_s'] * 1e3:>11.1f} ms"
          f"{t['derived_cold_s'] * 1e3:>11.1f} ms")
    print(f"{'  warm (2,055 matched + 80)':<30}{t['warm_ttft_s'] * 1e3:>11.1f} ms"
          f"{t['derived_warm_s'] * 1e3:>11.1f} ms")
    print(f"{'  speedup':<30}{t['speedup']:>13.1f}x{t['derived_speedup']:>13.1f}x")
    print(f"\n{n} requests, shared prefix, {out} output tokens each, submitted together; "
          f"prefill budget {report['max_prefill_tokens']:,} tokens a round")
    print(f"{'run':<26}{'prefilled':>10}{'wall s':>9}{'out tok/s':>11}{'derived s':>11}"
          f"{'same text':>11}")
    base = report["shared_prefix"]["engine"]
    for name, r in report["shared_prefix"].items():
        print(f"{name:<26}{r['prefilled']:>10,}{r['wall_s']:>9.1f}{r['output_tok_s']:>11.1f}"
              f"{r['derived_s']:>11.3f}{r['same_greedy_as_generate']:>8}/{n}")
        if "decode_step_mean_s" in r:
            print(f"{'  prefill / decode':<26}{r['prefill_s']:>19.1f} s prefill, "
                  f"{r['decode_steps']} decode steps of {r['decode_step_mean_s']:.3f} s")
        if r is not base:
            print(f"{'  engine speedup':<26}{r['wall_s'] / base['wall_s']:>19.1f}x measured, "
                  f"{r['derived_s'] / base['derived_s']:.1f}x derived")
    for label, lt in report.get("load", {}).items():
        print(f"load, {label} start: {lt['load_s']:.1f} s in load_model ({lt['source']}), "
              f"{lt['process_s']:.1f} s for the whole process")


if __name__ == "__main__":
    main()
