"""Random JSON and msgpack values into every loader (request, Mooncake, KV events, ops, and the
op replay): a load either succeeds or raises TraceError; nothing else may escape (no
RecursionError, OverflowError, TypeError, UnicodeError, KeyError, ...)."""

from __future__ import annotations

import json

import msgpack
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from radix.runs.ops import replay_ops
from radix.traces import TraceError, load_trace
from radix.traces.limits import TraceLimits

# small limits, so that a random trace that loads also replays fast
LIMITS = TraceLimits(max_tokens_per_request=4096, max_total_tokens=20_000,
                     max_total_output_tokens=20_000, max_requests=64, max_ops=64)
KEYS = ("rid", "arrival", "tokens", "text", "messages", "output_len", "extra_key", "cache_salt",
        "priority", "output_tokens", "meta", "timestamp", "input_length", "output_length",
        "hash_ids", "op", "node", "value", "chunked", "num_tokens", "token", "is_insert",
        "page_size", "policy", "policy_config", "capacity", "protected_threshold", "ts", "events",
        "data_parallel_rank", "type", "block_hashes", "parent_block_hash", "token_ids",
        "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "role",
        "content")
OPS = ("config", "insert", "match", "lock", "unlock", "evict", "start", "extend", "decode",
       "unfinished", "finished")
EVENTS = ("BlockStored", "BlockRemoved", "AllBlocksCleared")

text = st.text(st.characters(exclude_categories=()), max_size=8)  # lone surrogates included
scalars = (st.none() | st.booleans() | st.integers(-3, 40) | st.integers() | st.floats() | text
           | st.integers(-(2 ** 300), 2 ** 300) | st.sampled_from(OPS + EVENTS))
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
    text | st.sampled_from(KEYS), kids, max_size=4), max_leaves=12)
objects = st.dictionaries(st.sampled_from(KEYS) | text, values, max_size=7)
deep = st.integers(20, 3000).map(lambda d: "[" * d + "]" * d)


@st.composite
def jsonl(draw, line_objects=objects) -> bytes:
    """Lines of JSON (near-valid objects mostly), sometimes a random value or one nested past
    any sane depth, as UTF-8 (lone surrogates as CESU bytes: the loader must say "not UTF-8")."""
    lines = draw(st.lists(line_objects, min_size=1, max_size=4))
    if draw(st.integers(0, 7)) == 7:  # hypothesis favours 0: make it the plain case
        lines[draw(st.integers(0, len(lines) - 1))] = draw(values | deep)
    ascii_only = draw(st.sampled_from([True, True, True, False]))
    rendered = [x if isinstance(x, str) and x.startswith("[") else
                json.dumps(x, ensure_ascii=ascii_only) for x in lines]
    return "\n".join(rendered).encode("utf-8", "surrogatepass")


@st.composite
def maybe(draw, valid: st.SearchStrategy):
    """Mostly the valid value, one time in ten any JSON value (hypothesis favours 0)."""
    return draw(values) if draw(st.integers(0, 9)) == 9 else draw(valid)


@st.composite
def near(draw, fields: dict, required: tuple = ()) -> dict:
    """An object close to valid: required fields mostly there, each field mostly valid,
    sometimes a random extra field."""
    out = {}
    for key, valid in fields.items():
        if key in required and draw(st.integers(0, 9)) != 9 or draw(st.booleans()):
            out[key] = draw(maybe(valid))
    if draw(st.integers(0, 19)) == 19:
        out[draw(text | st.sampled_from(KEYS))] = draw(values)
    return out


small_ids = st.lists(st.integers(0, 50), min_size=1, max_size=6)
plain = st.text(max_size=8)


@st.composite
def request_line(draw) -> dict:
    prompt = draw(st.sampled_from(["tokens", "text", "messages"]))
    fields = {"rid": st.uuids().map(str), "output_len": st.integers(0, 5),
              "arrival": st.floats(0, 10), "priority": st.integers(-2, 2), "extra_key": plain,
              "output_tokens": small_ids,
              prompt: {"tokens": small_ids, "text": plain, "messages": st.lists(
                  st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]),
                                         "content": plain}), max_size=2)}[prompt]}
    return draw(near(fields, ("rid", "output_len", prompt)))


@st.composite
def mooncake_line(draw) -> dict:
    ids = draw(st.lists(st.integers(0, 30), min_size=1, max_size=5))
    fields = {"timestamp": st.integers(0, 100) | st.floats(0, 1e3),
              "input_length": st.integers(len(ids) * 512 - 511, len(ids) * 512),
              "output_length": st.integers(0, 5), "hash_ids": st.just(ids)}
    return draw(near(fields, tuple(fields)))


OP_FIELDS = {"insert": ("tokens",), "match": ("tokens",), "lock": ("node",),
             "unlock": ("node",), "evict": ("num_tokens",), "start": ("rid", "tokens"),
             "extend": ("rid",), "decode": ("rid", "token"), "unfinished": ("rid",),
             "finished": ("rid",), "config": ()}
