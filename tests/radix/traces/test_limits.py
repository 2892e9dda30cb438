"""What a trace may expand to (TraceLimits, counted while loading), gzip members, and the op
replay's checking cadence (once every `nodes` ops, the first bad op narrowed down)."""

from __future__ import annotations

import gzip
import json

import pytest

from radix.runs import ops as run_ops
from radix.runs.ops import replay_ops
from radix.traces import TraceError, load_trace
from radix.traces.limits import MAX_OPS, MAX_TOTAL_OUTPUT_TOKENS, Tally, TraceLimits
from radix.traces.ops import OpTraceError, parse_ops
from radix.traces.reading import gunzip


def _requests(n: int, output_len: int = 1, tokens: int = 2) -> bytes:
    return "".join(json.dumps({"rid": f"r{i}", "tokens": list(range(1, tokens + 1)),
                               "output_len": output_len}) + "\n" for i in range(n)).encode()


def _mooncake(n: int, output_len: int = 1) -> bytes:
    return "".join(json.dumps({"timestamp": i, "input_length": 1000, "output_length": output_len,
                               "hash_ids": [i, i + 1]}) + "\n" for i in range(n)).encode()


@pytest.mark.parametrize("limits, data, line, field, figure", [
    # 3 requests of 10 output tokens: 30 > 25 on line 3
    (TraceLimits(max_total_output_tokens=25), _requests(5, output_len=10), 3, "output_len",
     "output tokens reach 30, over the limit of 25 (max_total_output_tokens)"),
    # 4 prompt tokens a request: 12 > 10 on line 3
    (TraceLimits(max_total_tokens=10), _requests(5, tokens=4), 3, "tokens",
     "prompt tokens reach 12, over the limit of 10 (max_total_tokens)"),
    # 5 lines for 3 requests: refused before parsing, at the first line past the limit
    (TraceLimits(max_requests=3), _requests(5), 4, None,
     "more lines than the limit of 3 requests allows (max_requests)"),
    # Mooncake: 2 hash ids (units) a request, 3 requests: 6 > 5
    (TraceLimits(max_total_tokens=5), _mooncake(4), 3, "hash_ids",
     "prompt tokens reach 6, over the limit of 5 (max_total_tokens)"),
    (TraceLimits(max_total_output_tokens=15), _mooncake(4, output_len=8), 2, "output_length",
     "output tokens reach 16, over the limit of 15"),
    # op traces: 2 tokens an op, 3 ops: 6 > 5; the config line is not an op
    (TraceLimits(max_total_tokens=5),
     b'{"op": "config"}\n' + b'{"op": "match", "tokens": [1, 2]}\n' * 4, 4, "tokens",
     "tokens reach 6, over the limit of 5 (max_total_tokens)"),
    # 3 lines may be config + 2 ops, so the count runs while parsing: the 3rd op is refused
    (TraceLimits(max_ops=2), b'{"op": "evict", "num_tokens": 1}\n' * 3, 3, None,
     "ops reach 3, over the limit of 2 (max_ops)"),
    (TraceLimits(max_ops=2), b'{"op": "config"}\n' + b'{"op": "evict", "num_tokens": 1}\n' * 3,
     4, None, "more lines than the limit of 2 ops allows (max_ops)"),
])
def test_each_limit_names_itself_the_figure_and_the_line(limits, data, line, field, figure):
    with pytest.raises(TraceError) as info:
        load_trace(data, limits=limits)
    assert (info.value.line, info.value.field) == (line, field), str(info.value)
    assert figure in str(info.value)


def test_defaults_hold_the_issue_case_and_pass_the_examples():
    """90 requests of output_len 1,048,576 (a 5.3 KB file) ask for 94,371,840 output tokens;
    the default limit of 2,097,152 stops line 3 (3 x 1,048,576 = 3,145,728)."""
    assert MAX_TOTAL_OUTPUT_TOKENS == 2_097_152
    with pytest.raises(TraceError, match="line 3, .*3,145,728, over the limit of 2,097,152"):
        load_trace(_requests(90, output_len=1 << 20))
    assert len(load_trace(_requests(2, output_len=1 << 20)).requests) == 2


def test_limits_are_validated_and_kwargs_override():
    with pytest.raises(ValueError, match="max_ops must be an int >= 1"):
        TraceLimits(max_ops=0)
    with pytest.raises(ValueError, match="max_requests"):
        TraceLimits(max_requests=True)
    data = _requests(1, tokens=5)
    with pytest.raises(TraceError, match="5 items exceed the cap of 4"):
        load_trace(data, limits=TraceLimits(max_tokens_per_request=100), max_tokens_per_request=4)
    assert TraceLimits().max_ops == MAX_OPS


def test_tally_counts_ops_and_requests_apart():
    tally = Tally(TraceLimits(max_ops=1, max_requests=1))
    tally.add_request(1, 1, 1)
    tally.add_op(2, 1)
    with pytest.raises(TraceError, match="max_ops"):
        tally.add_op(3, 1)


