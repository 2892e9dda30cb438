"""Seeded generators for the scenarios of DESIGN.md, as lists of `TraceRequest`.

Token ids are synthetic: every segment (system prompt, few-shot block, message, document, reply)
draws fresh ids that appear nowhere else in the workload, so two prompts share exactly the
prefixes the scenario designs and nothing by accident. Same seed, same trace. Replies a later
turn's prompt contains are carried as `output_ids`, so a simulated run can hit them.
Leaves out: real text (see `radix.traces.textcodec` / "text" traces for that), and server settings:
capacity and budgets belong to the simulator; the docstrings say which ones the scenarios assume.
"""

from __future__ import annotations

import random

from radix.traces.trace import TraceRequest

SYSTEM_LEN = 512  # S: the customer-support system prompt
FEW_SHOT_LEN = 1_543  # F: the few-shot block
RAG_LEN = 2_112  # R3's RAG context and its own query


class Tokens:
    """Fresh, never repeated token ids in [1_000, 1_000_000) from a seeded generator.

    >>> t = Tokens(0); a, b = t.take(3), t.take(3); len(set(a + b))
    6
    """

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._used: set[int] = set()

    def take(self, n: int) -> list[int]:
        out = []
        while len(out) < n:
            t = self._rng.randrange(1_000, 1_000_000)
            if t not in self._used:
                self._used.add(t)
                out.append(t)
        return out


def _req(rid: str, arrival: float, tokens: list[int], output_len: int, **kw) -> TraceRequest:
    return TraceRequest(rid, round(arrival, 6), tuple(tokens), output_len, **kw)


def three_requests(seed: int = 0) -> list[TraceRequest]:
    """The three-request walk of DESIGN.md: R1 = S+F+96, R2 = S+F+80, R3 = S+2,112.

    Stored apart: 2,151 + 2,135 + 2,624 = 6,910 tokens. The tree holds S + F + 96 + 80 + 2,112
    = 512 + 1,543 + 96 + 80 + 2,112 = 4,343, saving 2,567. output_len 1: SGLang caches
    (prompt + output)[:-1], so the tree stores exactly the prompts.
    """
    t = Tokens(seed)
    s, f = t.take(SYSTEM_LEN), t.take(FEW_SHOT_LEN)
    return [_req("R1", 0.0, s + f + t.take(96), 1), _req("R2", 1.0, s + f + t.take(80), 1),
            _req("R3", 2.0, s + t.take(RAG_LEN), 1)]


def cold_burst(n: int = 64, prefix_len: int = 2_000, suffix_len: int = 16,
               seed: int = 0) -> list[TraceRequest]:
    """`n` requests at t = 0 sharing one cold `prefix_len` prefix, each with its own suffix.

    All admitted at once: 64 x 2,000 = 128,000 prefix tokens prefilled (+ 64 x 16 suffixes).
    First one alone, then the rest hit: 2,000 + 63 x 0 prefix tokens, saving 63 x 2,000 =
    126,000 whatever the suffix length. suffix_len=0 makes them identical: a hit is then capped
    at input_len - 1 = 1,999 tokens.
    """
    t = Tokens(seed)
    prefix = t.take(prefix_len)
    return [_req(f"burst-{i:02d}", 0.0, prefix + t.take(suffix_len), 32) for i in range(n)]


def multi_turn(num_users: int = 1, seed: int = 0) -> list[TraceRequest]:
    """Five-turn chats: context 4,300 by turn 4; turn 5 adds a 300-token reply + 120-token message.

    Turn prompts (S = 512): 712 = S + 200; 1,312 = 712 + 350 + 250; 2,550 = 1,312 + 900 + 338;
    4,300 = 2,550 + 1,200 + 550; 4,720 = 4,300 + 300 + 120. The tree matches 4,600 of turn 5
    (4,300 + the reply) and prefills 120; cold it prefills 4,720. (Subtle: SGLang caches
    (prompt + output)[:-1], so an engine that stores only that matches 4,599.)
    Users share S; turns of one user arrive 30 s apart, users 1 s apart.
    """
    messages, replies = (200, 250, 338, 550, 120), (350, 900, 1_200, 300, 200)
    t = Tokens(seed)
    system = t.take(SYSTEM_LEN)
    out = []
    for u in range(num_users):
        context = list(system)
        for turn, (m, r) in enumerate(zip(messages, replies), start=1):
            context += t.take(m)
            reply = t.take(r)
            out.append(_req(f"u{u:03d}-t{turn}", u * 1.0 + (turn - 1) * 30.0, context, r,
                            output_ids=tuple(reply)))
            context = context + reply
    return sorted(out, key=lambda r: r.arrival)


