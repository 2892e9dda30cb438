"""RadixKey: the token ids of a prefix plus the namespace that keeps tenants apart.

Follows SGLang's RadixKey (mem_cache/radix_cache.py): `child_key` names a node's edge in its
parent's children dict. Two keys share nodes only within one namespace, the pair (extra_key,
cache_salt). Like SGLang's, a RadixKey trusts its caller: a list of ids is kept, not copied or
checked (ids are checked where they enter: trace loaders, op traces, RadixCache's plain-list
arguments), since building keys is on the request loop's hot path.
Leaves out: EAGLE's bigram keys and SGLang's `limit` view.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class RadixKey:
    """Token ids with a namespace.

    >>> k = RadixKey([1, 2, 3, 4, 5])
    >>> k.child_key(1), k.child_key(2)
    (1, (1, 2))
    >>> RadixKey([1], extra_key="lora-a").child_key(1)
    (('lora-a', None), 1)
    """

    __slots__ = ("token_ids", "extra_key", "cache_salt")

    def __init__(
        self,
        token_ids: Iterable[int],
        extra_key: str | None = None,
        cache_salt: str | None = None,
    ) -> None:
        if type(token_ids) is not list and not hasattr(token_ids, "common_prefix_len"):
            # (a compact sequence, radix/tokens/, is kept as it is: never expanded per token)
            if isinstance(token_ids, str | bytes) or not isinstance(token_ids, Iterable):
                raise TypeError(f"token_ids must be a sequence of ints, "
                                f"got {type(token_ids).__name__}")
            token_ids = list(token_ids)
        self.token_ids: list[int] = token_ids  # not copied: the caller must not mutate it
        self.extra_key = extra_key  # e.g. a LoRA id
        self.cache_salt = cache_salt  # per-tenant salt

    @property
    def namespace(self) -> tuple[str | None, str | None] | None:
        """None for the default namespace, else (extra_key, cache_salt)."""
        if self.extra_key is None and self.cache_salt is None:
            return None
        return (self.extra_key, self.cache_salt)

    def __len__(self) -> int:
        return len(self.token_ids)

    def __iter__(self):
        return iter(self.token_ids)

    def __getitem__(self, idx: slice) -> RadixKey:
        if not isinstance(idx, slice):
            raise TypeError("RadixKey supports slices only; use key.token_ids[i] for one id")
        out = RadixKey.__new__(RadixKey)
        out.token_ids = self.token_ids[idx]
        out.extra_key = self.extra_key
        out.cache_salt = self.cache_salt
        return out

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RadixKey)
            and self.namespace == other.namespace
            and self.token_ids == other.token_ids
        )

    __hash__ = None  # mutable-looking; never a dict key itself

    def __repr__(self) -> str:
        head = list(self.token_ids[:10])
        more = "..." if len(self.token_ids) > 10 else ""
        ns = f", namespace={self.namespace!r}" if self.namespace else ""
        return f"RadixKey({head}{more}, len={len(self)}{ns})"


    def child_key(self, page_size: int = 1) -> Any:
        """The dict key of the edge that starts with this key: first token, or first page."""
        t = self.token_ids
        plain = t[0] if page_size == 1 else page_at(t, 0, page_size)
        ns = self.namespace
        return plain if ns is None else (ns, plain)


def page_at(tokens: Any, pos: int, page_size: int) -> tuple[int, ...]:
    """The page of `page_size` tokens from `pos` as a tuple: a paged tree's child key (a compact
    sequence builds it from its runs, TokenRuns.values_at).

    >>> page_at([5, 6, 7, 8], 1, 2)
    (6, 7)
    """
    if hasattr(tokens, "values_at"):
        return tokens.values_at(pos, page_size)
    return tuple(tokens[pos : pos + page_size])
