"""A real vLLM KV-event recording beside a replay of the same requests, hash by hash.

The replay runs each request of a trace through a BlockCacheManager whose blocks are hashed as
vLLM hashes them (hash_algo "vllm-sha256" by default: vLLM 0.33's sha256 over pickle, its
NONE_HASH seed), looked up, prefilled, decoded token by token (the last sampled token is never
computed, as in vLLM) and freed. Every hash its BlockStored events carry is compared with the
recording's: "these blocks vLLM stored; our model stores the same hashes". Output blocks match
only when the trace holds the generated tokens (output_ids). Leaves out: multimodal and prompt
embedding keys, lookahead hashing, hybrid models' groups other than group 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from radix.blocks.hashing import VLLM_NONE_HASH_SEED, BlockHasher
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.events import BlockStored
from radix.traces.kv_events import StoredBlock, as_int_hash
from radix.traces.trace import Trace, to_req


@dataclass(frozen=True)
class RecordingMatch:
    block_size: int  # tokens per block (the recording's)
    hash_algo: str  # how the replay hashed
    num_recorded: int  # distinct hashes the recording stored (group 0)
    num_matched: int  # ... that the replay stored too
    num_replayed: int  # distinct hashes the replay stored
    first_missing: StoredBlock | None  # the first recorded block (in recording order) the
    #                                    replay never stored; None when all match
    first_extra: int | None  # the first hash the replay stored that the recording never did

    @property
    def match_rate(self) -> float:
        return self.num_matched / self.num_recorded if self.num_recorded else 1.0

    def summary(self) -> str:
        """Two lines for a terminal or a page."""
        head = (f"recording: {self.num_recorded:,} stored blocks of {self.block_size}; the "
                f"replay ({self.hash_algo}) stores {self.num_matched:,} of them "
                f"({self.match_rate:.1%}) and {self.num_replayed:,} in all")
        b = self.first_missing
        if b is None:
            return head + "\nevery recorded hash is stored by the replay"
        parent = "none" if b.parent_block_hash is None else f"{b.parent_block_hash:#x}"
        return (head + f"\nfirst that differs: batch {b.batch_index}, hash {b.block_hash:#x}, "
                f"parent {parent}, tokens {list(b.token_ids[:8])}"
                f"{'...' if len(b.token_ids) > 8 else ''}")


def recorded_blocks(batches: Sequence) -> dict[int, StoredBlock]:
    """Every block the recording stored (group 0 or unset), first occurrence, in order."""
    out: dict[int, StoredBlock] = {}
    for index, batch in enumerate(batches):
        for e in batch.events:
            if not isinstance(e, BlockStored) or e.group_idx not in (None, 0):
                continue
            parent = as_int_hash(e.parent_block_hash)
            for i, h in enumerate(map(as_int_hash, e.block_hashes)):
                tokens = tuple(e.token_ids[i * e.block_size:(i + 1) * e.block_size])
                out.setdefault(h, StoredBlock(h, parent, tokens, e.medium, index))
                parent = h
    return out


def replayed_hashes(trace: Trace, block_size: int, hasher: BlockHasher) -> dict[int, None]:
    """The hashes (event ints) a replay of the trace's requests stores, in order."""
    need = max((len(t.token_ids) + len(t.output_ids or ()) for t in trace.requests), default=0)
    pool = BlockPool(need // block_size + 2, block_size, enable_kv_cache_events=True,
                     hash_algo=hasher)
    manager = BlockCacheManager(pool)
    stored: dict[int, None] = {}
    for tr in trace.requests:
        req = to_req(tr)
        hit = manager.get_computed_blocks(req)
        manager.allocate_slots(req, len(req.origin_input_ids) - hit.num_computed_tokens, hit)
        out = tr.output_ids or ()
        for j, token in enumerate(out):
            req.output_ids.append(token)
            if j < len(out) - 1:  # the last sampled token is never fed back
                manager.allocate_slots(req, 1)
        manager.free(req)
        for e in manager.take_events():
            if isinstance(e, BlockStored):
                stored.update(dict.fromkeys(e.block_hashes))
    return stored


def match_recording(trace: Trace, recording: Trace | Sequence, *,
                    hash_algo: str = "vllm-sha256", seed: str = VLLM_NONE_HASH_SEED,
                    lora_paths: Mapping[str, str] | None = None,
                    block_size: int | None = None) -> RecordingMatch:
    """How many of the recording's stored hashes a replay of `trace` stores too.

    A 10-token prompt in blocks of 4 makes 2 full blocks; a recording holding exactly those
    two vLLM hashes matches 2 of 2:
    >>> from radix.traces.trace import TraceRequest
    >>> from radix.blocks.kv_events import EventBatch
    >>> from radix.blocks.hashing import hash_request_tokens, hash_to_int64
    >>> hs = [hash_to_int64(h) for h in hash_request_tokens(range(1, 11), 4,
    ...                                                     hash_algo="vllm-sha256")]
    >>> ev = BlockStored(tuple(hs), None, tuple(range(1, 9)), 4, None, "GPU", None)
    >>> t = Trace("request", [TraceRequest("r", 0.0, tuple(range(1, 11)), 1)])
    >>> m = match_recording(t, [EventBatch(0.0, (ev,))]); m.num_matched, m.num_recorded
    (2, 2)
    """
    batches = recording.batches if isinstance(recording, Trace) else recording
    recorded = recorded_blocks(batches)
    if block_size is None:
        sizes = [e.block_size for b in batches for e in b.events if isinstance(e, BlockStored)]
        if not sizes:
            raise ValueError("the recording stores no blocks (no BlockStored event)")
        block_size = sizes[0]
    hasher = BlockHasher(hash_algo, seed, dict(lora_paths or {}))
    replayed = replayed_hashes(trace, block_size, hasher)
    missing = next((b for h, b in recorded.items() if h not in replayed), None)
    extra = next((h for h in replayed if h not in recorded), None)
    return RecordingMatch(block_size, hash_algo, len(recorded),
                          sum(1 for h in recorded if h in replayed), len(replayed), missing, extra)