def eviction_question(num_live: int = 400, message_len: int = 24,
                      seed: int = 0) -> list[TraceRequest]:
    """A 2,112-token RAG request that finishes first, then `num_live` conversations sharing S.

    The RAG request (S + 2,112, output 1) arrives at 0; the conversations (S + 24 each, output
    2,048 so they stay live) at 1.0 s, 1 ms apart. Once all are admitted the cache holds
    512 + 2,112 + 400 x 24 = 12,224 tokens; at a capacity of 11,924 the last admissions must free
    300. The tree can only evict the dead 2,112-token leaf (S is interior with live children).
    """
    t = Tokens(seed)
    system = t.take(SYSTEM_LEN)
    out = [_req("rag-0", 0.0, system + t.take(RAG_LEN), 1)]
    out += [_req(f"conv-{i:03d}", 1.0 + i * 0.001, system + t.take(message_len), 2_048)
            for i in range(num_live)]
    return out


def customer_support(num_users: int = 20, max_turns: int = 4, seed: int = 0,
                     rate: float = 2.0) -> list[TraceRequest]:
    """Per-user support conversations over S (512) + F (1,543).

    Users start as a Poisson process (`rate` per second); each has 1..max_turns turns: a 20-120
    token message, a 40-250 token reply (carried as output_ids), the next turn 5-30 s later.
    Turn k + 1's prompt is turn k's prompt + reply + the new message.
    """
    t, rng = Tokens(seed), random.Random(seed + 1)
    prefix = t.take(SYSTEM_LEN) + t.take(FEW_SHOT_LEN)
    out, start = [], 0.0
    for u in range(num_users):
        start += rng.expovariate(rate)
        context, arrival = list(prefix), start
        for turn in range(1, rng.randint(1, max_turns) + 1):
            context += t.take(rng.randint(20, 120))
            reply = t.take(rng.randint(40, 250))
            out.append(_req(f"user{u:03d}-t{turn}", arrival, context, len(reply),
                            output_ids=tuple(reply)))
            context = context + reply
            arrival += rng.uniform(5.0, 30.0)
    return sorted(out, key=lambda r: r.arrival)


def rag(num_requests: int = 200, num_docs: int = 40, docs_per_request: int = 3,
        seed: int = 0, rate: float = 4.0) -> list[TraceRequest]:
    """RAG: S + `docs_per_request` retrieved documents (300-900 tokens) + a 20-80 token query.

    Documents are drawn by popularity (Zipf-like weight 1/rank), the most relevant first, so
    requests share S plus however many leading documents they retrieved in the same order.
    """
    t, rng = Tokens(seed), random.Random(seed + 1)
    system = t.take(SYSTEM_LEN)
    docs = [t.take(rng.randint(300, 900)) for _ in range(num_docs)]
    weights = [1.0 / (rank + 1) for rank in range(num_docs)]
    out, arrival = [], 0.0
    for i in range(num_requests):
        arrival += rng.expovariate(rate)
        chosen: list[int] = []
        while len(chosen) < min(docs_per_request, num_docs):
            d = rng.choices(range(num_docs), weights)[0]
            if d not in chosen:
                chosen.append(d)
        prompt = system + [tok for d in chosen for tok in docs[d]] + t.take(rng.randint(20, 80))
        out.append(_req(f"rag-{i:03d}", arrival, prompt, rng.randint(50, 300)))
    return out


SCENARIOS = {  # name -> generator with defaults; `python -m examples.generate` writes them all
    "three_requests": three_requests,
    "cold_burst": cold_burst,
    "multi_turn": multi_turn,
    "eviction_question": eviction_question,
    "customer_support": customer_support,
    "rag": rag,
}
