"""Trace loading: caps, detection, and the request format's round trip (the bad-file corpus:
test_bad_input.py)."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix import events as ev
from radix.request import SlotAllocator
from radix.runs.compare import run_tree
from radix.tokens import TokenRuns
from radix.traces import TraceError, TraceRequest, detect_format, load_trace, to_req
from radix.traces.requests import dumps_requests
from radix.traces.trace import output_tokens
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog


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


@pytest.mark.parametrize("line", [
    b'{"rid": "a", "tokens": [5, 6, 7, 8], "output_len": 0}',  # plain ids: a list
    b'{"timestamp": 0, "input_length": 1100, "output_length": 0, "hash_ids": [7, 8, 3]}',  # runs
])
def test_a_trace_prompt_is_converted_once_and_shared_to_the_tree_event(line):
    """The prompt is converted once, when the trace is loaded (radix/tokens/ `Tokens`): the
    Req, the tree's key and node and the NodeInserted event of a replayed request all hold that
    same object, no copy (a reply-less request: its whole key is the prompt)."""
    trace = load_trace(line + b"\n")
    prompt = trace.requests[0].token_ids
    assert type(prompt) is (list if b"tokens" in line else TokenRuns)
    req = to_req(trace.requests[0])
    assert req.origin_input_ids is prompt and req.all_ids is prompt
    log = EventLog()
    tree = RadixCache(allocator=SlotAllocator(10_000, runs=type(prompt) is TokenRuns), sink=log)
    run_tree([req], [output_tokens(trace, 0)], 10_000, 1, tree=tree)
    (node,) = tree.root_node.children.values()
    (inserted,) = [e for e in log.events_of(log.num_steps - 1) if type(e) is ev.NodeInserted]
    assert node.key.token_ids is prompt and inserted.token_ids is prompt


def test_text_and_messages_use_given_tokenizer():
    data = (b'{"rid": "t", "text": "abc", "output_len": 1}\n'
            b'{"rid": "m", "messages": [{"role": "user", "content": [{"type": "text", '
            b'"text": "hi"}]}], "output_len": 1}\n')
    seen = []
    trace = load_trace(data, tokenize=lambda s: [ord(c) for c in s],
                       chat_template=lambda ms: seen.append(ms) or [9, 9])
    assert trace.requests[0].token_ids == [97, 98, 99]
    assert trace.requests[1].token_ids == [9, 9]
    assert seen == [[{"role": "user", "content": "hi"}]]


def test_tokenizer_output_is_validated_too():
    with pytest.raises(TraceError, match='line 1, field "text": item 0 is -1'):
        load_trace(b'{"rid": "t", "text": "abc", "output_len": 1}', tokenize=lambda s: [-1])


requests_st = st.lists(st.builds(
    TraceRequest,
    rid=st.text(min_size=1, max_size=8),
    arrival=st.floats(0, 1e6, allow_nan=False),
    token_ids=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=20),
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
