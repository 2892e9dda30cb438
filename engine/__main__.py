"""`python -m engine run TRACE` replays a request trace on the real model; `serve` serves it.

Prints one row per request (matched and prefilled tokens, vLLM block hits, TTFT, decode rate)
and the totals, measured on this machine, beside the derived Llama-3-8B/H100 cost of the same
token counts. `--no-cache` is the control (every match empty). `--host-ratio R` adds SGLang's
host tier (engine/hosttier.py): requests run one at a time, hits split into device and host
(loaded back); with `--as-simulate` each request's recorded reply is forced as its output (then
one sampled token), so the split equals `python -m radix simulate --host-ratio`'s on the same
trace and capacity, printed beside it. Bad arguments or a bad trace print one error line and
exit 2. `serve` (engine/serve.py): an OpenAI-compatible server publishing vLLM's KV events.
`why A B` (engine/why.py): why prompt B misses after A, tokenized with the model's tokenizer.
Leaves out: mooncake/kv-event traces (they carry no real tokens).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import TYPE_CHECKING

from engine.serve import add_host_options, cmd_serve
from engine.serve import add_parser as add_serve_parser
from engine.why import add_parser as add_why_parser
from engine.why import cmd_why
from radix.request import Req
from radix.runs.costs import CostModel
from radix.sched.policy import POLICIES
from radix.sched.scheduler import SchedulerConfig, check_fits
from radix.traces import Trace, TraceError, load_trace

if TYPE_CHECKING:  # torch comes in with these: imported by the commands, after parsing
    from engine.service import EngineService, RequestResult


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + error
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="replay a request trace (JSONL, .gz ok) on the model")
    run.add_argument("trace", help="request trace: tokens, text or messages per line")
    run.add_argument("--no-cache", action="store_true", help="disable prefix caching (control)")
    src = run.add_mutually_exclusive_group()
    src.add_argument("--model", help="a local Hugging Face causal-LM folder")
    src.add_argument("--random-init", metavar="CONFIG", help="random weights, shape from JSON")
    run.add_argument("--device", default="auto", help="auto (CUDA+bf16 if present), cpu, cuda")
    run.add_argument("--capacity", default="32768", help="KV pool: tokens (32768) or size (2GiB)")
    run.add_argument("--policy", default="lpm", choices=POLICIES, help="schedule policy")
    run.add_argument("--burst", action="store_true", help="submit all at once, not at arrivals")
    run.add_argument("--chunked-prefill-size", type=int, default=None, metavar="N",
                     help="prefill long prompts N tokens per round (default: off)")
    run.add_argument("--page-size", type=int, default=1, help="radix tree page size (tokens)")
    add_host_options(run)
    run.add_argument("--as-simulate", action="store_true",
                     help="with --host-ratio: run each request as `python -m radix simulate` "
                          "replays it (its recorded reply forced as its output, then one "
                          "sampled token; no recorded reply: one output token) and print "
                          "simulate's split of the same trace beside the engine's")
    add_serve_parser(sub)
    add_why_parser(sub)
    return parser


def replay(service: EngineService, trace: Trace, prompts: list[list[int]],
           honor_arrivals: bool = True, replies: list[list[int]] | None = None
           ) -> tuple[list[RequestResult], float]:
    """Submits each request at its arrival offset (or all at once); waits for all of them.
    `replies` (--as-simulate): each request's reply is forced as its output, then one token
    more, so prompt + reply (the tokens with KV) is what it caches, as simulate caches it."""
    start = time.monotonic()
    handles = []
    for k, (tr, prompt) in enumerate(zip(trace.requests, prompts)):
        if honor_arrivals:
            time.sleep(max(0.0, start + tr.arrival - time.monotonic()))
        new = max(tr.output_len, 1) if replies is None else len(replies[k]) + 1
        handles.append(service.submit(prompt, new, rid=tr.rid, extra_key=tr.extra_key,
                                      cache_salt=tr.cache_salt, priority=tr.priority,
                                      forced_output=None if replies is None else replies[k]))
    results = [h.result() for h in handles]
    return results, time.monotonic() - start


def format_rows(results: list[RequestResult], host: bool = False) -> list[str]:
    """One row per request; `host` (the host tier on): matched is split into its device and
    host (loaded back) parts, with the load's copy time."""
    tier = f"{'device':>8}{'host':>8}{'load ms':>9}" if host else ""
    head = (f"{'rid':<14}{'prompt':>8}{'matched':>9}{tier}{'prefill':>9}{'blk hit':>9}"
            f"{'TTFT ms':>10}{'dec tok/s':>11}{'out':>6}{'retr':>6}")
    rows = [head]
    for r in results:
        m = r.metrics
        tier = (f"{m['device_hit_tokens']:>8,}{m['host_hit_tokens']:>8,}"
                f"{m['load_back_s'] * 1e3:>9.1f}") if host else ""
        rows.append(f"{r.rid[:13]:<14}{m['prompt_tokens']:>8,}"
                    f"{m['matched_tokens']:>9,}{tier}{m['prefilled_tokens']:>9,}"
                    f"{m.get('block_matched_tokens', 0):>9,}{m['ttft'] * 1e3:>10.1f}"
                    f"{m['decode_tps']:>11.1f}{len(r.output_ids):>6}{m.get('retractions', 0):>6}")
    return rows


