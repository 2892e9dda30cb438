"""Chained block hashes for the block cache, after vLLM v1's kv_cache_utils.hash_block_tokens.

Block i's hash = H(parent hash or NONE_HASH, the block's tokens, extra keys). `hash_algo` picks H:
  "radixlens" (default, fast): sha256(parent | the tokens as little-endian int64s | msgpack of
      the extra keys, if any); a block with a token outside int64 hashes b"radixlens-big" |
      parent | the ids in decimal, comma-separated, ";" | keys. Our own fixed NONE_HASH; extra
      keys bare (LoRA name on every block, cache_salt on block 0). Tokens are packed once, in C.
  "vllm-sha256": exactly vLLM 0.33's default, sha256(pickle.dumps((parent, tuple(tokens),
      extra_keys), protocol=5)); "vllm-sha256-cbor": sha256 of canonical CBOR of the same tuple.
      NONE_HASH = H(seed) with vLLM's seed "vllm-none-hash" (or the PYTHONHASHSEED the engine ran
      with); extra keys tagged as vLLM builds them: ("lora", name, path), ("cache_salt", salt).
`HashMemo` (at the end) remembers a prompt's hashes on a prefix trie (radix/tokens/), so that a
prompt hashes only what no earlier prompt with the same namespace had (exact; vLLM hashes every
full block on arrival; follows nothing upstream).
Leaves out: multimodal and prompt-embedding keys, lookahead hashing, xxhash (random seed).
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

from msgpack import packb

from radix.tokens import TokenRuns
from radix.tokens.runs import PrefixTrie

HASH_ALGOS = ("radixlens", "vllm-sha256", "vllm-sha256-cbor")
VLLM_NONE_HASH_SEED = "vllm-none-hash"  # vLLM's seed when PYTHONHASHSEED is not set

# The parent of block 0 in "radixlens" mode (vLLM's own modes derive theirs from a seed).
NONE_HASH: bytes = sha256(b"radixlens NONE_HASH").digest()

# Extra keys are packed once per request (rarely), so msgpack.packb's fresh Packer per call costs
# nothing and keeps hashing safe for the engine's replica threads.
_pack = packb

BlockHash = bytes  # a 32-byte sha256 digest
_LOW64 = (1 << 64) - 1
_BIG = b"radixlens-big"  # leads the bytes of a block whose tokens do not fit in int64


def cbor_canonical(value: Any) -> bytes:
    """Canonical CBOR (RFC 8949 core deterministic) of None, ints, bytes, str and tuples/lists:
    the shapes vLLM's sha256_cbor hashes (cbor2.dumps(x, canonical=True) gives the same bytes).

    >>> cbor_canonical((b"\\x01", (1, 500), None)).hex()
    '83410182011901f4f6'
    """
    out = bytearray()
    _cbor(value, out)
    return bytes(out)


def _cbor_head(major: int, n: int, out: bytearray) -> None:
    if n < 24:
        out.append(major << 5 | n)
    else:
        for extra, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
            if n < 1 << (8 * struct.calcsize(fmt)):
                out.append(major << 5 | extra)
                out += struct.pack(fmt, n)
                return
        raise ValueError(f"{n} does not fit CBOR's 64-bit head")


def _cbor(value: Any, out: bytearray) -> None:
    if value is None:
        out.append(0xF6)
    elif isinstance(value, bool):
        out.append(0xF5 if value else 0xF4)
    elif isinstance(value, int):
        _cbor_head(0, value, out) if value >= 0 else _cbor_head(1, -1 - value, out)
    elif isinstance(value, bytes):
        _cbor_head(2, len(value), out)
        out += value
    elif isinstance(value, str):
        data = value.encode("utf-8")
        _cbor_head(3, len(data), out)
        out += data
    elif isinstance(value, tuple | list):
        _cbor_head(4, len(value), out)
        for v in value:
            _cbor(v, out)
    else:
        raise TypeError(f"no canonical CBOR here for {type(value).__name__}")


@dataclass(frozen=True)
class BlockHasher:
    """How blocks are hashed: the algorithm, vLLM's seed and the LoRA adapters' paths.

    >>> h = BlockHasher("vllm-sha256")
    >>> h.none_hash.hex()[:16], h.hash_block(None, [1, 2, 3, 4]).hex()[:16]
    ('066b1e8987e02713', '52a7f141c60918f6')
    """

    hash_algo: str = "radixlens"  # one of HASH_ALGOS
    seed: str = VLLM_NONE_HASH_SEED  # vLLM modes: the engine's PYTHONHASHSEED, if it set one
    lora_paths: Mapping[str, str] = field(default_factory=dict)  # vLLM modes: name -> path
    none_hash: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.hash_algo not in HASH_ALGOS:
            raise ValueError(f"hash_algo must be one of {', '.join(HASH_ALGOS)}, "
                             f"got {self.hash_algo!r}")
        if not isinstance(self.seed, str):
            raise ValueError(f"seed must be a string, got {type(self.seed).__name__}")
        object.__setattr__(self, "none_hash", NONE_HASH if self.hash_algo == "radixlens"
                           else self._digest(self.seed))

    def _digest(self, value: Any) -> bytes:
        if self.hash_algo == "vllm-sha256":
            return sha256(pickle.dumps(value, protocol=5)).digest()
        if self.hash_algo == "vllm-sha256-cbor":
            return sha256(cbor_canonical(value)).digest()
        parent, tokens, keys = value
        return _radixlens_block(parent, tokens, keys)

    def hash_block(self, parent: BlockHash | None, token_ids: Sequence[int],
                   extra_keys: tuple | None = None) -> BlockHash:
        """One full block, chained to its parent (None for the first block: NONE_HASH)."""
        tokens = list(token_ids) if self.hash_algo == "radixlens" else tuple(token_ids)
        return self._digest((parent or self.none_hash, tokens, extra_keys))

    def extra_keys(self, block_index: int, lora_name: str | None,
                   cache_salt: str | None) -> tuple | None:
        """The extra keys hashed into block `block_index`, as this mode builds them."""
        if self.hash_algo == "radixlens":
            return block_extra_keys(block_index, lora_name, cache_salt)
        keys: list[tuple] = []
        if lora_name:
            path = self.lora_paths.get(lora_name)
            if path is None:
                raise ValueError(f"vLLM hashes a LoRA's name and path: pass lora_paths="
                                 f"{{{lora_name!r}: '/path/to/adapter'}}")
            keys.append(("lora", lora_name, path))
        if block_index == 0 and cache_salt:
            keys.append(("cache_salt", cache_salt))
        return tuple(keys) if keys else None


DEFAULT_HASHER = BlockHasher()


def block_extra_keys(
    block_index: int, lora_name: str | None = None, cache_salt: str | None = None
) -> tuple[str, ...] | None:
    """The extra keys of block `block_index` as KV events publish them (and as the radixlens
    mode hashes them), or None when there are none.

    >>> block_extra_keys(0, "sql-lora", "tenant-a"), block_extra_keys(1, "sql-lora", "tenant-a")
    (('sql-lora', 'tenant-a'), ('sql-lora',))
    >>> block_extra_keys(3) is None
    True
    """
    keys: list[str] = []
    if lora_name:
        keys.append(lora_name)
    if block_index == 0 and cache_salt:
        keys.append(cache_salt)
    return tuple(keys) if keys else None


def hash_block_tokens(
    parent_hash: BlockHash | None,
    token_ids: Sequence[int],
    extra_keys: tuple | None = None,
    hash_algo: str = "radixlens",
) -> BlockHash:
    """Hash one full block, chained to its parent (None for the first block: NONE_HASH).

    >>> h0 = hash_block_tokens(None, [1, 2]); h1 = hash_block_tokens(h0, [3, 4])
    >>> len(h1), h1 == hash_block_tokens(None, [3, 4])
    (32, False)
    """
    if hash_algo == "radixlens":
        return _radixlens_block(parent_hash or NONE_HASH, token_ids, extra_keys)
    return BlockHasher(hash_algo).hash_block(parent_hash, token_ids, extra_keys)


def _radixlens_block(parent: bytes, token_ids: Sequence[int], extra_keys: tuple | None) -> bytes:
    """One block in "radixlens" mode (see the module docstring for the bytes)."""
    keys = _pack(extra_keys) if extra_keys else b""
    try:
        return sha256(parent + struct.pack(f"<{len(token_ids)}q", *token_ids) + keys).digest()
    except struct.error:  # a token outside int64: a distinct form, the ids in decimal
        text = ",".join(map(str, token_ids)).encode() + b";"
        return sha256(_BIG + parent + text + keys).digest()


def hash_request_tokens(
    token_ids: Sequence[int],
    block_size: int,
    lora_name: str | None = None,
    cache_salt: str | None = None,
    known: list[BlockHash] | None = None,
    hash_algo: str | BlockHasher = "radixlens",
    pack: Callable[[Sequence[int]], bytes | None] | None = None,
) -> list[BlockHash]:
    """Hashes of every *full* block of `token_ids`; extends `known` (hashes already computed for
    the first blocks, e.g. before decode added tokens) in place and returns it. `hash_algo` is
    a HASH_ALGOS name or a BlockHasher (for vLLM's seed and LoRA paths). `pack(tokens)`: the
    radixlens mode's bytes of the tokens not hashed yet, as struct.pack("<{n}q") gives them, or
    None when one does not fit in int64 (default: struct.pack over a list; a caller may pack a
    compact sequence without expanding it).

    >>> hs = hash_request_tokens(list(range(40)), 16)
    >>> len(hs), hs[1] == hash_block_tokens(hs[0], range(16, 32))
    (2, True)
    >>> hash_request_tokens(list(range(1, 11)), 4, hash_algo="vllm-sha256")[0].hex()[-16:]
    '1a1eb4e3edd9361a'
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    hasher = hash_algo if isinstance(hash_algo, BlockHasher) else (
        DEFAULT_HASHER if hash_algo == "radixlens" else BlockHasher(hash_algo))
    hashes = known if known is not None else []
    num_full = len(token_ids) // block_size
    i = len(hashes)
    if i >= num_full:
        return hashes
    # subtle: keys differ only for block 0 (cache_salt); compute both once, not per block.
    first_keys = hasher.extra_keys(0, lora_name, cache_salt)
    rest_keys = hasher.extra_keys(1, lora_name, cache_salt)
    end = num_full * block_size
    # only the blocks not hashed yet, as a list (a compact sequence expands just those)
    tokens = token_ids[i * block_size:end]
    parent = hashes[-1] if hashes else hasher.none_hash
    packed = pack(tokens) if pack is not None and hasher.hash_algo == "radixlens" else None
    if hasher.hash_algo != "radixlens":
        if not isinstance(tokens, list | tuple):
            tokens = list(tokens)
        start = 0
        while i < num_full:
            parent = hasher.hash_block(parent, tokens[start:start + block_size],
                                       rest_keys if i else first_keys)
            hashes.append(parent)
            i += 1
            start += block_size
        return hashes
    first = _pack(first_keys) if first_keys else b""
    rest = _pack(rest_keys) if rest_keys else b""
    if packed is None:
        if type(tokens) is TokenRuns and not _runs_fit(tokens):  # not expanded: by its runs
            return _hash_mixed(hashes, parent, tokens, i, num_full, block_size, first, rest)
        if not isinstance(tokens, list | tuple):
            tokens = list(tokens)
        try:  # the default: pack every new token once, in C, then hash slices of the bytes
            packed = struct.pack(f"<{len(tokens)}q", *tokens)
        except struct.error:  # some token does not fit in int64: block by block
            return _hash_mixed(hashes, parent, tokens, i, num_full, block_size, first, rest)
    append, width, pos = hashes.append, 8 * block_size, 0
    if i == 0 and i < num_full:
        parent = sha256(parent + packed[:width] + first).digest()
        append(parent)
        i, pos = 1, width
    while i < num_full:  # the hot loop of every block-cache run
        nxt = pos + width
        parent = sha256(parent + packed[pos:nxt] + rest).digest()
        append(parent)
        i += 1
        pos = nxt
    return hashes


_INT64 = range(-(1 << 63), 1 << 63)
_DIGITS = [b"%03d" % k for k in range(1000)]  # a big token's last three digits


def _runs_fit(tokens: TokenRuns) -> bool:
    """Whether every token fits in int64."""
    return all(start in _INT64 and start + length - 1 in _INT64
               for start, length in tokens.runs())


def _hash_mixed(hashes: list[BlockHash], parent: bytes, tokens: Sequence[int], i: int,
                num_full: int, block_size: int, first: bytes, rest: bytes) -> list[BlockHash]:
    """hash_request_tokens' radixlens loop when some token does not fit in int64 (compact
    traces' synthetic replies): each block as `_radixlens_block` hashes it, a block told apart
    by its least and greatest token, not by a failed struct.pack (an exception a block).
    `tokens`: a list, or a TokenRuns, whose blocks inside one run of tokens past int64 are
    written without an int per token: str(v) is str(v // 1000) + v's last three digits."""
    start, fmt = 0, f"<{block_size}q"
    runs = _BigRuns(tokens, block_size) if type(tokens) is TokenRuns else None
    while i < num_full:
        keys = rest if i else first
        text = runs.text(start) if runs is not None else None
        if text is not None:
            parent = sha256(_BIG + parent + text + keys).digest()
        else:
            block = tokens[start:start + block_size]
            if runs is not None:
                block = list(block)
            if min(block) in _INT64 and max(block) in _INT64:
                parent = sha256(parent + struct.pack(fmt, *block) + keys).digest()
            else:
                text = ",".join(map(str, block)).encode() + b";"
                parent = sha256(_BIG + parent + text + keys).digest()
        hashes.append(parent)
        i += 1
        start += block_size
    return hashes


class _BigRuns:
    """A TokenRuns' blocks read in order: `text(pos)` is the block at `pos`'s decimal form
    (",".join(map(str, block)).encode() + b";") when it lies in one run of tokens >= 2**63
    that does not cross a multiple of 1,000, else None."""

    def __init__(self, tokens: TokenRuns, block_size: int) -> None:
        self.runs, self.block_size = list(tokens.runs()), block_size
        self.k, self.lo = 0, 0  # the run the last block began in, and its first position

    def text(self, pos: int) -> bytes | None:
        runs, k, lo, size = self.runs, self.k, self.lo, self.block_size
        while pos >= lo + runs[k][1]:
            lo += runs[k][1]
            k += 1
        self.k, self.lo = k, lo
        start, length = runs[k]
        if pos + size > lo + length or start < _INT64.stop:
            return None
        high, low = divmod(start + pos - lo, 1000)
        if low + size > 1000:
            return None
        prefix = b"%d" % high
        return prefix + (b"," + prefix).join(_DIGITS[low:low + size]) + b";"


def hash_to_int64(block_hash: BlockHash) -> int:
    """The low 64 bits as an unsigned int: how vLLM's KV events carry a hash
    (`int.from_bytes(hash, "big") & (2**64 - 1)`).

    >>> hash_to_int64(bytes(24) + bytes([0, 0, 0, 0, 0, 0, 1, 2]))
    258
    """
    return int.from_bytes(block_hash[-8:], "big") & _LOW64


class HashMemo:
    """`hashes(tokens, namespace, compute)`: every full block's hash of `tokens`, reusing those
    of the longest known prefix; `compute(known)` extends a list of the first hashes to all.

    >>> calls = []
    >>> def compute(tokens):  # a "hash": the tokens up to the block's end
    ...     def extend(known):
    ...         n = len(tokens) // 2
    ...         calls.append(n - len(known))
    ...         return known + [tuple(tokens[:2 * (i + 1)]) for i in range(len(known), n)]
    ...     return extend
    >>> m = HashMemo(block_size=2)
    >>> m.hashes([1, 2, 3, 4], None, compute([1, 2, 3, 4]))[-1]
    (1, 2, 3, 4)
    >>> m.hashes([1, 2, 3, 4, 5, 6], None, compute([1, 2, 3, 4, 5, 6]))[-1], calls
    ((1, 2, 3, 4, 5, 6), [2, 1])
    """

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.trie = PrefixTrie(unit=block_size)
        self._stored: dict[int, list] = {}  # id(trie node) -> hashes of its [d0, d1)
        self.reused = 0  # hashes taken from the memo
        self.computed = 0  # hashes computed

    def hashes(self, tokens: Sequence[int], namespace: Hashable,
               compute: Callable[[list], list]) -> list:
        num_full = len(tokens) // self.block_size
        walk = self.trie.walk(tokens, namespace, num_full)
        known: list = []
        for node, lo, hi in walk.pieces:
            stored = self._stored[id(node)]
            known.extend(stored[lo - node.d0:hi - node.d0])
        self.reused += len(known)
        out = compute(known)
        self.computed += len(out) - walk.pos
        if walk.pos < num_full:
            new = self.trie.insert(tokens, namespace, num_full, None, walk)
            node = new.node
            self._stored[id(node)] = out[node.d0:node.d1]
        return out
