"""Trace loading: the bad-file corpus (each error names its line and field), caps, detection,
and the request format's round trip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.traces import TraceError, TraceRequest, detect_format, load_trace, to_req
from radix.traces.requests import dumps_requests

BAD = Path(__file__).parent / "data" / "bad"

# file -> (line, field, words the message must contain); line None: binary or whole-file errors
CORPUS = {
    "empty.jsonl": (None, None, "empty"),
    "blank_lines.jsonl": (None, None, "empty"),
    "not_utf8.jsonl": (2, None, "not UTF-8"),
    "binary_junk.bin": (1, None, "not UTF-8"),
    "truncated.jsonl": (2, None, "truncated line"),
    "tokens_str.jsonl": (7, "tokens", "expected a list of ints, got str"),
    "missing_rid.jsonl": (2, "rid", "missing"),
    "missing_output_len.jsonl": (2, "output_len", "missing"),
    "bool_output_len.jsonl": (2, "output_len", "got bool"),
    "negative_output_len.jsonl": (2, "output_len", "out of range"),
    "huge_output_len.jsonl": (2, "output_len", "out of range"),
    "token_float.jsonl": (2, "tokens", "item 1 is float"),
    "token_negative.jsonl": (2, "tokens", "item 1 is -2"),
    "token_bool.jsonl": (2, "tokens", "item 1 is bool"),
    "token_huge.jsonl": (2, "tokens", "item 0 is 1099511627776"),
    "arrival_nan.jsonl": (2, "arrival", "not a finite number"),
    "arrival_string.jsonl": (2, "arrival", "got str"),
    "arrival_negative.jsonl": (2, "arrival", "out of range"),
    "arrival_huge.jsonl": (2, "arrival", "out of range"),
    "two_prompts.jsonl": (2, "text", "exactly one of tokens, text, messages"),
    "no_prompt.jsonl": (2, "tokens", "got none"),
    "empty_tokens.jsonl": (2, "tokens", "empty"),
    "not_object.jsonl": (2, None, "expected a JSON object, got list"),
    "unknown_field.jsonl": (2, "output_length", "unknown field"),
    "duplicate_rid.jsonl": (2, "rid", "duplicate rid 'r0' (first on line 1)"),
    "rid_int.jsonl": (2, "rid", "got int"),
    "priority_float.jsonl": (2, "priority", "got float"),
    "extra_key_int.jsonl": (2, "extra_key", "got int"),
    "messages_no_role.jsonl": (2, "messages[1].role", "role"),
    "messages_image.jsonl": (2, "messages[0].content[0]", "text"),
    "text_not_string.jsonl": (2, "text", "got list"),
    "output_tokens_mismatch.jsonl": (2, "output_tokens", "2 tokens but output_len is 3"),
    "deep_nesting.jsonl": (2, None, "nested deeper"),
    "mc_missing_hash_ids.jsonl": (3, "hash_ids", "missing"),
    "mc_hash_count.jsonl": (3, "hash_ids", "ceil(1500 / 512) = 3"),
    "mc_timestamp_string.jsonl": (3, "timestamp", "got str"),
    "mc_input_zero.jsonl": (3, "input_length", "out of range"),
    "mc_hash_negative.jsonl": (3, "hash_ids", "item 1 is -1"),
    "mc_output_bool.jsonl": (3, "output_length", "got bool"),
    "mc_truncated.jsonl": (2, None, "truncated line"),
    "kv_truncated.msgpack": (None, None, "batch 2 (byte 123): truncated msgpack"),
    "kv_junk.msgpack": (None, None, "not a msgpack EventBatch stream"),
    "kv_ts_string.msgpack": (None, "ts", "expected a number"),
    "kv_bad_type.jsonl": (2, "type", "unknown event type 'BlockExploded'"),
    "kv_missing_events.jsonl": (1, "events", "missing"),
    "kv_hash_string.jsonl": (1, "block_hashes", "expected an int hash"),
}


def test_corpus_is_complete():
    assert sorted(p.name for p in BAD.iterdir()) == sorted(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bad_file_names_line_and_field(name):
    line, field, words = CORPUS[name]
    with pytest.raises(TraceError) as info:
        load_trace(BAD / name)
    err = info.value
    assert (err.line, err.field) == (line, field), str(err)
    assert words in str(err)
    if line is not None:
        assert f"line {line}" in str(err)
    if field is not None and not name.startswith("kv_"):
        assert f'field "{field}"' in str(err)


def test_size_cap_names_the_cap():
    data = b'{"rid": "a", "tokens": [1, 2, 3], "output_len": 1}\n'
    with pytest.raises(TraceError, match="larger than the 10-byte cap"):
        load_trace(data, max_bytes=10)


def test_gzip_bomb_is_capped():
    bomb = gzip.compress(b" " * 1_000_000)
    with pytest.raises(TraceError, match="decompresses past"):
        load_trace(bomb, max_bytes=100_000)


def test_token_cap_names_line_and_field():
    data = b'{"rid": "a", "tokens": [1, 2], "output_len": 1}\n' \
           b'{"rid": "b", "tokens": [1, 2, 3, 4, 5], "output_len": 1}\n'
    with pytest.raises(TraceError, match=r'line 2, field "tokens": 5 items exceed the cap of 4'):
        load_trace(data, max_tokens_per_request=4)


def test_mooncake_token_cap_applies_to_real_tokens():
    data = b'{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2, 3]}'
    assert load_trace(data).input_lens == [1025]
    with pytest.raises(TraceError, match='field "input_length"'):
        load_trace(data, max_tokens_per_request=1024)


def test_detect_format():
    assert detect_format(b'{"rid": "a"}') == "request"
    assert detect_format(b'{"op": "config", "page_size": 1}\n') == "ops"
    assert detect_format(b'{"ts": 1.0, "events": []}') == "kv_events"
    assert detect_format(b"\x93\xcb") == "kv_events"
    assert detect_format(b'{"timestamp": 0, "hash_ids": [1]}') == "mooncake"


def test_op_traces_go_to_optrace_or_say_why():
    data = b'{"op": "config", "page_size": 1}\n{"op": "insert", "tokens": [1, 2]}\n'
    try:
        import radix.traces.ops  # noqa: F401
    except ImportError:
        with pytest.raises(TraceError, match="op traces need radix.traces.ops"):
            load_trace(data)
    else:
        assert load_trace(data).format == "ops"
        with pytest.raises(TraceError) as info:
            load_trace(data.replace(b'"tokens"', b'"tokenz"'))
        assert (info.value.line, info.value.field) == (2, "tokenz")


def test_unknown_fmt_is_refused():
    with pytest.raises(TraceError, match="unknown trace format 'csv'"):
        load_trace(b'{"rid": "a"}', fmt="csv")


def test_requests_sorted_by_arrival_and_to_req():
    data = (b'{"rid": "late", "arrival": 2, "tokens": [1], "output_len": 1}\n'
            b'{"rid": "early", "arrival": 1, "tokens": [7, 8], "output_len": 5, "priority": 3,'
            b' "extra_key": "lora-a", "cache_salt": "t1"}\n')
    trace = load_trace(data)
    assert [r.rid for r in trace.requests] == ["early", "late"]
    assert trace.input_lens == [2, 1]
    req = to_req(trace.requests[0])
    assert (req.origin_input_ids, req.max_new_tokens, req.priority) == ([7, 8], 5, 3)
    assert (req.extra_key, req.cache_salt, req.arrival) == ("lora-a", "t1", 1.0)


def test_text_and_messages_use_given_tokenizer():
    data = (b'{"rid": "t", "text": "abc", "output_len": 1}\n'
            b'{"rid": "m", "messages": [{"role": "user", "content": [{"type": "text", '
            b'"text": "hi"}]}], "output_len": 1}\n')
    seen = []
    trace = load_trace(data, tokenize=lambda s: [ord(c) for c in s],
                       chat_template=lambda ms: seen.append(ms) or [9, 9])
    assert trace.requests[0].token_ids == (97, 98, 99)
    assert trace.requests[1].token_ids == (9, 9)
    assert seen == [[{"role": "user", "content": "hi"}]]


def test_tokenizer_output_is_validated_too():
    with pytest.raises(TraceError, match='line 1, field "text": item 0 is -1'):
        load_trace(b'{"rid": "t", "text": "abc", "output_len": 1}', tokenize=lambda s: [-1])


requests_st = st.lists(st.builds(
    TraceRequest,
    rid=st.text(min_size=1, max_size=8),
    arrival=st.floats(0, 1e6, allow_nan=False),
    token_ids=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=20).map(tuple),
    output_len=st.integers(0, 50),
    extra_key=st.none() | st.text(max_size=5),
    cache_salt=st.none() | st.text(max_size=5),
    priority=st.integers(-5, 5),
), min_size=1, max_size=8, unique_by=lambda r: r.rid)


@settings(max_examples=60, deadline=None)
@given(requests_st)
def test_write_then_load_is_identity(requests):
    """dumps_requests -> load_trace gives the same requests, in stable arrival order."""
    loaded = load_trace(dumps_requests(requests).encode()).requests
    assert loaded == sorted(requests, key=lambda r: r.arrival)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_load_or_raise_trace_error(data):
    """Junk never escapes as another exception type."""
    try:
        load_trace(data)
    except TraceError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["rid", "tokens", "output_len", "arrival", "priority",
                                        "text", "extra_key"]),
                       st.none() | st.booleans() | st.integers() | st.floats() | st.text()
                       | st.lists(st.integers(-3, 3), max_size=3)))
def test_any_json_object_loads_or_names_line_1(obj):
    try:
        load_trace(json.dumps(obj).encode() + b"\n", fmt="request")
    except TraceError as err:
        assert err.line == 1 or err.line is None