def window_totals(service: EngineService) -> list[str]:
    """A sliding-window model's line (its component tree, engine/backends.py): the window and
    the SWA rows freed, as the window passed and by tombstoning; none without an SWA pool."""
    pool, backend = service.pool, service.backend
    counts = getattr(backend, "swa_counts", None)
    if getattr(pool, "translate", None) is None or counts is None:
        return []
    return [f"sliding window: {len(pool.swa_layer_ids)} of {pool.num_layers} layers see "
            f"{backend.sliding_window_size + 1} tokens; {counts.window_freed:,} SWA rows freed as "
            f"the window passed (every {backend.knobs.swa_eviction_interval} tokens), "
            f"{counts.tombstoned:,} tombstoned in the tree; SWA pool {pool.size_swa:,} rows, "
            f"{pool.swa_available_size():,} free at the end"]


def host_totals(service: EngineService) -> list[str]:
    """The host tier's line: the split, the tokens moved and the seconds spent copying."""
    ht = service.host_tier
    c, cache = ht.tree_cache.counts(), ht.tree_cache
    dev = host = miss = 0
    for r in ht.finished:
        dev += r.metrics["device_hit_tokens"]
        host += r.metrics["host_hit_tokens"]
        miss += r.metrics["prefilled_tokens"]
    return [f"host tier ({cache.write_policy}, host pool {cache.host.capacity:,} tokens): "
            f"device hit {dev:,}, host hit {host:,} (loaded back), miss {miss:,} prompt tokens; "
            f"backed up {c.backed_up:,}, demoted {c.demoted:,}, loaded back {c.loaded_back:,}, "
            f"host evicted {c.host_evicted:,}; copies {ht.copier.backup_s * 1e3:,.1f} ms to "
            f"host, {ht.copier.load_s * 1e3:,.1f} ms back"]


def simulate_line(service: EngineService, trace: Trace, capacity: int,
                  host_ratio: float) -> str:
    """`python -m radix simulate TRACE --capacity N --host-ratio R`'s split of the same trace
    (replay_host_tier), beside the engine's: equal when every request's device / host / miss
    split and the tokens loaded back and demoted in all agree."""
    from radix.hosttier.replay import replay_host_tier
    from radix.hosttier.requests import Served

    ht = service.host_tier
    cache = ht.tree_cache
    per: dict[str, tuple[int, int, int]] = {}  # rid -> the replay's (device, host, miss)

    def heard(k: int, served: Served) -> None:
        per[trace.requests[k].rid] = (served.device_hit, served.host_hit, served.miss)

    run = replay_host_tier(trace, capacity, host_ratio, cache.write_policy, on_request=heard)
    mine = {r.rid: (r.metrics["device_hit_tokens"], r.metrics["host_hit_tokens"],
                    r.metrics["prefilled_tokens"]) for r in ht.finished}
    differ = sum(per[rid] != mine.get(rid) for rid in per)
    c = cache.counts()
    same = not differ and (run.loaded_back, run.demoted) == (c.loaded_back, c.demoted)
    verdict = "equal to the engine's, request for request" if same else (
        f"DIFFERENT from the engine's ({differ} requests split differently)")
    return (f"simulate, same trace and capacity (replay_host_tier): device hit "
            f"{run.device_hit:,}, host hit {run.host_hit:,}, miss {run.miss:,} prompt tokens; "
            f"loaded back {run.loaded_back:,}, demoted {run.demoted:,}: {verdict}")


