"""A request as the caches see it, after SGLang's `Req` (srt/managers/schedule_batch.py).

Only the fields that `cache_finished_req` / `cache_unfinished_req` and the schedulers read or
write. `slot_ids` plays SGLang's `req_to_token_pool.req_to_token[req.req_pool_idx]` row: the KV
slot of every token position computed so far.
Leaves out: sampling parameters, streaming state, speculative decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Req:
    rid: str  # request id, unique in a run
    origin_input_ids: list[int]  # the prompt's token ids
    output_ids: list[int] = field(default_factory=list)  # generated so far
    max_new_tokens: int = 16  # output_len of a trace line
    extra_key: str | None = None  # namespace: LoRA id etc.; different keys never share a node
    cache_salt: str | None = None  # per-tenant salt; also a namespace
    priority: int = 0  # larger is more important (SGLang's priority scheduling)
    arrival: float = 0.0  # seconds, from the trace
    routing_key: str | None = None  # groups requests for the routing-key schedule policy
    # --- cache state, written by the scheduler and the cache ---
    slot_ids: list[int] = field(default_factory=list)  # KV slot per computed token position
    prefix_indices: list[int] = field(default_factory=list)  # prefix slots reused at admission
    # Tokens at the front whose KV belongs to the tree (locked through last_node). Equals
    # len(prefix_indices) except with page_size > 1 after a chunk, when prefix_indices also holds
    # the request's own partial page (SGLang keeps the two apart for exactly that reason).
    cache_protected_len: int = 0
    # This request already inserted [0, cache_inserted_len) into the tree: a later insert counts
    # a hit only on nodes that end past it (SGLang 0.5.23's ReqKvInfo.cache_inserted_len).
    cache_inserted_len: int = 0
    last_node: Any = None  # TreeNode locked on this request's behalf, or None
    fill_ids: list[int] = field(default_factory=list)  # tokens computed by the end of this chunk
    metrics: dict[str, float] = field(default_factory=dict)  # ttft, matched, prefilled, ...

    @property
    def all_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def finished(self) -> bool:
        return len(self.output_ids) >= self.max_new_tokens
