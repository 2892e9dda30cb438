"""What a trace may hold and expand to: TraceLimits, its defaults, and the Tally that counts a
trace line by line while it loads, refusing the line that crosses a limit.

A small file may ask for a lot (90 requests of `output_len` 1,048,576 fit in 5.3 KB), which the
file-size cap does not see, so every loader counts as it reads and names the limit and the
figure. The MAX_* constants are the defaults; `--limit NAME=VALUE` (radix/cli/options.py) and a
server's RADIXLENS_TRACE_LIMITS (`parse_limits`) change them. Leaves out: time limits (a
bounded trace replays in bounded time).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from radix.traces.fields import TraceError

MAX_BYTES = 64 * 1024 * 1024  # a trace file's size (after gunzip)
MAX_TOKENS_PER_REQUEST = 1 << 20  # one request's prompt (real tokens)
# What a whole trace may expand to (TraceLimits' defaults; the app passes its session budget):
MAX_TOTAL_TOKENS = 1 << 25  # 33,554,432 prompt tokens of all requests, in the trace's token
# unit (a Mooncake hash id is one); for op traces, the tokens of all ops' lists
MAX_TOTAL_OUTPUT_TOKENS = 1 << 21  # 2,097,152 output tokens of all requests (each is a decode
# step in `simulate` and a token id held by `compare`)
MAX_REQUESTS = 1 << 17  # 131,072 requests of a request or Mooncake trace
MAX_OPS = 1 << 20  # 1,048,576 ops of an op trace


@dataclass(frozen=True)
class TraceLimits:
    """What a trace may hold and expand to; loaders refuse more, naming the limit and figure.

    >>> TraceLimits(max_requests=10).max_ops == MAX_OPS
    True
    """

    max_bytes: int = MAX_BYTES  # the file, after gunzip
    max_tokens_per_request: int = MAX_TOKENS_PER_REQUEST  # one prompt (real tokens)
    max_total_tokens: int = MAX_TOTAL_TOKENS  # all prompts (trace units) / all ops' token lists
    max_total_output_tokens: int = MAX_TOTAL_OUTPUT_TOKENS  # all output_len summed
    max_requests: int = MAX_REQUESTS  # requests of a request or Mooncake trace
    max_ops: int = MAX_OPS  # ops of an op trace

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TraceLimits.{f.name} must be an int >= 1, got {value!r}")


DEFAULT_LIMITS = TraceLimits()
LIMIT_NAMES = tuple(f.name for f in fields(TraceLimits))


def limit_item(text: str) -> tuple[str, int]:
    """One `NAME=VALUE` (a TraceLimits field, a whole number >= 1; "-" for "_" in the name,
    "," and "_" in the number, and 1e8 are fine); ValueError names what is wrong.

    >>> limit_item("max-total-output-tokens=1e8")
    ('max_total_output_tokens', 100000000)
    """
    name, sep, raw = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in LIMIT_NAMES:
        raise ValueError(f"a limit is NAME=VALUE with NAME one of {', '.join(LIMIT_NAMES)}; "
                         f"got {text!r}")
    try:
        number = float(raw.strip().replace(",", "").replace("_", ""))
    except ValueError:
        number = -1.0
    if not number.is_integer() or number < 1:
        raise ValueError(f"limit {name} must be a whole number >= 1, got {raw!r}")
    return name, int(number)


def parse_limits(spec: str, base: TraceLimits = DEFAULT_LIMITS) -> TraceLimits:
    """`base` with the comma- or space-separated `NAME=VALUE` items of `spec` (a server's
    RADIXLENS_TRACE_LIMITS) put in.

    >>> parse_limits("max_requests=10 max_ops=5").max_ops
    5
    """
    items = [limit_item(part) for part in spec.replace(",", " ").split()]
    return replace(base, **dict(items))


class Tally:
    """Running totals of a trace being loaded: each `add_*` refuses the line that takes a total
    over its limit, naming the limit and the figure. Count a line before building what it
    expands to.

    >>> tally = Tally(TraceLimits(max_total_output_tokens=10))
    >>> tally.add_request(1, prompt_tokens=5, output_tokens=6)
    >>> try:
    ...     tally.add_request(2, prompt_tokens=5, output_tokens=6)
    ... except TraceError as err:
    ...     print(err.line, err.field, err.message)
    2 output_len the trace's output tokens reach 12, over the limit of 10 (max_total_output_tokens)
    """

    def __init__(self, limits: TraceLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.requests = 0  # requests counted so far
        self.ops = 0  # ops counted so far
        self.tokens = 0  # prompt tokens (op traces: the tokens of every op's lists)
        self.output_tokens = 0  # output tokens

    def add_request(self, line: int | None, prompt_tokens: int, output_tokens: int,
                    prompt_field: str = "tokens", output_field: str = "output_len") -> None:
        self.requests += 1
        self._over(self.requests, "max_requests", "requests", line, None)
        self.tokens += prompt_tokens
        self._over(self.tokens, "max_total_tokens", "prompt tokens", line, prompt_field)
        self.output_tokens += output_tokens
        self._over(self.output_tokens, "max_total_output_tokens", "output tokens", line,
                   output_field)

    def add_op(self, line: int, tokens: int, token_field: str = "tokens") -> None:
        self.ops += 1
        self._over(self.ops, "max_ops", "ops", line, None)
        self.tokens += tokens
        self._over(self.tokens, "max_total_tokens", "tokens", line, token_field)

    def _over(self, total: int, limit: str, what: str, line: int | None, key: str | None) -> None:
        cap = getattr(self.limits, limit)
        if total > cap:
            raise TraceError(f"the trace's {what} reach {total:,}, over the limit of {cap:,} "
                             f"({limit})", line, key)

    def check_lines(self, text: str, limit: str, what: str, allow: int = 0) -> None:
        """Refuses at once a text of more non-blank lines than `limit` (plus `allow`: an op
        trace's config line) lets through, naming the first line past it: each line is an item
        or an error, so the file is bad either way and parsing it first would take long."""
        cap = getattr(self.limits, limit) + allow
        if text.count("\n") < cap:
            return
        count = 0
        for i, raw in enumerate(text.split("\n"), start=1):
            count += bool(raw.strip(" \t\r"))
            if count > cap:
                raise TraceError(f"the file has more lines than the limit of "
                                 f"{getattr(self.limits, limit):,} {what} allows ({limit})", i)