def test_every_gzip_member_counts_against_the_cap():
    """Two members of 100 bytes each (about 70 compressed): both load under a 250-byte cap;
    under 150 the second member crosses it."""
    one = b'{"rid": "a", "tokens": [1, 2, 3], "output_len": 1}'.ljust(99) + b"\n"
    two = one.replace(b'"a"', b'"b"')
    both = gzip.compress(one) + gzip.compress(two)
    assert len(both) < 150
    assert [r.rid for r in load_trace(both, max_bytes=250).requests] == ["a", "b"]
    with pytest.raises(TraceError, match="decompresses past the 150-byte cap"):
        load_trace(both, max_bytes=150)
    assert gunzip(both + b"\x00" * 512, 250) == one + two  # tape padding after the last member


def test_op_replay_check_cadence_known_answer():
    """95 ops checked every 10: after op 1, then ops 11, 21, ..., 91, and after the last (95):
    1 + 9 + 1 = 11 checks. The default cadence checks after every op while the tree is only
    its root (matches insert nothing)."""
    trace = parse_ops("\n".join('{"op": "match", "tokens": [1]}' for _ in range(95)))
    assert replay_ops(trace, check_every=10).num_checks == 11
    assert replay_ops(trace).num_checks == 95
    assert replay_ops(trace, check=False).num_checks == 0


def _wide_trace(num_ops: int) -> str:
    """Inserts of distinct 2-token keys: one new leaf each, so the tree has ~num_ops nodes."""
    return "\n".join(json.dumps({"op": "insert", "tokens": [i, i + 1]}) for i in range(num_ops))


@pytest.mark.parametrize("bad_index", [0, 1, 400, 777, 998, 999])
def test_first_bad_op_is_found_between_sparse_checks(monkeypatch, bad_index):
    """A bug injected into the op at `bad_index` (evictable_size_ one too high from then on).
    Each insert adds a node, so the default cadence (once every `nodes` ops) checks after ops
    1, 3, 7, 15, ..., 511 and the last: 10 checks in 1,000 ops, yet it names the same line as a
    check after every op (line = index + 1), with the same message. Checks stop at a failure."""
    real_insert = run_ops.OpRunner._insert

    def buggy_insert(self, a):
        out = real_insert(self, a)
        if a["tokens"][0] == bad_index:
            self.cache.evictable_size_ += 1
        return out

    monkeypatch.setattr(run_ops.OpRunner, "_insert", buggy_insert)
    trace = parse_ops(_wide_trace(1000))
    sparse, dense = replay_ops(trace), replay_ops(trace, check_every=1)
    assert sparse.num_checks <= 10 and dense.num_checks == bad_index + 1
    assert sparse.first_bad_line == dense.first_bad_line == bad_index + 1
    assert sparse.first_bad_index == bad_index
    assert sparse.violation == dense.violation and "evictable/protected sizes" in sparse.violation


def test_runtime_errors_name_line_and_field():
    trace = parse_ops('{"op": "insert", "tokens": [1, 2]}\n{"op": "lock", "node": 99}')
    with pytest.raises(OpTraceError) as info:
        replay_ops(trace)
    assert (info.value.line, info.value.field) == (2, "node")
    assert "no live node 99" in str(info.value)
    trace = parse_ops('{"op": "config", "capacity": 1}\n{"op": "insert", "tokens": [1, 2]}')
    with pytest.raises(OpTraceError, match='line 2, field "tokens": op "insert": out of KV slots'):
        replay_ops(trace)


def test_fallback_tokenizer_stops_past_the_per_request_cap():
    """50 pieces ("!" x 50) against a cap of 10: the codec stops at 11 ids and the line is
    refused; the same for chat messages."""
    data = json.dumps({"rid": "a", "text": "!" * 50, "output_len": 1}).encode()
    with pytest.raises(TraceError, match='line 1, field "text": more than 10 tokens'):
        load_trace(data, max_tokens_per_request=10)
    data = json.dumps({"rid": "a", "messages": [{"role": "user", "content": "!" * 50}],
                       "output_len": 1}).encode()
    with pytest.raises(TraceError, match='field "messages": more than 10 tokens'):
        load_trace(data, max_tokens_per_request=10)
    from radix.traces import textcodec
    assert len(textcodec.encode("!" * 50, max_ids=11)) == 11


def test_the_server_limits_bound_a_replay(monkeypatch):
    """RADIXLENS_TRACE_LIMITS sets what an upload may hold (the Trace page passes
    server_limits() to its replay: tests/app/test_app.py): 3 Mooncake requests of 8 output
    tokens pass 16 > 15 on line 2 under max_total_output_tokens=15, and replay under 24."""
    from runtime.budget import Budget, server_limits
    from scenarios.trace import replay

    data = _mooncake(3, output_len=8)
    monkeypatch.setenv("RADIXLENS_TRACE_LIMITS", "max_total_output_tokens=15, max_ops=9")
    assert server_limits().max_ops == 9
    with pytest.raises(TraceError) as info:
        replay(data, "t.jsonl", limits=server_limits(), budget=Budget())
    assert (info.value.line, info.value.field) == (2, "output_length")
    monkeypatch.setenv("RADIXLENS_TRACE_LIMITS", "max_total_output_tokens=24")
    assert replay(data, "t.jsonl", limits=server_limits(),
                  budget=Budget()).stats["tree"]["requests"] == 3
    with pytest.raises(ValueError, match="max_requests"):
        server_limits("max_requests=0")
