"""One worker's block cache, rebuilt from its KV events, and what a KV-aware router reads from it.

`WorkerCache.apply(batch)` is the one replay of BlockStored / BlockRemoved / AllBlocksCleared
into a block view (a hash stays cached until its last copy is removed), one batch at a time:
radix/watch/stream.py's `Stream` feeds it for `radix watch` and the Watch page, and for the Trace
debugger's recordings (scenarios/kvrecording.py); `WorkerCache.of(batches)` replays a whole
recording. It keeps a children index: parent hash -> (token ids, extra key, LoRA) -> hash.
`overlap(tokens)` walks it as Dynamo's KV router scores a worker: how many of the prompt's full
blocks, from the start, the worker holds. `runs()`: that index as a radix tree. Bytes hashes
are keyed by their low 64 bits. Leaves out: hybrid-model groups (group_idx).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from radix.events import AllBlocksCleared, BlockRemoved, BlockStored
from radix.traces.kv_events import as_int_hash

ChildKey = tuple  # (token ids, extra key or None, lora name or None)


@dataclass(frozen=True, slots=True)
class CachedBlock:
    block_hash: int
    parent_block_hash: int | None  # None: the first block of its chain
    token_ids: tuple[int, ...]
    medium: str | None
    key: ChildKey  # its place under the parent
    seq: int | None  # the batch that stored it
    stored_at: float  # when that batch was received (s, wall clock)


class Applied(NamedTuple):
    stored: int  # blocks stored by the batch
    removed: int  # blocks removed (a hash's copy each)
    cleared: bool  # the batch held AllBlocksCleared


@dataclass
class WorkerCache:
    """The cached blocks of one worker.

    >>> from radix.blocks.kv_events import EventBatch
    >>> c = WorkerCache()
    >>> c.apply(EventBatch(0.0, (BlockStored((11, 12), None, (1, 2, 3, 4), 2, None, "GPU",
    ...                                      None),)))
    Applied(stored=2, removed=0, cleared=False)
    >>> c.overlap([1, 2, 3, 4, 5]), c.overlap([1, 2, 9, 9])  # 2 blocks, then 1
    (2, 1)
    """

    medium: str | None = None  # keep only this medium's blocks (None: every medium)
    blocks: dict[int, CachedBlock] = field(default_factory=dict)
    copies: dict[int, int] = field(default_factory=dict)  # hash -> blocks carrying it
    children: dict[int | None, dict[ChildKey, int]] = field(default_factory=dict)
    block_size: int | None = None  # from the last BlockStored
    num_stored: int = 0
    num_removed: int = 0
    num_cleared: int = 0
    unknown_removed: int = 0  # removals of hashes never seen stored (missed events)

    @classmethod
    def of(cls, batches: Iterable[Any], medium: str | None = None) -> WorkerCache:
        """The cached blocks after `batches`, applied in order, each with its index as seq
        (only `medium`'s when given): a recording replayed whole.

        >>> from radix.blocks.kv_events import EventBatch
        >>> stored = BlockStored((11, 12), None, (1, 2, 3, 4), 2, None, "GPU", None)
        >>> c = WorkerCache.of([EventBatch(0.0, (stored, BlockRemoved((11,), "GPU")))])
        >>> sorted(c.blocks), c.blocks[12].token_ids, c.unreachable()
        ([12], (3, 4), [12])
        """
        cache = cls(medium)
        for seq, batch in enumerate(batches):
            cache.apply(batch, seq)
        return cache

    def apply(self, batch: Any, seq: int | None = None, at: float = 0.0) -> Applied:
        stored = removed = 0
        cleared = False
        for event in batch.events:
            if isinstance(event, AllBlocksCleared):
                self.clear()
                self.num_cleared += 1
                cleared = True
            elif self.medium is not None and event.medium not in (self.medium, None):
                continue
            elif isinstance(event, BlockStored):
                stored += self._store(event, seq, at)
            elif isinstance(event, BlockRemoved):
                removed += self._remove(event)
        return Applied(stored, removed, cleared)

    def clear(self) -> None:
        self.blocks.clear()
        self.copies.clear()
        self.children.clear()

    def _store(self, event: BlockStored, seq: int | None, at: float) -> int:
        # bytes hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) are keyed by their low 64 bits
        parent, size = as_int_hash(event.parent_block_hash), event.block_size
        self.block_size = size
        extras = event.extra_keys or ()
        for i, h in enumerate(map(as_int_hash, event.block_hashes)):
            tokens = tuple(event.token_ids[i * size:(i + 1) * size])
            key = (tokens, _hashable(extras[i] if i < len(extras) else None), event.lora_name)
            if h not in self.blocks:
                self.blocks[h] = CachedBlock(h, parent, tokens, event.medium, key, seq, at)
                self.children.setdefault(parent, {}).setdefault(key, h)
            self.copies[h] = self.copies.get(h, 0) + 1
            self.num_stored += 1
            parent = h
        return len(event.block_hashes)

    def _remove(self, event: BlockRemoved) -> int:
        for h in map(as_int_hash, event.block_hashes):
            self.num_removed += 1
            if h not in self.copies:
                self.unknown_removed += 1
                continue
            self.copies[h] -= 1
            if self.copies[h] == 0:
                del self.copies[h]
                block = self.blocks.pop(h)
                siblings = self.children.get(block.parent_block_hash, {})
                if siblings.get(block.key) == h:
                    del siblings[block.key]
                    if not siblings:
                        del self.children[block.parent_block_hash]
        return len(event.block_hashes)

    def overlap(self, token_ids: Sequence[int], extra_keys: Sequence[Any] | None = None,
                lora_name: str | None = None) -> int:
        """Full blocks of `token_ids` cached here in a chain from the start (the KV-aware
        router's overlap score); `extra_keys` holds each block's extra key as published (None:
        none, as for a plain prompt). 0 until a BlockStored has told the block size."""
        size, parent, n = self.block_size, None, 0
        if not size:
            return 0
        for i, start in enumerate(range(0, len(token_ids) - size + 1, size)):
            extra = extra_keys[i] if extra_keys is not None and i < len(extra_keys) else None
            key = (tuple(token_ids[start:start + size]), _hashable(extra), lora_name)
            h = self.children.get(parent, {}).get(key)
            if h is None or h not in self.blocks:
                break
            parent, n = h, n + 1
        return n

    def unreachable(self) -> list[int]:
        """Cached hashes no lookup can reach: an ancestor's hash is no longer cached."""
        reachable: set[int] = set()
        stack = [h for h in self.children.get(None, {}).values() if h in self.blocks]
        while stack:
            h = stack.pop()
            reachable.add(h)
            stack.extend(c for c in self.children.get(h, {}).values() if c in self.blocks)
        return [h for h in self.blocks if h not in reachable]

    def runs(self) -> list[Run]:
        """The blocks as a radix tree: each `Run` is a chain of blocks where every block but the
        last has exactly one child; pre-order, siblings in storage order. A run whose first
        block's parent is gone hangs under the root with `orphan=True`."""
        out: list[Run] = []
        roots = [h for h in self.children.get(None, {}).values() if h in self.blocks]
        roots += [h for h in self.unreachable() if self.blocks[h].parent_block_hash
                  not in self.blocks]
        stack = [(h, None) for h in reversed(roots)]
        while stack:
            first, parent_run = stack.pop()
            chain = [first]
            kids = self._kids(first)
            while len(kids) == 1:
                chain.append(kids[0])
                kids = self._kids(kids[0])
            orphan = parent_run is None and self.blocks[first].parent_block_hash is not None
            out.append(Run(first, parent_run, tuple(chain), orphan))
            stack.extend((k, first) for k in reversed(kids))
        return out

    def _kids(self, h: int) -> list[int]:
        return [c for c in self.children.get(h, {}).values() if c in self.blocks]


class Run(NamedTuple):
    id: int  # the hash of its first block (stays put when a later branch splits the run)
    parent: int | None  # the run above (its id); None: under the root
    block_hashes: tuple[int, ...]
    orphan: bool  # its first block's parent was removed: unreachable by lookups


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list | tuple) else value
