"""RadixKey: token ids with a namespace, and the child key that files an edge in its parent.

Follows SGLang 0.5.23's RadixKey (mem_cache/radix_cache.py: token ids, extra_key, and our
cache_salt beside it) and its `get_child_key` (first token, or first page, namespaced). Every
tree here files its edges by these keys: RadixCache, the replay model and the host tier's
HostTierCache. `as_key` turns what a user passes (a plain list of ints) into a key once.
Leaves out: EAGLE's bigram keys and its `limit` view.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from radix.tokens import TokenRuns, Tokens, tokens


class RadixKey:
    """Token ids with a namespace (extra_key, cache_salt): two keys share nodes only within one
    namespace; `child_key` names a node's edge in its parent's children dict. The ids are kept
    as `Tokens` (radix/tokens/: a list, or TokenRuns for compact ids): what is one already (a
    list, a trace's prompt, a request's `all_ids`, a slice of either) is kept as it is, not
    copied, as SGLang's RadixKey keeps its List[int]; anything else is converted once. Like
    SGLang's, a RadixKey trusts its caller: ids are not checked (they are where they enter:
    trace loaders, op traces, RadixCache's plain-list arguments, which it copies), and the
    caller never mutates a list it gave, since building keys is on the request loop's hot path.

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
        if token_ids.__class__ is not list and token_ids.__class__ is not TokenRuns:
            if isinstance(token_ids, str | bytes) or not isinstance(token_ids, Iterable):
                raise TypeError(f"token_ids must be a sequence of ints, "
                                f"got {type(token_ids).__name__}")
            token_ids = tokens(token_ids)  # converted once (a compact one stays runs)
        self.token_ids: Tokens = token_ids  # shared, never copied: the caller must not mutate it
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


def child_key_at(tok: Any, pos: int, page_size: int, namespace: Any) -> Any:
    """The children-dict key of the edge a walk looks for at `pos` of the token ids `tok` in
    `namespace` (a key's `namespace`): the token there, or the page from there; paired with the
    namespace outside the default one. `RadixKey.child_key` is the same at position 0.

    >>> child_key_at([5, 6, 7, 8], 1, 1, None), child_key_at([5, 6, 7, 8], 2, 2, ("a", None))
    (6, (('a', None), (7, 8)))
    """
    first = tok[pos] if page_size == 1 else page_at(tok, pos, page_size)
    return first if namespace is None else (namespace, first)


def as_key(key: RadixKey | Sequence[int]) -> RadixKey:
    """What a cache's public call takes as a key. A RadixKey is trusted as SGLang trusts its
    callers; a plain sequence is copied and checked once (ints only, in C) since it comes
    straight from a user (who may mutate their own list afterwards: a key's list is shared,
    never copied again).

    >>> as_key((1, 2, 3))
    RadixKey([1, 2, 3], len=3)
    >>> as_key("abc")
    Traceback (most recent call last):
    ...
    TypeError: expected a RadixKey or a sequence of token ids, got str
    """
    if isinstance(key, RadixKey):
        return key
    if isinstance(key, str | bytes) or not isinstance(key, Sequence | range):
        raise TypeError(f"expected a RadixKey or a sequence of token ids, "
                        f"got {type(key).__name__}")
    ids = tokens(key) if isinstance(key, TokenRuns) else list(key)
    try:
        array("q", ids)
    except (TypeError, OverflowError):
        raise TypeError("token ids must be ints that fit in 64 bits") from None
    return RadixKey(ids)
