"""`--model` on the commands (radix/cli/options.py add_model, radix/cli/model.py): both engines'
hit tokens in compare's JSON (and per request), the engine configurations of `configs`, the
hybrid buckets of `explain`, `why` after the trace's earlier requests, a config.json path
where a preset name goes, and one clear line for each misuse."""

from __future__ import annotations

import json

import pytest

from radix.cli import main


def write(path, lines) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def workload(tmp_path, shared: int = 1600, unique: int = 600, n: int = 3) -> str:
    """The issue's Qwen3.5 workload: n requests of `shared` common + `unique` own tokens."""
    return write(tmp_path / "w.jsonl", [
        {"rid": f"r{i}", "arrival": i, "output_len": 1,
         "tokens": list(range(shared)) + list(range(10**6 * (i + 1), 10**6 * (i + 1) + unique))}
        for i in range(n)])


def run_json(capsys, argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_reports_each_engines_hit_tokens_and_per_request(tmp_path, capsys):
    """Block 576: vLLM 0, 0, 1,152; SGLang extra_buffer 0, 0, 1,600 (their own code's figures)."""
    out = run_json(capsys, ["compare", workload(tmp_path), "--model", "qwen3.5-4b",
                            "--per-request"])
    assert (out["vllm"]["hit_tokens"], out["sglang"]["hit_tokens"]) == (1152, 1600)
    assert [r["hit"] for r in out["vllm"]["per_request"]] == [0, 0, 1152]
    assert out["vllm"]["per_request"][1]["junction"] == 1152
    assert "GDN prefill flashinfer" in out["assumptions"]["vllm"][0]
    triton = run_json(capsys, ["compare", workload(tmp_path), "--model", "qwen3.5-4b",
                               "--gdn-prefill-backend", "triton", "--disable-overlap-schedule"])
    assert (triton["vllm"]["hit_tokens"], triton["sglang"]["hit_tokens"]) == (1584, 0)


def test_compare_table_says_what_it_assumed_and_names_the_others(tmp_path, capsys):
    assert main(["compare", workload(tmp_path), "--model", "qwen3.5-4b"]) == 0
    text = capsys.readouterr().out
    assert "held back: no Mamba state there" in text and "junctions pinned (vLLM)" in text
    assert "assumed, SGLang: mamba_radix_cache_strategy extra_buffer" in text
    assert "--gdn-prefill-backend triton (vLLM block 528)" in text


def test_configs_runs_each_engine_configuration(tmp_path, capsys):
    out = run_json(capsys, ["configs", workload(tmp_path), "--model", "qwen3.5-4b",
                            "--jobs", "1"])
    hits = {name: t["hit_tokens"] for name, t in out["configs"].items()}
    assert hits == {"vLLM block 576 (flashinfer)": 1152, "vLLM block 528 (triton)": 1584,
                    "SGLang extra_buffer": 1600, "SGLang no_buffer": 0}


def test_explain_buckets_add_up_and_say_what_decided(tmp_path, capsys):
    out = run_json(capsys, ["explain", workload(tmp_path), "--model", "qwen3.5-4b",
                            "--no-what-if"])
    for engine in ("sglang", "vllm"):
        side = out["engines"][engine]
        assert sum(side["totals"].values()) == out["prompt_tokens"] == 3 * 2200
        assert all(sum(r["buckets"].values()) == 2200 for r in side["requests"])
    assert out["engines"]["vllm"]["totals"]["mamba_checkpoint"] == 1152
    assert "pins the junction at 1,152" in out["engines"]["vllm"]["requests"][1]["decided"]


def test_why_after_the_traces_earlier_requests(tmp_path, capsys):
    """B = r2 after r0 and r1: vLLM hits the state r1 cached at its junction, 1,152."""
    trace = workload(tmp_path)
    out = run_json(capsys, ["why", "r0", "r2", "--trace", trace, "--model", "qwen3.5-4b"])
    vllm = out["hybrid"]["engines"]["vllm"]
    assert out["hybrid"]["requests_before"] == 2 and vllm["outcome"]["hit"] == 1152
    assert "Mamba state cached at token 1,152" in vllm["decided"]
    assert main(["why", "r0", "r1", "--trace", trace, "--model", "qwen3.5-4b"]) == 0
    text = capsys.readouterr().out
    assert "once A ran" in text and "pins the junction at 1,152" in text


def test_a_config_json_works_where_a_preset_name_does(tmp_path, capsys):
    from radix.models.config import DATA

    path = tmp_path / "config.json"
    path.write_text((DATA / "qwen3.5-4b.json").read_text())
    out = run_json(capsys, ["compare", workload(tmp_path), "--model", str(path)])
    assert out["vllm"]["hit_tokens"] == 1152 and out["model"] == str(path)


@pytest.mark.parametrize("argv, says", [
    (["--model", "qwen9"], "--model qwen9: neither a preset"),
    (["--kv-memory", "8"], "--kv-memory: only with --model"),
    (["--disable-overlap-schedule"], "--disable-overlap-schedule: only with --model"),
    (["--model", "llama-3-8b", "--capacity", "5000"], "with --model give --kv-memory"),
    (["--model", "qwen3.5-4b", "--page-size", "16", "--mamba-radix-cache-strategy",
      "no_buffer"], "no_buffer only supports page_size 1"),
])
def test_misuse_is_one_line(tmp_path, capsys, argv, says):
    assert main(["compare", workload(tmp_path, n=1), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1


def test_explain_holds_to_its_memory_budget(tmp_path, capsys):
    """--memory is the budget of the run: Llama-3-8B at 40 GiB is 20,480 vLLM blocks (about
    4 MiB here) beside a 32 MiB process, so 33 MiB refuses it, in one line, before it runs."""
    argv = ["explain", workload(tmp_path, n=1), "--model", "llama-3-8b", "--no-what-if"]
    assert main([*argv, "--memory", "33"]) == 2
    err = capsys.readouterr().err
    assert "vLLM's 20,480 blocks of 16 tokens" in err and "budget is 33 MiB" in err
    assert main([*argv, "--memory", "40"]) == 0
