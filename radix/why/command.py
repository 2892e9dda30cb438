"""The `why` command's arguments and run, shared by `python -m radix why` (token ids; no
tokenizer) and `python -m engine why` (the model's tokenizer: text, chat, text traces).

radix/ must not import transformers, so the tokenizer is passed in (`codec`) by the caller.
Leaves out: argument parsing of the top-level CLIs (radix/cli, engine/__main__.py).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from radix.traces import TraceError, load_trace
from radix.why.inputs import NEEDS_CODEC, read_prompt
from radix.why.prompt import Codec, Prompt
from radix.why.report import format_why, why

HELP_SPEC = ("a text file, a JSON file or inline JSON (token ids, chat messages, or an object "
             "with token_ids / text / messages and cache_salt, extra_key), or a request id of "
             "--trace")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="the prompt cached first: " + HELP_SPEC)
    p.add_argument("b", help="the prompt that missed (same forms)")
    p.add_argument("--trace", help="a request trace whose request ids A and B may name")
    p.add_argument("--page-size", type=int, default=1, help="radix tree page size (1)")
    p.add_argument("--block-size", type=int, default=16, help="vLLM block size (16)")
    p.add_argument("--width", type=int, default=6, help="tokens shown each side of the point")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace, codec: Codec | None, hybrid: Hybrid | None = None) -> int:
    """Prints the report. `hybrid(history, a, b)` (why --model, radix/cli/why.py) returns the
    lines and JSON that replace the two caches' with a hybrid model's engines; `history` is
    what ran before B: the trace's requests before it when B is one of them, else A."""
    for name in ("page_size", "block_size", "width"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    trace = _trace(args.trace, codec) if args.trace else None
    a, b = read_prompt(args.a, codec, trace), read_prompt(args.b, codec, trace)
    report = why(a, b, args.page_size, args.block_size,
                 codec.decode if codec is not None else None, args.width)
    lines, extra = None, {}
    if hybrid is not None:
        lines, extra = hybrid(_history(args, trace, a), a, b)
    if args.json:
        print(json.dumps(report_json(report) | extra, indent=1))
    else:
        print(format_why(report, lines))
    return 0


Hybrid = Callable[[list[Any], Prompt, Prompt], tuple[list[str], dict[str, Any]]]


def _history(args: argparse.Namespace, trace: dict[str, Any] | None, a: Prompt) -> list[Any]:
    """The requests that ran before B: with a trace naming B, every request before it (A must
    be one of them); else A alone (a Prompt)."""
    if trace is None or args.b not in trace:
        return [a]
    rids = list(trace)
    before = rids[:rids.index(args.b)]
    if args.a in trace and args.a not in before:
        raise ValueError(f"{args.a}: with --model, A must come before B ({args.b}) in the trace")
    if args.a not in trace:
        return [trace[r] for r in before] + [a]
    return [trace[r] for r in before]


def _trace(path: str, codec: Codec | None) -> dict[str, Any]:
    def refuse(_text: Any) -> list[int]:
        raise ValueError(NEEDS_CODEC.format(label=path, what="a text or messages trace"))

    def chat(messages: list[dict]) -> list[int]:
        return codec.encode_rendered(codec.render(messages, None, True, None))

    try:
        trace = load_trace(path, tokenize=codec.encode if codec else refuse,
                           chat_template=chat if codec else refuse)
    except TraceError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if trace.format != "request":
        raise ValueError(f"{path}: why needs a request trace (real tokens), got {trace.format}")
    return {r.rid: r for r in trace.requests}


def report_json(r: Any) -> dict[str, Any]:
    """The report as plain JSON (prompts by label and length, not their ids)."""
    return {"a": {"label": r.a.label, "tokens": r.diff.len_a, "namespace": r.a.namespace},
            "b": {"label": r.b.label, "tokens": r.diff.len_b, "namespace": r.b.namespace},
            "common_tokens": r.diff.common, "context_a": r.context_a, "context_b": r.context_b,
            "tree": r.tree._asdict(), "blocks": r.blocks._asdict(),
            "causes": [c._asdict() for c in r.causes]}
