"""Op traces and the demo/replay commands: known answers and bad files naming line and field."""

from __future__ import annotations

import json

import pytest

from radix.cli import main
from radix.runs.ops import replay_ops
from radix.traces.ops import OpTraceError, load_ops, parse_ops

GOOD = "\n".join([
    '{"op": "config", "page_size": 1, "policy": "lru", "capacity": 64}',
    '{"op": "insert", "tokens": [1, 2, 3]}',
    '{"op": "start", "rid": "a", "tokens": [1, 2, 3, 4]}',
    '{"op": "extend", "rid": "a"}',
    '{"op": "unfinished", "rid": "a"}',
    '{"op": "decode", "rid": "a", "token": 9}',
    '{"op": "decode", "rid": "a", "token": 10}',
    '{"op": "finished", "rid": "a"}',
    '{"op": "match", "tokens": [1, 2, 3, 4, 9, 7]}',
    '{"op": "evict", "num_tokens": 1}',
])


def test_replay_known_answer():
    """[1,2,3] cached; request a matches 3 of [1,2,3,4], computes [4] and caches it as a leaf
    (unfinished); decodes 9 and 10, so it commits 4 + 2 - 1 = 5 tokens: finishing adds leaf
    [9] under [4]. A match of [1,2,3,4,9,7] finds 5; evict(1) takes leaf [9], leaving 4."""
    out = replay_ops(parse_ops(GOOD))
    by_op = [(r["op"], r.get("prefix_len")) for r in out.results]
    assert by_op[1] == ("start", 3) and by_op[7] == ("match", 5)
    assert out.results[-1]["evicted"] == [{"node": 3, "key": [9]}]
    assert out.results[-1]["total_size"] == 4 and out.first_bad_line is None


@pytest.mark.parametrize("text, where", [
    ('{"op": "insert", "tokens": [1, "x"]}', 'line 1, field "tokens"'),
    ('{"op": "insert", "tokens": 5}', 'line 1, field "tokens"'),
    ('{"op": "insert"}', 'line 1, field "tokens": missing'),
    ('{"op": "evict", "num_tokens": true}', 'line 1, field "num_tokens"'),
    ('{"op": "fly"}', 'line 1, field "op"'),
    ('{"op": "insert", "tokens": [1], "bogus": 1}', 'line 1, field "bogus"'),
    ('{"op": "insert", "tokens": [1]}\n{"op": "insert", "tokens": [1', "line 2: not valid JSON"),
    ('[1, 2]', "line 1: expected a JSON object"),
    ('{"op": "insert", "tokens": [1]}\n{"op": "config"}', 'line 2, field "op"'),
    ('{"op": "config", "policy": "lol"}', 'line 1, field "policy"'),
    ('{"op": "lock"}', 'line 1, field "node"'),
    ("", "trace is empty"),
])
def test_bad_files_name_line_and_field(text, where):
    with pytest.raises(OpTraceError, match=where.replace("[", r"\[")):
        parse_ops(text)


def test_non_utf8_and_runtime_errors_are_clear():
    with pytest.raises(OpTraceError, match="not UTF-8"):
        parse_ops(b'{"op": "insert", "tokens": [1]}\n\xff\xfe')
    trace = parse_ops('{"op": "insert", "tokens": [1, 2]}\n{"op": "unlock", "node": 1}')
    with pytest.raises(OpTraceError, match='line 2, field "node": op "unlock": .*holds no lock'):
        replay_ops(trace)
    trace = parse_ops('{"op": "decode", "rid": "zz", "token": 1}')
    with pytest.raises(OpTraceError, match='line 1, field "rid": .*no running request \'zz\''):
        replay_ops(trace)


def test_cli_replay_text_json_and_bad_file(tmp_path, capsys):
    """Hits as SGLang 0.5.23 counts them (inserted_len): the raw insert gives [1 2 3] one; the
    prefill checkpoint of a's [1 2 3 4] another, and one to the new [4]; the finish inserts
    [1 2 3 4 9] past a's inserted_len 4, so only the new [9] counts, and eviction takes it."""
    good = tmp_path / "ops.jsonl"
    good.write_text(GOOD)
    assert main(["replay", str(good)]) == 0
    assert "#tokens: 4" in capsys.readouterr().out
    assert main(["replay", str(good), "--json"]) == 0
    dump = json.loads(capsys.readouterr().out)
    assert [n["key"] for n in dump["tree"]] == [[], [1, 2, 3], [4]]
    assert [n["hit_count"] for n in dump["tree"]] == [0, 2, 1]
    assert dump["stats"]["total_size"] == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op": "insert", "tokens": [1]}\n{"op": "evict", "num_tokens": -3}\n')
    assert main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err
    assert 'line 2, field "num_tokens": op "evict"' in err and "Traceback" not in err
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 2


def test_cli_demos(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "split: node 1 cut after 2 tokens" in out and "prefix_len=3" in out
    assert main(["demo", "--scenario", "three-requests"]) == 0
    out = capsys.readouterr().out
    assert "holds 4,343 tokens" in out and "need 6,910" in out and "saving 2,567" in out


def test_load_ops_from_path(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"op": "config", "page_size": 4}\n{"op": "insert", "tokens": [1, 2, 3, 4]}\n')
    assert load_ops(p).page_size == 4
