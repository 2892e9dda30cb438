"""The host tier's size and write policies, as SGLang 0.5.23's server arguments define them.

Follows `mem_cache/pool_host/base.py` (HostKVCache.__init__: the host pool's token count) and
`UnifiedRadixCache.init_hicache` (the write-through threshold, the load-back threshold).
`HostPool` is the host pool's index allocator without the pinned buffer: page-aligned
requests, freed slots reused after the never-used ones.
Leaves out: `hicache_auto_size` (it lowers the ratio to fit the machine's RAM), buffer_only
mode (a staging buffer for a storage backend), the storage tier.
"""

from __future__ import annotations

from collections.abc import Sequence

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
DEFAULT_RATIO = 2.0  # hicache_ratio None resolves to 2.0 in the default "cache" memory mode
LOAD_BACK_THRESHOLD = 10  # init_hicache: a host hit shorter than this is recomputed instead


def host_token_capacity(device_tokens: int, ratio: float | None = None, page_size: int = 1,
                        *, size_gb: float = 0.0, bytes_per_token: int = 0) -> int:
    """The host pool's tokens for a device pool of `device_tokens`: `size_gb` (--hicache-size)
    over the per-token KV bytes when given, else int(device_tokens * ratio)
    (--hicache-ratio, default 2.0); then whole pages plus one padding page.

    1,000 device tokens at ratio 2, page 16: int(2,000) // 16 = 125 pages, + 1 = 126 pages
    = 2,016 tokens. Page 1: 2,000 + 1 = 2,001.

    >>> host_token_capacity(1000, 2.0, 16), host_token_capacity(1000, page_size=1)
    (2016, 2001)
    >>> host_token_capacity(1000, size_gb=1.0, bytes_per_token=1_000_000)  # 1e9 // 1e6 = 1,000
    1001
    """
    if not isinstance(device_tokens, int) or device_tokens < 0:
        raise ValueError(f"device_tokens must be an int >= 0, got {device_tokens!r}")
    if not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
    if size_gb > 0:
        if bytes_per_token <= 0:
            raise ValueError("size_gb needs bytes_per_token (the KV bytes of one token)")
        size = int(size_gb * 1e9 // bytes_per_token)
    else:
        r = DEFAULT_RATIO if ratio is None else ratio
        if isinstance(r, bool) or not isinstance(r, int | float) or r <= 0:
            raise ValueError(f"hicache ratio must be a number > 0, got {ratio!r}")
        size = int(device_tokens * r)
    return (size // page_size + 1) * page_size


def write_through_threshold(policy: str) -> int:
    """Hits a node needs before write-through backs it up: 1 for write_through, else 2
    (write_back never backs up at insert, so its threshold is never read).

    >>> [write_through_threshold(p) for p in WRITE_POLICIES]
    [1, 2, 2]
    """
    check_policy(policy)
    return 1 if policy == "write_through" else 2


def check_policy(policy: str) -> str:
    if policy not in WRITE_POLICIES:
        raise ValueError(f"write policy must be one of {', '.join(WRITE_POLICIES)}, "
                         f"got {policy!r}")
    return policy


class HostPool:
    """Host KV slot ids 0..capacity-1: fresh ones first, then freed ones in the order freed.

    >>> h = HostPool(4); h.alloc(3), h.available_size()
    ([0, 1, 2], 1)
    >>> h.alloc(2) is None, h.free([1]), h.alloc(2)
    (True, None, [3, 1])
    """

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"host capacity must be an int >= 0, got {capacity!r}")
        self.capacity = capacity
        self._fresh = 0
        self._free: list[int] = []
        self._used = 0

    def available_size(self) -> int:
        return self.capacity - self._used

    @property
    def num_used(self) -> int:
        return self._used

    def alloc(self, n: int) -> list[int] | None:
        if n > self.available_size():
            return None
        fresh = min(n, self.capacity - self._fresh)
        out = list(range(self._fresh, self._fresh + fresh))
        self._fresh += fresh
        if n > fresh:
            out += self._free[: n - fresh]
            del self._free[: n - fresh]
        self._used += n
        return out

    def free(self, slot_ids: Sequence[int]) -> None:
        self._free.extend(slot_ids)
        self._used -= len(slot_ids)
