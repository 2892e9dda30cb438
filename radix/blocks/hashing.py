"""Chained block hashes for the block cache, after vLLM v1's kv_cache_utils.hash_block_tokens.

Block i's hash = sha256(canonical bytes of (parent hash or NONE_HASH, the block's tokens, extra
keys)). Canonical bytes: the msgpack array `[bin32 parent, [uint token, ...], nil | [str, ...]]`,
shortest int forms, strings as str (msgpack-python's `Packer` with its defaults). Extra keys follow
vLLM's order: the LoRA name on every block, then cache_salt on the first block only (vLLM 0.33
tags them and adds the adapter's path; one name = one adapter here, so partitions agree).
Leaves out: multimodal and prompt-embedding keys. vLLM's default hashes a pickle (sha256 or
xxhash of pickle.dumps), so hash values differ from vLLM's; chaining and lookups behave the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import sha256

from msgpack import Packer

# The parent of block 0. vLLM draws it at random unless PYTHONHASHSEED is set; ours is fixed so
# that runs replay exactly.
NONE_HASH: bytes = sha256(b"radixlens NONE_HASH").digest()

# One reusable packer: msgpack.packb builds a new Packer per call, a third of the hashing time.
# NOTE: not thread-safe; the caches are single-threaded.
_pack = Packer().pack

BlockHash = bytes  # a 32-byte sha256 digest
_LOW64 = (1 << 64) - 1


def block_extra_keys(
    block_index: int, lora_name: str | None = None, cache_salt: str | None = None
) -> tuple[str, ...] | None:
    """The extra keys hashed into block `block_index`, or None when there are none.

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
    extra_keys: tuple[str, ...] | None = None,
) -> BlockHash:
    """Hash one full block, chained to its parent (None for the first block: NONE_HASH).

    >>> h0 = hash_block_tokens(None, [1, 2]); h1 = hash_block_tokens(h0, [3, 4])
    >>> len(h1), h1 == hash_block_tokens(None, [3, 4])
    (32, False)
    """
    data = _pack((parent_hash or NONE_HASH, list(token_ids), extra_keys))
    return sha256(data).digest()


def hash_request_tokens(
    token_ids: Sequence[int],
    block_size: int,
    lora_name: str | None = None,
    cache_salt: str | None = None,
    known: list[BlockHash] | None = None,
) -> list[BlockHash]:
    """Hashes of every *full* block of `token_ids`; extends `known` (hashes already computed for
    the first blocks, e.g. before decode added tokens) in place and returns it.

    >>> hs = hash_request_tokens(list(range(40)), 16)
    >>> len(hs), hs[1] == hash_block_tokens(hs[0], range(16, 32))
    (2, True)
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    hashes = known if known is not None else []
    num_full = len(token_ids) // block_size
    i = len(hashes)
    if i >= num_full:
        return hashes
    parent = hashes[-1] if hashes else NONE_HASH
    # subtle: keys differ only for block 0 (cache_salt); compute both once, not per block.
    first_keys = block_extra_keys(0, lora_name, cache_salt)
    rest_keys = block_extra_keys(1, lora_name, cache_salt)
    tokens = token_ids if isinstance(token_ids, list) else list(token_ids)
    append = hashes.append
    start = i * block_size
    while i < num_full:
        end = start + block_size
        parent = sha256(_pack((parent, tokens[start:end], rest_keys if i else first_keys))).digest()
        append(parent)
        i += 1
        start = end
    return hashes


def hash_to_int64(block_hash: BlockHash) -> int:
    """The low 64 bits as an unsigned int: how vLLM's KV events carry a hash
    (`int.from_bytes(hash, "big") & (2**64 - 1)`).

    >>> hash_to_int64(bytes(24) + bytes([0, 0, 0, 0, 0, 0, 1, 2]))
    258
    """
    return int.from_bytes(block_hash[-8:], "big") & _LOW64
