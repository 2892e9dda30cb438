"""A running request's component state in a hybrid tree: the fields of SGLang 0.5.23's ReqKvInfo
(managers/schedule_batch.py) and Req that the SWA and Mamba components read and write, beside
our `Req` (radix/request.py), which keeps the row (`slot_ids`) and the FULL lengths.

A UnifiedRadixCache keeps one per request it has seen (`UnifiedRadixCache.kv_of`), dropped when
the request's KV is released. Leaves out: the lazy extra buffer, speculative decoding's
intermediate states, host backups.
"""

from __future__ import annotations

from dataclasses import dataclass

from radix.tree.components.base import LockReceipt


@dataclass(eq=False)
class ReqKvInfo:
    # --- the tree lock (SGLang's req.lock: TreeLock(node, receipt, swa_released))
    receipt: LockReceipt | None = None  # what inc_lock_ref took for this request
    swa_released: bool = False  # the SWA part was released early (dec_swa_lock_only)
    # --- SWA
    swa_evicted_seqlen: int = 0  # positions [cache_protected_len, here) had their SWA freed
    swa_branching_seqlen: int | None = None  # FULL matched past the SWA-valid hit: insert here
    # --- Mamba
    mamba_pool_idx: int | None = None  # the request's own working state slot
    # extra_buffer: the ping-pong track slots (None where empty), next/last written index
    mamba_ping_pong_track_buffer: list[int | None] | None = None
    mamba_next_track_idx: int | None = None
    mamba_last_track_idx: int | None = None
    mamba_last_track_seqlen: int | None = None  # depth of the latest tracked state
    mamba_prev_track_seqlen: int | None = None  # depth of the other slot's state, if nameable
    mamba_branching_seqlen: int | None = None  # where the match asked a state to be tracked
    mamba_cow_src_index: int | None = None  # the node slot the working state was copied from
    # --- scheduler bookkeeping the tree reads
    decode_batch_idx: int = 0  # decode steps since the last extend (overlap: SWA waits one)

    @property
    def holds_mamba(self) -> bool:
        return self.mamba_pool_idx is not None

    def get_evicted_seqlen(self) -> int:
        return self.swa_evicted_seqlen
