"""The options every trace command shares (radix/cli/options.py): one capacity default
(unbounded) and its spelling, `--capacity 0` refused as an argument, `--limit NAME=VALUE`, and
the two bounded hit rates (admitted prompts / all prompts) in compare and simulate."""

from __future__ import annotations

import json

import pytest

from radix.cli import main
from radix.cli.options import DEFAULT_CAPACITY, parse_capacity, parse_limit

COMMANDS = ("compare", "simulate", "configs", "explain")


def write(path, lines) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def repeats(tmp_path) -> str:
    """Two requests, same 40 tokens, one output token: unbounded, the second matches 39."""
    return write(tmp_path / "r.jsonl", [{"rid": r, "arrival": i, "tokens": list(range(40)),
                                         "output_len": 1} for i, r in enumerate("ab")])


def json_of(capsys, argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("command", COMMANDS)
def test_one_default_stated_in_help(command, capsys):
    """Every command defaults to unbounded and says so, with the word that asks for it."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Default: unbounded" in text and "'unbounded'" in text and "--limit" in text
    assert DEFAULT_CAPACITY is None


def test_compare_default_is_unbounded_like_simulate(tmp_path, capsys):
    """compare used to default to 65,536 tokens; now, as simulate, nothing limits the pool:
    the second request matches 39 of 40 tokens (the last-token cap) in both commands, and
    `--capacity unbounded` is the same run."""
    path = repeats(tmp_path)
    plain = json_of(capsys, ["compare", path])
    assert plain["capacity"] is None and plain["tree"]["hit_tokens"] == 39
    assert json_of(capsys, ["compare", path, "--capacity", "unbounded"]) == plain
    sim = json_of(capsys, ["simulate", path, "--policy", "fcfs"])["totals"]
    assert sim["matched_tokens"] == plain["tree"]["hit_tokens"] == 39


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("value", ["0", "-5", "lots"])
def test_bad_capacity_is_an_argument_error(command, value, tmp_path, capsys):
    """A capacity that admits nothing (0, negative) or is no number is argparse's error about
    --capacity, exit 2, and the trace file is not named (it was never read)."""
    path = repeats(tmp_path)
    with pytest.raises(SystemExit) as info:
        main([command, path, "--capacity", value])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--capacity must be" in err and path not in err


def test_parse_capacity_spellings():
    assert parse_capacity("65,536") == parse_capacity("65_536") == 65_536
    assert parse_capacity(" UNBOUNDED ") is None


def test_both_hit_rates_when_requests_are_rejected(tmp_path, capsys):
    """capacity 30, blocks of 4: a (40 tokens) is too big for either cache and is rejected; b
    and c (tokens 100..119, 20 each) run, c matches 19 in the tree and 16 (4 blocks) in the
    pool. Admitted prompts: 40 tokens -> 19/40 = 47.5% and 16/40 = 40.0%; all prompts: 80 ->
    19/80 = 23.8% and 16/80 = 20.0%."""
    path = write(tmp_path / "t.jsonl", [
        {"rid": "a", "arrival": 0, "tokens": list(range(40)), "output_len": 1},
        {"rid": "b", "arrival": 1, "tokens": list(range(100, 120)), "output_len": 1},
        {"rid": "c", "arrival": 2, "tokens": list(range(100, 120)), "output_len": 1}])
    out = json_of(capsys, ["compare", path, "--capacity", "30", "--block-size", "4"])
    tree, blocks = out["tree"], out["blocks"]
    assert (tree["rejected"], tree["rejected_prompt_tokens"]) == (1, 40)
    assert (tree["hit_rate"], tree["hit_rate_all"]) == (0.475, 0.2375)
    assert (blocks["hit_rate"], blocks["hit_rate_all"]) == (0.4, 0.2)
    assert main(["compare", path, "--capacity", "30", "--block-size", "4"]) == 0
    rows = {" ".join(line.split()[:-2]): line.split()[-2:]
            for line in capsys.readouterr().out.splitlines()}
    assert rows["hit rate (admitted prompts)"] == ["47.5%", "40.0%"]
    assert rows["hit rate (all prompts)"] == ["23.8%", "20.0%"]


def test_simulate_says_both_hit_rates(tmp_path, capsys):
    """The scheduler refuses a (40 + 1 + a page > 30 slots) at arrival; b and c run one after
    the other (c arrives after b finished): tree 19 of 40 admitted tokens, 19 of 80 in all."""
    path = write(tmp_path / "t.jsonl", [
        {"rid": "a", "arrival": 0, "tokens": list(range(40)), "output_len": 1},
        {"rid": "b", "arrival": 1, "tokens": list(range(100, 120)), "output_len": 1},
        {"rid": "c", "arrival": 2, "tokens": list(range(100, 120)), "output_len": 1}])
    t = json_of(capsys, ["simulate", path, "--capacity", "30", "--policy", "fcfs"])["totals"]
    assert (t["rejected"], t["rejected_input_tokens"], t["matched_tokens"]) == (1, 40, 19)
    assert (t["hit_rate"], t["hit_rate_all"]) == (19 / 40, 19 / 80)
    assert main(["simulate", path, "--capacity", "30"]) == 0
    out = capsys.readouterr().out
    assert "hit rate tree (admitted)" in out and "hit rate tree (all)" in out


def test_parse_limit():
    assert parse_limit("max-requests=1,000") == ("max_requests", 1000)
    for bad in ("max_requests", "nope=3", "max_requests=0", "max_requests=1.5"):
        with pytest.raises(Exception, match="--limit"):
            parse_limit(bad)


def mooncake(tmp_path, n: int, output_len: int) -> str:
    return write(tmp_path / "mc.jsonl", [{"timestamp": i, "input_length": 600,
                                          "output_length": output_len, "hash_ids": [i, i + 1]}
                                         for i in range(n)])


@pytest.mark.parametrize("command", COMMANDS)
def test_a_lowered_limit_refuses_before_parsing_and_says_how_to_raise_it(
        command, tmp_path, capsys, monkeypatch):
    """3 requests of 8 output tokens: 16 > 15 on line 2, found by the scan before any line is
    parsed (the parser is never called), and the message names the --limit that raises it."""
    import radix.traces.mooncake as mc

    path = mooncake(tmp_path, 3, 8)
    monkeypatch.setattr(mc, "iter_json_lines", lambda text: pytest.fail("parsed"))
    assert main([command, path, "--limit", "max_total_output_tokens=15"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: line 2, field \"output_length\"" in err, err
    assert "output tokens reach 16, over the limit of 15" in err
    assert "raise it with --limit max_total_output_tokens=N" in err


def test_a_limit_can_be_raised_past_its_default(tmp_path, capsys, monkeypatch):
    """With a default of 15 output tokens (patched in, as a server would set it), the 24-token
    trace is refused; `--limit max_total_output_tokens=24` lets it through."""
    import dataclasses

    import radix.cli.options as options

    monkeypatch.setattr(options, "DEFAULT_LIMITS",
                        dataclasses.replace(options.DEFAULT_LIMITS, max_total_output_tokens=15))
    path = mooncake(tmp_path, 3, 8)
    assert main(["compare", path]) == 2
    assert "over the limit of 15" in capsys.readouterr().err
    out = json_of(capsys, ["compare", path, "--limit", "max_total_output_tokens=24"])
    assert out["tree"]["requests"] == 3
