"""The hostile-file corpus (tests/data/bad, each file listed in its README): every file through its
loader and through `python -m radix`. Each gives one TraceError (one `error:` line, exit 2)
naming its line and field, or its correct result; never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from machine import seconds

from radix.cli import main
from radix.runs.ops import replay_ops
from radix.traces import TraceError, load_trace
from radix.traces.ops import OpTraceError, load_ops

ROOT = Path(__file__).resolve().parents[3]
BAD = ROOT / "tests" / "data" / "bad"
MD = "![x](http://attacker.example/p.png)<img src=x onerror=alert(1)>"
MD_NAME = "md_name_![x](http:attacker.example)<b>x.jsonl"

# Refused while loading: file -> (line, field, words the message must contain). line None:
# a whole-file error (size, gzip, binary stream).
REFUSED = {
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
    "arrival_1e400.jsonl": (2, "arrival", "inf is not a finite number"),
    "two_prompts.jsonl": (2, "text", "exactly one of tokens, text, messages"),
    "no_prompt.jsonl": (2, "tokens", "got none"),
    "empty_tokens.jsonl": (2, "tokens", "empty"),
    "not_object.jsonl": (2, None, "expected a JSON object, got list"),
    "unknown_field.jsonl": (2, "output_length", "unknown field"),
    "duplicate_rid.jsonl": (2, "rid", "duplicate rid 'r0' (first on line 1)"),
    "rid_int.jsonl": (2, "rid", "got int"),
    "rid_list.jsonl": (2, "rid", "got list"),
    "output_len_dict.jsonl": (2, "output_len", "got dict"),
    "priority_float.jsonl": (2, "priority", "got float"),
    "extra_key_int.jsonl": (2, "extra_key", "got int"),
    "messages_no_role.jsonl": (2, "messages[1].role", "role"),
    "messages_image.jsonl": (2, "messages[0].content[0]", "text"),
    "text_not_string.jsonl": (2, "text", "got list"),
    "output_tokens_mismatch.jsonl": (2, "output_tokens", "2 tokens but output_len is 3"),
    "deep_nesting.jsonl": (2, None, "nested deeper than 32"),
    "deep_nesting_first_line.jsonl": (1, None, "nested deeper than 32"),
    "deep_nesting_line_3.jsonl": (3, None, "nested deeper than 32"),
    "number_5000_digits.jsonl": (2, None, "a number of more than 4,300 digits"),
    "rid_lone_surrogate.jsonl": (2, "rid", "lone surrogate U+D800 at character 1"),
    "text_lone_surrogate.jsonl": (2, "text", "lone surrogate U+DC00 at character 6"),
    "messages_lone_surrogate.jsonl": (2, "messages[0].content", "lone surrogate U+D83D"),
    "field_name_control.jsonl": (2, "a\nb\u2028\ud800", r'field "a\nb\u2028\ud800": unknown'),
    "expand_output_total.jsonl": (3, "output_len", "output tokens reach 3,145,728, over the "
                                  "limit of 2,097,152 (max_total_output_tokens)"),
    "gzip_bomb.jsonl.gz": (None, None, "decompresses past the 67,108,864-byte cap"),
    "gzip_truncated.jsonl.gz": (None, None, "truncated gzip data (member 1)"),
    "gzip_trailing_junk.jsonl.gz": (None, None, "4 bytes after gzip member 1 are not gzip"),
    "md_rid_duplicate.jsonl": (2, "rid", f"duplicate rid '{MD}'"),
    "md_unknown_field.jsonl": (2, MD, "unknown field"),
    MD_NAME: (2, None, "expected a JSON object, got list"),
    # Mooncake traces
    "mc_missing_hash_ids.jsonl": (3, "hash_ids", "missing"),
    "mc_hash_count.jsonl": (3, "hash_ids", "ceil(1500 / 512) = 3"),
    "mc_hash_ids_dict.jsonl": (2, "hash_ids", "got dict"),
    "mc_timestamp_string.jsonl": (3, "timestamp", "got str"),
    "mc_timestamp_1e400.jsonl": (2, "timestamp", "not a finite number"),
    "mc_input_zero.jsonl": (3, "input_length", "out of range"),
    "mc_hash_negative.jsonl": (3, "hash_ids", "item 1 is -1"),
    "mc_output_bool.jsonl": (3, "output_length", "got bool"),
    "mc_truncated.jsonl": (2, None, "truncated line"),
    "mc_deep_nesting.jsonl": (2, None, "nested deeper than 32"),
    # (Mooncake replies are runs: their default cap is 16,777,216 output tokens, crossed on 17)
    "mc_expand_output_total.jsonl": (17, "output_length", "(max_total_output_tokens)"),
    # op traces
    "ops_op_list.jsonl": (2, "op", "expected an op name (a string), got list"),
    "ops_op_dict.jsonl": (2, "op", "expected an op name (a string), got dict"),
    "ops_deep_nesting.jsonl": (2, None, "nested deeper than 32"),
    "ops_rid_lone_surrogate.jsonl": (1, "rid", "lone surrogate U+DFFF"),
    "ops_capacity_zero.jsonl": (1, "capacity", "0 slots: a pool needs at least 1"),
    "ops_policy_config_bad.jsonl": (1, "policy_config", "protected_threshold"),
    "ops_too_many.jsonl.gz": (1_048_578, None, "limit of 1,048,576 ops allows (max_ops)"),
    "md_op_name.jsonl": (2, "op", "unknown op '![x](http://attacker.example"),
    # KV-event recordings
    "kv_truncated.msgpack": (None, None, "batch 2 (byte 123): truncated msgpack"),
    "kv_junk.msgpack": (None, None, "not a msgpack EventBatch stream"),
    "kv_ts_string.msgpack": (None, "ts", "expected a number"),
    "kv_bad_type.jsonl": (2, "type", "unknown event type 'BlockExploded'"),
    "kv_missing_events.jsonl": (1, "events", "missing"),
    "kv_hash_string.jsonl": (1, "block_hashes", "expected an int hash"),
    "kv_deep_nesting.jsonl": (2, None, "nested deeper than 32"),
    "kv_deep_nesting.msgpack": (None, None, "batch 2 (byte 12): msgpack nested deeper"),
    "md_kv_type.jsonl": (2, "type", "unknown event type '![x](http://attacker.example/p.png)"),
    "kv_ts_huge.jsonl": (1, "ts", "9999999999"),
    "kv_ts_huge.msgpack": (None, "ts", "18446744073709551615 is not a finite time"),
    "kv_ts_nan.jsonl": (1, "ts", "nan is not a finite time"),
    "kv_type_list.jsonl": (1, "type", "unknown event type ['BlockStored']"),
    "kv_block_hashes_int.jsonl": (1, "block_hashes", "expected a list of hashes, got int"),
    "kv_block_size_string.jsonl": (1, "block_size", "expected an int, got str"),
    "kv_block_size_negative.jsonl": (1, "block_size", "-2 is outside 1..2147483648"),
    "kv_hash_2e200.jsonl": (1, "block_hashes", "is outside [-2**63, 2**64)"),
    "kv_token_ids_string.jsonl": (1, "token_ids", "expected a list of token ids, got str"),
    "kv_map_list_key.msgpack": (None, None, "a msgpack map has a key that is a list"),
}
# Op traces that load and fail while replaying: (line, field, words)
REPLAY_FAILS = {
    "ops_lock_missing_node.jsonl": (2, "node", 'op "lock": no live node 7'),
    "ops_unlock_unlocked.jsonl": (2, "node", "node 1 holds no lock"),
    "ops_duplicate_rid.jsonl": (2, "rid", "request 'a' is already running"),
    "ops_value_mismatch.jsonl": (1, "tokens", "1 slot ids for a key of 2 tokens"),
    "ops_out_of_slots.jsonl": (3, "rid", "out of KV slots: need 3, 2 free"),
    "md_op_rid_error.jsonl": (2, "rid", f"no running request '{MD}'"),
}
# Valid files read correctly: file -> (format, requests or ops, rids or None)
LOADS = {
    "multi_member.jsonl.gz": ("request", 2, ["r0", "r1"]),  # both gzip members
    "crlf.jsonl": ("request", 2, ["r0", "r1"]),
    "u2028_text.jsonl": ("request", 2, ["x", "r0"]),  # arrival order: 0 < 0.5
    "md_rid_ok.jsonl": ("request", 2, [MD, "r0"]),
    "ops_u2028.jsonl": ("ops", 5, None),
    "md_op_rid_ok.jsonl": ("ops", 4, None),
}
ALL = {**REFUSED, **REPLAY_FAILS, **LOADS}


def _is_ops(name: str) -> bool:
    return name.startswith(("ops_", "md_op_"))


def test_every_file_is_tested_and_listed_in_the_readme():
    files = sorted(p.name for p in BAD.iterdir() if p.name != "README.md")
    assert files == sorted(ALL)
    readme = (BAD / "README.md").read_text(encoding="utf-8")
    listed = sorted(re.findall(r"^\| `([^`]+)` \|", readme, re.M))
    assert listed == files


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_file_names_line_and_field(name):
    line, field, words = REFUSED[name]
    with pytest.raises(TraceError) as info:
        load_trace(BAD / name)
    err = info.value
    assert (err.line, err.field) == (line, field), str(err)
    assert words in str(err) or words in err.message
    assert "\n" not in str(err) and str(err).isprintable()
    if line is not None:
        assert str(err).startswith(f"line {line}") or f"line {line}:" in str(err)


@pytest.mark.parametrize("name", sorted(REPLAY_FAILS))
def test_op_replay_error_names_line_and_field(name):
    line, field, words = REPLAY_FAILS[name]
    trace = load_ops(BAD / name)
    with pytest.raises(OpTraceError) as info:
        replay_ops(trace)
    err = info.value
    assert (err.line, err.field) == (line, field) and words in str(err), str(err)


@pytest.mark.parametrize("name", sorted(LOADS))
def test_valid_file_loads_fully(name):
    fmt, count, rids = LOADS[name]
    trace = load_trace(BAD / name)
    assert trace.format == fmt
    if fmt == "ops":
        out = replay_ops(trace.ops)
        assert len(out.results) == count and out.first_bad_line is None
    else:
        assert len(trace.requests) == count and [r.rid for r in trace.requests] == rids


def test_u2028_is_text_not_a_line_break():
    """RFC 8259: U+2028, U+2029 and U+0085 are characters in a JSON string, not line ends. The
    text "a<2028>b<2029>c<0085>d" is 4 pieces; request "a<2028>b" caches [1, 2, 3] + [7] minus
    its last token (no KV yet): a match of [1, 2, 3, 7] finds 3."""
    text_req = load_trace(BAD / "u2028_text.jsonl").requests[0]
    assert text_req.rid == "x" and len(text_req.token_ids) == 4
    ops = load_ops(BAD / "ops_u2028.jsonl")
    assert ops.ops[0].args["rid"] == "a\u2028b"
    assert [r.get("prefix_len") for r in replay_ops(ops).results][-1] == 3


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _commands(name: str) -> list[str]:
    return ["replay", "compare"] if _is_ops(name) else ["compare", "simulate", "configs"]


@pytest.mark.parametrize("name", sorted(ALL))
def test_cli_gives_one_line_or_the_result(name, capsys):
    """Every corpus file through every command that reads it: exit 2 with one `error:` line
    naming the file (and line and field), or exit 0; an exception would fail this test."""
    path = str(BAD / name)
    for command in _commands(name):
        code, out, err = _cli([command, path], capsys)
        fails = (name in REFUSED or name in REPLAY_FAILS
                 or (command == "compare" and _is_ops(name)))
        if not fails:
            assert (code, err) == (0, ""), (command, err)
            assert out
            continue
        assert code == 2 and out == "", (command, out)
        assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
        assert err[:-1].isprintable() and "Traceback" not in err
        assert path in err, err
        expected = REFUSED.get(name) or REPLAY_FAILS.get(name)
        if expected and expected[0] is not None and not (command == "compare" and _is_ops(name)
                                                         and name in REPLAY_FAILS):
            assert f"line {expected[0]}" in err, err


def test_cli_replay_of_a_valid_trace_prints_the_tree(capsys):
    code, out, err = _cli(["replay", str(BAD / "md_op_rid_ok.jsonl"), "--json"], capsys)
    assert code == 0 and err == "" and '"first_bad_line": null' in out


@pytest.mark.parametrize("name, command", [
    ("deep_nesting_first_line.jsonl", "compare"),
    ("rid_lone_surrogate.jsonl", "simulate"),
    ("field_name_control.jsonl", "configs"),
    ("ops_op_list.jsonl", "replay"),
    ("ops_lock_missing_node.jsonl", "replay"),
    (MD_NAME, "compare"),
    ("expand_output_total.jsonl", "simulate"),
])
def test_python_m_radix_prints_one_line(name, command):
    """The real command line (a subprocess): one line on stderr, exit 2, no traceback."""
    done = subprocess.run([sys.executable, "-m", "radix", command, str(BAD / name)], cwd=ROOT,
                          capture_output=True, text=True, timeout=seconds(300))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr


def test_cli_out_of_memory_is_one_line(monkeypatch, capsys):
    """A MemoryError (the scheduler's 'no KV slot left', or a real one) is one line, exit 2."""
    import radix.cli.compare as compare_cli

    def boom(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(compare_cli, "compare", boom)
    code, out, err = _cli(["compare", str(BAD / "crlf.jsonl")], capsys)
    assert code == 2 and out == ""
    assert err == f"error: {BAD / 'crlf.jsonl'}: out of memory: try a smaller trace or a " \
                  "smaller --capacity\n"
