"""How a served request chooses tokens and when it stops, after vLLM's SamplingParams.

`SamplingParams`: temperature (0 = greedy, the default, exact argmax), top_k, top_p and a seed
(a per-request generator, so a seeded request samples the same tokens whatever runs beside it);
stop strings, extra stop token ids, ignore_eos; bounded and clamped as vLLM 0.33 and SGLang
0.5.23 do (`clamped`): a temperature finite in [0, 2], greedy below SAMPLING_EPS, raised to
MIN_TEMPERATURE below that, so no logit is divided into inf or NaN. `ServedReq` is the
scheduler's `Req` that also stops at the model's EOS / stop token ids or a stop string
(finish_reason "stop"), else at max_new_tokens ("length"), checked in vLLM's order: EOS, stop
ids, stop strings, length.
Leaves out: min_tokens, logprobs, penalties, n > 1, best_of, include_stop_str_in_output.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from radix.request import Req

log = logging.getLogger("engine.sampling")
SAMPLING_EPS = 1e-5  # vLLM's _SAMPLING_EPS: a temperature below it is greedy (SGLang's: 1e-6)
MIN_TEMPERATURE = 1e-2  # vLLM's _MAX_TEMP: a smaller positive temperature is raised to it
MAX_TEMPERATURE = 2.0  # vLLM's (and OpenAI's) upper bound
SEED_RANGE = (-(2**63), 2**63 - 1)  # vLLM's protocol: the seed is an int64
MAX_STOP = 64  # stop strings per request (OpenAI: 4; vLLM: no bound): each is checked per step
MAX_STOP_TOKEN_IDS = 1_024  # extra stop ids per request


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy (argmax); > 0: softmax(logits / temperature)
    top_p: float = 1.0  # keep the smallest set of tokens whose probability reaches top_p
    top_k: int = 0  # keep the k most likely tokens; 0 or -1: all (vLLM accepts both)
    seed: int | None = None  # per-request generator; None: the process's generator
    stop: tuple[str, ...] = ()  # strings that end the output (not included in the text)
    stop_token_ids: tuple[int, ...] = ()  # ids that end it besides the model's EOS
    ignore_eos: bool = False  # run on past EOS (benchmarks)

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) \
                or not 0.0 <= t <= MAX_TEMPERATURE:
            raise ValueError(f"temperature must be a finite number in [0, {MAX_TEMPERATURE:g}],"
                             f" got {t!r}")
        if isinstance(self.top_p, bool) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 (all) or > 0, got {self.top_k!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(
                self.seed, int) or not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]):
            raise ValueError(f"seed must be an int64, got {self.seed!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop strings must be non-empty strings")
        if len(self.stop) > MAX_STOP or len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise ValueError(f"at most {MAX_STOP} stop strings and {MAX_STOP_TOKEN_IDS:,} "
                             "stop_token_ids per request")

    def clamped(self) -> SamplingParams:
        """These parameters as they are sampled with: a temperature below SAMPLING_EPS is
        greedy (top_p and top_k dropped, as vLLM drops them), one below MIN_TEMPERATURE is
        raised to it, as vLLM raises it (logged).

        >>> SamplingParams(1e-40, top_p=0.5).clamped()  # 1/1e-40 would overflow: greedy
        SamplingParams(temperature=0.0, top_p=1.0, top_k=0, seed=None, stop=(), \
stop_token_ids=(), ignore_eos=False)
        >>> SamplingParams(1e-3).clamped().temperature
        0.01
        """
        if self.temperature < SAMPLING_EPS:
            return replace(self, temperature=0.0, top_p=1.0, top_k=0)
        if self.temperature < MIN_TEMPERATURE:
            log.warning("temperature %g is under %g, which may overflow to inf or NaN: "
                        "raised to %g (as vLLM does)", self.temperature, MIN_TEMPERATURE,
                        MIN_TEMPERATURE)
            return replace(self, temperature=MIN_TEMPERATURE)
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = SamplingParams()


def sample(logits: torch.Tensor, params: SamplingParams,
           generator: torch.Generator | None) -> int:
    """One token from one row of logits [V] under `params` (argmax when greedy).

    >>> sample(torch.tensor([0.0, 3.0, 1.0]), GREEDY, None)
    1
    >>> g = torch.Generator().manual_seed(0)
    >>> sample(torch.tensor([0.0, 3.0, 1.0]), SamplingParams(1.0, top_k=1), g)  # k=1: argmax
    1
    """
    if params.greedy:
        return int(logits.argmax())
    params = params.clamped()  # subtle: a tiny temperature divides the logits into inf
    if params.greedy:
        return int(logits.argmax())
    scores = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < scores.numel():
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        # keep a token while the mass before it is below top_p (the first always stays)
        drop = sorted_probs.cumsum(0) - sorted_probs >= params.top_p
        drop[0] = False  # subtle: a subnormal top_p is 0.0 in float32; the likeliest stays
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    if generator is not None and generator.device != probs.device:
        probs = probs.cpu()  # subtle: a seeded draw runs on the generator's device (the CPU),
        # so a seed gives the same tokens on CPU and CUDA alike
    if not bool(torch.isfinite(probs).all()) or not float(probs.sum()) > 0.0:
        raise ValueError(f"sampling at temperature {params.temperature:g}, top_p "
                         f"{params.top_p:g} gave no finite probabilities (the logits hold inf "
                         "or NaN)")
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass(eq=False)
class ServedReq(Req):
    """A `Req` that stops like a server: `finished` is True once finish_reason is set.

    `detokenize` turns output ids into text (needed only for stop strings); `stop_ids` are the
    model's EOS ids plus the request's own. After a stop string, `stop_text_len` is where the
    text ends (the stop string and anything after it cut off).
    """

    sampling: SamplingParams = GREEDY
    stop_ids: frozenset[int] = frozenset()
    detokenize: Callable[[list[int]], str] | None = field(default=None, repr=False)
    finish_reason: str | None = None  # "stop", "length", or "error" (see `error`)
    stop_text_len: int | None = None
    error: BaseException | None = None
    generator: torch.Generator | None = field(default=None, repr=False)
    _checked: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()  # the prompt as `Tokens`, once
        if self.sampling.seed is not None and self.generator is None:
            self.generator = torch.Generator().manual_seed(self.sampling.seed)

    @property
    def finished(self) -> bool:
        if self.finish_reason is None and len(self.output_ids) != self._checked:
            self._checked = len(self.output_ids)
            try:
                self.finish_reason = self._stop_reason()
            except Exception as exc:  # noqa: BLE001 - fails this request only (service.py)
                self.error, self.finish_reason = exc, "error"
        return self.finish_reason is not None

    def _stop_reason(self) -> str | None:
        last = self.output_ids[-1] if self.output_ids else None
        if last is not None and last in self.stop_ids:
            return "stop"
        if self.sampling.stop and self.detokenize is not None:
            text = self.detokenize(self.output_ids)
            cut = first_stop(text, self.sampling.stop)
            if cut is not None:
                self.stop_text_len = cut
                return "stop"
        if len(self.output_ids) >= self.max_new_tokens:
            return "length"
        return None


def build_req(token_ids: list[int], max_new_tokens: int, sampling: SamplingParams | None,
              eos_ids: frozenset[int], detokenize: Callable[[list[int]], str],
              **fields: object) -> Req:
    """The scheduler's request: a plain `Req` (greedy, runs to max_new_tokens, as a benchmark's
    ignore_eos) without `sampling`, else a `ServedReq` stopping at `eos_ids` (unless
    ignore_eos), the request's stop ids and strings. Its rid is set by the service later."""
    if sampling is None:
        return Req("(new)", token_ids, max_new_tokens=max_new_tokens, arrival=time.monotonic(),
                   **fields)
    sampling = sampling.clamped()
    stop_ids = frozenset(sampling.stop_token_ids) | (
        frozenset() if sampling.ignore_eos else eos_ids)
    return ServedReq("(new)", token_ids, max_new_tokens=max_new_tokens,
                     arrival=time.monotonic(), **fields, sampling=sampling, stop_ids=stop_ids,
                     detokenize=detokenize if sampling.stop else None)


def first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    """Where the earliest stop string starts in `text`, or None.

    >>> first_stop("Hi there. Bye.", (".", "Bye")), first_stop("Hi", ("!",))
    (8, None)
    """
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters a stream must hold back: a suffix that may begin a stop
    string, or an unfinished UTF-8 character (decoded as U+FFFD).

    >>> held_back("Hello wor", ("world",)), held_back("Hi \\ufffd", ()), held_back("Hi", ("x",))
    (3, 1, 0)
    """
    keep = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), keep, -1):
            if text.endswith(s[:n]):
                keep = n
                break
    tail = len(text) - len(text.rstrip("\ufffd"))
    return max(keep, tail)