def totals(results: list[RequestResult], wall: float, label: str) -> list[str]:
    matched = sum(r.metrics["matched_tokens"] for r in results)
    prefilled = sum(r.metrics["prefilled_tokens"] for r in results)  # re-prefills included
    prompt = sum(r.metrics["prompt_tokens"] for r in results)
    out = sum(len(r.output_ids) for r in results)
    blocks = sum(r.metrics.get("block_matched_tokens", 0) for r in results)
    ttfts = [r.metrics["ttft"] for r in results]
    cost = CostModel()
    hit = matched / max(prompt, 1)
    retracted = sum(r.metrics.get("retractions", 0) for r in results)
    return [
        f"measured ({label}): {len(results)} requests in {wall:.2f} s; matched {matched:,} of "
        f"{prompt:,} prompt tokens ({hit:.1%}; vLLM blocks {blocks:,}); prefilled "
        f"{prefilled:,}{f' ({retracted} retractions re-prefilled)' if retracted else ''}; "
        f"TTFT mean {statistics.mean(ttfts) * 1e3:.1f} ms, max "
        f"{max(ttfts) * 1e3:.1f} ms; {out / wall:.1f} output tok/s",
        f"{cost.label}: the {matched:,} matched tokens are {cost.kv_bytes(matched) / 2**20:,.0f} "
        f"MiB of KV and {cost.prefill_seconds(matched) * 1e3:,.1f} ms of prefill saved",
    ]


def cmd_run(args: argparse.Namespace) -> int:
    from engine.kv_pool import KVPool, parse_capacity
    from engine.model import load_model
    from engine.service import EngineService, fit_to_vocab

    loaded = load_model(args.model, args.random_init, args.device)
    tok = loaded.tokenizer
    trace = load_trace(args.trace, tokenize=lambda s: tok(s)["input_ids"],
                       chat_template=lambda msgs: tok.apply_chat_template(
                           msgs, add_generation_prompt=True, tokenize=True,
                           return_dict=True)["input_ids"])
    if trace.format != "request" or not trace.requests:
        raise ValueError(f"{args.trace}: a {trace.format} trace has no real tokens to run; "
                         "use a request trace (or `python -m radix simulate`)")
    if args.as_simulate and args.host_ratio is None:
        raise ValueError("--as-simulate compares with `simulate --host-ratio`: it needs "
                         "--host-ratio")
    vocab = loaded.model.config.vocab_size
    n = len(trace.requests)
    replies = [list(t.output_ids or ()) for t in trace.requests] if args.as_simulate else []
    fitted = fit_to_vocab([list(t.token_ids) for t in trace.requests] + replies, vocab)
    prompts, replies = fitted[:n], (fitted[n:] if args.as_simulate else None)
    if prompts != [list(t.token_ids) for t in trace.requests]:
        print(f"note: token ids past the vocabulary ({vocab:,}) mapped one-to-one onto it")
    per_token = KVPool.bytes_per_token_of(loaded.model.config, loaded.dtype)
    capacity = parse_capacity(args.capacity, per_token)
    for k, (tr, prompt) in enumerate(zip(trace.requests, prompts)):  # one clear error first
        new = max(tr.output_len, 1) if replies is None else len(replies[k]) + 1
        check_fits(Req(tr.rid, prompt, max_new_tokens=new), capacity, args.page_size)
    host = "" if args.host_ratio is None else (
        f"; host tier {args.host_ratio:g}x ({args.write_policy}), requests one at a time")
    print(f"model: {loaded.label} ({loaded.source}, loaded in {loaded.load_seconds:.1f} s); "
          f"KV pool {capacity:,} tokens x {per_token:,} B = {capacity * per_token / 2**20:,.0f} "
          f"MiB{'; cache disabled' if args.no_cache else ''}{host}")
    if loaded.meaningless_text:
        print("note: random weights: the generated text is meaningless; only timings count")
    config = SchedulerConfig(policy=args.policy, chunked_prefill_size=args.chunked_prefill_size)
    with EngineService(loaded, capacity, no_cache=args.no_cache, config=config,
                       page_size=args.page_size, host_ratio=args.host_ratio,
                       write_policy=args.write_policy) as service:
        results, wall = replay(service, trace, prompts, honor_arrivals=not args.burst,
                               replies=replies)
    host = args.host_ratio is not None
    print("\n".join(format_rows(results, host) + totals(results, wall, loaded.label)
                    + (host_totals(service) if host else []) + window_totals(service)
                    + ([simulate_line(service, trace, capacity, args.host_ratio)]
                       if args.as_simulate else [])))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "why":
            return cmd_why(args)
        return cmd_serve(args) if args.command == "serve" else cmd_run(args)
    except (TraceError, ValueError, OSError, MemoryError) as exc:
        message = str(exc)
        if isinstance(exc, TraceError) and args.trace not in message:
            message = f"{args.trace}: {message}"
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