OP_VALUES = {"tokens": small_ids, "rid": st.sampled_from("ab"), "node": st.integers(-1, 6),
             "num_tokens": st.integers(-1, 8), "token": st.integers(0, 5), "value": small_ids,
             "capacity": st.integers(-1, 64), "page_size": st.integers(0, 4),
             "policy": st.sampled_from(["lru", "slru", "lfu", "x"]), "chunked": st.booleans(),
             "is_insert": st.booleans(), "priority": st.integers(-3, 3),
             "policy_config": st.dictionaries(st.just("protected_threshold"), values, max_size=1)}


@st.composite
def op_line(draw) -> dict:
    op = draw(st.sampled_from(list(OP_FIELDS)))
    extra = {"config": ("page_size", "capacity", "policy", "policy_config"),
             "insert": ("value", "priority", "chunked"), "extend": ("num_tokens",),
             "unfinished": ("chunked",), "finished": ("is_insert",), "lock": ("tokens",)}
    names = OP_FIELDS[op] + extra.get(op, ())
    row = draw(near({k: OP_VALUES[k] for k in names}, OP_FIELDS[op]))
    return {"op": draw(maybe(st.just(op))), **row}


@st.composite
def kv_event(draw) -> dict:
    kind = draw(st.sampled_from(EVENTS))
    hashes = draw(st.lists(st.integers(0, 2 ** 63), min_size=1, max_size=3))
    size = draw(st.integers(1, 3))
    fields = {"BlockStored": {"block_hashes": st.just(hashes),
                              "parent_block_hash": st.none() | st.integers(0, 9),
                              "token_ids": st.lists(st.integers(0, 9), min_size=len(hashes) * size,
                                                    max_size=len(hashes) * size),
                              "block_size": st.just(size), "lora_id": st.none(),
                              "medium": st.just("GPU")},
              "BlockRemoved": {"block_hashes": st.just(hashes), "medium": st.just("GPU")},
              "AllBlocksCleared": {}}[kind]
    return {"type": draw(maybe(st.just(kind))), **draw(near(fields, tuple(fields)))}


kv_line = near({"ts": st.floats(0, 1e6) | st.integers(0, 10 ** 6),
                "events": st.lists(kv_event(), max_size=3),
                "data_parallel_rank": st.none() | st.integers(0, 2)}, ("ts", "events"))


def _loads_or_trace_error(data: bytes, fmt: str | None) -> None:
    try:
        trace = load_trace(data, fmt=fmt, limits=LIMITS)
    except TraceError:
        return
    if trace.format == "ops":
        try:
            replay_ops(trace.ops, check_every=1)
        except TraceError:
            pass


SETTINGS = settings(max_examples=150, deadline=None,  # new random examples every run
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(jsonl(request_line()))
def test_request_loader(data):
    _loads_or_trace_error(data, "request")


@SETTINGS
@given(jsonl(mooncake_line()))
def test_mooncake_loader(data):
    _loads_or_trace_error(data, "mooncake")


@SETTINGS
@given(jsonl(op_line()))
def test_op_loader_and_replay(data):
    _loads_or_trace_error(data, "ops")


@SETTINGS
@given(jsonl(objects) | jsonl(request_line()) | jsonl(op_line()) | jsonl(mooncake_line()))
def test_format_detection(data):
    _loads_or_trace_error(data, None)


@st.composite
def msgpack_stream(draw) -> bytes:
    """EventBatch-like msgpack values back to back, maps with any keys (lists too), ints past
    64 bits refused by msgpack itself are left out."""
    def pack(value, packer: msgpack.Packer) -> bytes:
        if isinstance(value, tuple):  # ("map", [(key, value), ...])
            out = packer.pack_map_header(len(value[1]))
            return out + b"".join(pack(k, packer) + pack(v, packer) for k, v in value[1])
        if isinstance(value, list):
            return packer.pack_array_header(len(value)) + b"".join(pack(v, packer) for v in value)
        return packer.pack(value)

    leaf = (st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 64 - 1) | st.floats()
            | st.text(max_size=6) | st.binary(max_size=4) | st.sampled_from(EVENTS))
    tree = st.recursive(leaf, lambda kids: st.lists(kids, max_size=4) | st.tuples(
        st.just("map"), st.lists(st.tuples(kids, kids), max_size=3)), max_leaves=12)
    batch = st.tuples(st.floats() | st.integers(0, 2 ** 64 - 1), st.lists(tree, max_size=3),
                      st.none() | st.integers(0, 3)).map(list)
    items = draw(st.lists(batch | tree, min_size=1, max_size=3))
    packer = msgpack.Packer()
    return b"".join(pack(x, packer) for x in items)


@SETTINGS
@given(jsonl(kv_line) | msgpack_stream())
@example(b"\x93\x00\x91\x81\x91\x00\x00\xc0")  # [0, [{[0]: 0}], nil]: a map with a list key
@example(b'{"ts": ' + b"9" * 400 + b', "events": []}')
def test_kv_events_loader(data):
    _loads_or_trace_error(data, "kv_events")
