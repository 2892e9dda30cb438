"""ModelRunner: the real model's forward over KV held in the pool, after SGLang's ModelRunner.

It drives the decoder layers of a transformers model itself (their projections, norms, RoPE and
MLP modules, in the order engine/arch.py gives for the family) and runs its own attention
against KV gathered from the pool's slots, so a request's prefill computes only its unmatched
suffix and a decode step batches every running request in one forward (continuous batching).
Prefill and decode are one step over spans of new tokens (a decode token is a span of one) with
one attention path, cascade over shared prefix slots (engine/attention.py). A sliding layer
(Gemma 3) reads only its window: from the SWA pool's rows when the pool has one
(engine/swa_pool.py: `translate`), else from the same rows as the full layers, masked.
Sampling is greedy unless a request carries `SamplingParams` (engine/sampling.py: temperature,
top-k, top-p, seed); a draw that fails fails its own request (ServedReq.error), not the step.
Leaves out: CUDA graphs, paged attention kernels, logprobs, penalties.
"""

from __future__ import annotations

import time
from itertools import accumulate
from typing import Any, NamedTuple

import torch

from engine.arch import FULL, arch_for
from engine.attention import SpanPlan, attend, plan_spans
from engine.kv_pool import KVPool
from engine.sampling import sample
from radix.request import Req
from radix.sched.scheduler import StepOutput

MAX_TOKENS_PER_FORWARD = 8192  # an extend batch above this runs as several forwards (memory)


class Batch(NamedTuple):
    token_ids: list[list[int]]  # new tokens of each request
    start_pos: list[int]  # position of each request's first new token (its prefix length)
    slot_ids: list[list[int]]  # KV slots of positions 0..start_pos+len(new)-1, per request


