"""What every router shares: the request it sees, the loads, the decision it returns.

A router picks one of N replicas for each request. It sees the prompt as a chain of block keys
(`block_keys`: each key covers its block and everything before it, as vLLM's block hashes and
Mooncake's hash ids do), the session id when the trace or client gives one, and each replica's
load (`Load`: requests and tokens queued + running). It returns a `Decision`: the replica, the
reason (a word from REASONS), one score per replica and the sentence why. Routers are
deterministic given their seed: the simulator and `engine serve` use the same objects.
`failover` keeps every router off replicas that are down (`engine serve`: a replica whose loop
died): a decision for one goes to the least-loaded live replica instead.
Leaves out: retries, replicas joining.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

from radix.tokens import TokenRuns, is_compact

# Decision.reason: what made the choice
REASONS = ("turn", "random", "least-load", "power-of-two", "session", "cache-hit", "cache-miss",
           "imbalance", "lowest-cost", "prefix-match", "smallest-tree", "failover")


class RouteRequest(NamedTuple):
    rid: str
    block_keys: tuple[int, ...]  # chained keys of the prompt's full blocks (see `block_keys`)
    num_tokens: int  # prompt length, real tokens
    session: str | None = None  # conversation id, when known
    token_ids: Sequence[int] = ()  # the prompt (kv-overlap's event index matches on these)
    output_len: int = 0  # tokens the request will generate (its decode load)


class Load(NamedTuple):
    requests: int  # requests queued + running on the replica
    tokens: int  # their tokens (prompt + output to generate), queued + running


class Decision(NamedTuple):
    rank: int  # the chosen replica
    reason: str  # one of REASONS
    scores: tuple[float, ...]  # per replica: what the router compared (see each router)
    why: str  # one sentence


def failover(decision: Decision, loads: Sequence[Load], live: Sequence[bool]) -> Decision:
    """`decision` if its replica is live, else the least-loaded live replica (fewest tokens,
    ties to the lowest id): a router's choice never lands on a replica that is down.
    ValueError when none is live.

    >>> d = Decision(1, "turn", (0.0, 1.0, 0.0), "round robin: replica 1's turn")
    >>> failover(d, [Load(3, 90), Load(0, 0), Load(1, 20)], [True, False, True])[:2]
    (2, 'failover')
    """
    if live[decision.rank]:
        return decision
    up = [r for r in range(len(live)) if live[r]]
    if not up:
        raise ValueError("no replica is live")
    rank = min(up, key=lambda r: (loads[r].tokens, r))
    return Decision(rank, "failover", decision.scores,
                    f"replica {decision.rank} is down ({decision.reason} chose it); replica "
                    f"{rank} is the least-loaded live one ({loads[rank].tokens:,} tokens)")


def block_keys(token_ids: Sequence[int], block_size: int, namespace: object = None
               ) -> tuple[int, ...]:
    """Chained keys of the full blocks: key i = hash((key i-1, block i's content)).

    Equal keys mean equal prefixes up to that block (up to hash collisions, 64-bit). Python's
    hash of ints and tuples is not salted, so keys are the same in every process.

    >>> a = block_keys([1, 2, 3, 4, 5], 2); b = block_keys([1, 2, 3, 9], 2)
    >>> len(a), a[0] == b[0], a[1] == b[1]
    (2, True, False)
    """
    keys: list[int] = []
    parent = stable_hash(repr(namespace))  # str hashes are salted per process: not hash()
    if is_compact(token_ids):
        contents = _compact_blocks(token_ids, block_size)
    else:
        contents = (tuple(token_ids[s:s + block_size])
                    for s in range(0, len(token_ids) - block_size + 1, block_size))
    for content in contents:
        parent = hash((parent, content))
        keys.append(parent)
    return tuple(keys)


def stable_hash(text: str) -> int:
    """64-bit BLAKE2b of `text`: the same in every process, unlike `hash(str)`.

    >>> stable_hash("a") == stable_hash("a") != stable_hash("b")
    True
    """
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _compact_blocks(tokens: TokenRuns, block_size: int) -> list[tuple]:
    """Each full block's content as its runs' (start, length) pieces: cheap, and equal
    content gives equal pieces (runs are maximal, so a block's pieces are too)."""
    out: list[tuple] = []
    piece: list[tuple[int, int]] = []
    room = block_size
    for start, length in tokens.runs():
        while length:
            take = min(room, length)
            piece.append((start, take))
            start, length, room = start + take, length - take, room - take
            if room == 0:
                out.append(tuple(piece))
                piece, room = [], block_size
    return out
