"""`python -m radix why A B`: why prompt B misses the cache after prompt A, on token ids.

Without a tokenizer (radix/ loads none), A and B are token-id lists (JSON) or request ids of a
token trace. Text, chat messages and text traces go through `python -m engine why A B` (same
arguments), which tokenizes with the model's tokenizer and calls the same code (radix/why/).
Leaves out: nothing else; the work is in radix/why/.
"""

from __future__ import annotations

import argparse
from typing import Any

from radix.why.command import add_arguments
from radix.why.command import run as run_why


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("why", help="why prompt B misses after prompt A (token ids)")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_why(args, None)