class ModelRunner:
    """Implements the Runner protocol of docs/CONTRACTS.md over a transformers model of a family
    engine/arch.py knows (Llama, Mistral, Qwen2, Gemma 3 text)."""

    def __init__(self, model: Any, pool: KVPool) -> None:
        self.model = model
        self.pool = pool
        self.device = pool.device
        self.arch = arch_for(model)
        self.last_logits: torch.Tensor | None = None  # [num_reqs, vocab] of the last call, fp32

    def extend(self, reqs: list[Req], prefix_lens: list[int]) -> StepOutput:
        """Prefill `req.fill_ids[prefix_len:]`, attending to the KV at `req.slot_ids[:prefix_len]`.

        Samples the next token of each request whose chunk ends its known tokens (prompt plus
        any output kept across a retraction); a chunk that is not the last gets None.
        """
        return self._step(reqs, Batch(
            [r.fill_ids[p:] for r, p in zip(reqs, prefix_lens)], list(prefix_lens),
            [r.slot_ids[:len(r.fill_ids)] for r in reqs]),
            [len(r.fill_ids) >= len(r.all_ids) for r in reqs])

    def decode(self, reqs: list[Req]) -> StepOutput:
        """One batched step, the same step as a prefill with a span of one new token each:
        input `req.output_ids[-1]`, its KV goes to `req.slot_ids[-1]`."""
        for r in reqs:
            if len(r.slot_ids) != len(r.all_ids):
                raise ValueError(f"{r.rid}: decode needs one slot per token, "
                                 f"has {len(r.slot_ids)} for {len(r.all_ids)}")
        return self._step(reqs, Batch([[r.output_ids[-1]] for r in reqs],
                                      [len(r.all_ids) - 1 for r in reqs],
                                      [list(r.slot_ids) for r in reqs]), [True] * len(reqs))

    def _step(self, reqs: list[Req], batch: Batch, last_chunk: list[bool]) -> StepOutput:
        """Forwards the spans (in groups of at most MAX_TOKENS_PER_FORWARD new tokens) and
        samples a token for each request whose span ends its known tokens."""
        start = time.perf_counter()
        logits = [self.forward(Batch(*([part[i] for i in group] for part in batch)))
                  for group in _split_by_tokens([len(t) for t in batch.token_ids])]
        self.last_logits = torch.cat(logits) if logits else None
        next_ids = self._sample(self.last_logits, reqs, last_chunk)
        out = [tok if done else None for done, tok in zip(last_chunk, next_ids)]
        return StepOutput(out, self._elapsed(start))

    @torch.inference_mode()
    def forward(self, batch: Batch) -> torch.Tensor:
        """Runs the new tokens of every request in one pass; returns last-token logits [B, V]."""
        arch = self.arch
        lens = [len(t) for t in batch.token_ids]
        flat = [t for toks in batch.token_ids for t in toks]
        ids = torch.tensor(flat, dtype=torch.long, device=self.device)
        pos = torch.tensor([p + j for p, n in zip(batch.start_pos, lens) for j in range(n)],
                           dtype=torch.long, device=self.device)
        x = arch.embed(ids)
        rope = arch.rotary(x, pos)
        plans = {kind: self._plan(batch, lens, kind) for kind in arch.kinds}
        for layer_idx, layer in enumerate(self.model.model.layers):
            kind = arch.layer_types[layer_idx]
            plan, write = plans[kind]
            q, k, v = arch.qkv(layer, x, rope[kind])
            self.pool.write(layer_idx, write, k, v)
            o = attend(self.pool, layer_idx, q, plan, layer.self_attn.scaling)
            x = arch.after_attention(layer, x, o)
        last = torch.tensor(list(accumulate(lens)), device=self.device) - 1
        return arch.logits(x[last])

    def _plan(self, batch: Batch, lens: list[int], kind: str) -> tuple[SpanPlan, torch.Tensor]:
        """The attention plan of one layer kind and the rows its new K/V go to. A full layer
        reads every position's slot; a sliding one only its window's, translated to SWA rows
        when the pool keeps them apart (a freed row inside the window is a bug: it raises)."""
        rows, starts = [], list(batch.start_pos)
        window = None if kind == FULL else self.arch.window
        translate = None if kind == FULL else getattr(self.pool, "translate", None)
        for b, (sl, p, n) in enumerate(zip(batch.slot_ids, batch.start_pos, lens)):
            lo = 0 if window is None else max(0, p - window + 1)
            part = sl[lo:p + n] if lo or len(sl) != p + n else sl
            if translate is not None:
                part = translate(part)
                if 0 in part:
                    raise RuntimeError(f"a sliding layer's window (positions {lo}..{p + n - 1}) "
                                       f"reads an SWA row that was freed")
            rows.append(part)
            starts[b] = p - lo
        write = torch.tensor([s for r, p, n in zip(rows, starts, lens) for s in r[p:p + n]],
                             dtype=torch.long, device=self.device)
        return plan_spans(rows, starts, self.device, window=window), write

    @staticmethod
    def _sample(logits: torch.Tensor | None, reqs: list[Req],
                used: list[bool] | None = None) -> list[int]:
        """Argmax for every row, then a draw for each request that samples. `used` says which
        rows yield a token (a chunk that is not the last draws nothing: a seeded request then
        draws the same tokens however its prompt was chunked)."""
        if logits is None:
            return []
        out = logits.argmax(dim=-1).tolist()
        for i, req in enumerate(reqs):
            params = getattr(req, "sampling", None)
            if params is not None and not params.greedy and (used is None or used[i]):
                try:
                    out[i] = sample(logits[i], params, getattr(req, "generator", None))
                except Exception as exc:  # noqa: BLE001 - this request fails, not the batch:
                    req.error, req.finish_reason = exc, "error"  # it ends on the argmax token
        return out

    def _elapsed(self, start: float) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start


def _split_by_tokens(lens: list[int]) -> list[list[int]]:
    """Groups request indexes so each forward holds at most MAX_TOKENS_PER_FORWARD new tokens."""
    groups: list[list[int]] = [[]]
    used = 0
    for i, n in enumerate(lens):
        if groups[-1] and used + n > MAX_TOKENS_PER_FORWARD:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += n
    return groups
