"""`python -m radix simulate TRACE --model PRESET`: a hybrid preset replays on SGLang's component
tree through the scheduler (radix/cli/model_options.py, radix/runs/sim.py), its pools split from
--kv-memory, with SGLang's flags; a full-attention preset runs the RadixCache as before; a bad
preset or a misplaced flag is one error line."""

from __future__ import annotations

import json

from radix.cli import main


def shared_trace(tmp_path, output_len: int = 1) -> str:
    """Four requests one second apart (each done before the next): 1,600 shared tokens and
    600 of their own, `output_len` output tokens."""
    lines = [{"rid": f"r{i}", "arrival": float(i), "output_len": output_len,
              "tokens": list(range(1600)) + [10_000 + 1000 * i + j for j in range(600)]}
             for i in range(4)]
    path = tmp_path / f"shared{output_len}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def run(capsys, argv) -> dict:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def hits(out: dict) -> list[int]:
    return [r["matched_tokens"] for r in out["requests"]]


def test_hybrid_presets_hit_as_sglang_does(tmp_path, capsys):
    """Qwen3.5-4B with SGLang's defaults (overlap scheduler on: extra_buffer) hits 0, 0, then
    1,600: the second request's match asks for a state at the branch point; without the
    overlap scheduler (auto: no_buffer) no state lands there and every request hits 0 (the
    known answers of docs/HYBRID.md). gpt-oss-20b (window 127), one output token: a request
    that finishes with its prefill keeps all its SWA, the second hits 1,600; four output
    tokens: the first request's checkpoint after its prefill frees its SWA behind the window
    (decode goes on), so the second hits 0 too and inserts at 1,600 with a live window; the rest
    hit it. Llama-3-8B: full attention, the RadixCache, 0 then 1,600."""
    path = shared_trace(tmp_path)
    qwen = run(capsys, [path, "--model", "qwen3.5-4b"])
    assert hits(qwen) == [0, 0, 1600, 1600]
    h = qwen["hybrid"]  # 40 GiB split as SGLang splits it (docs/HYBRID.md's preset table)
    assert (h["components"], h["full_pool"], h["mamba_state_slots"]) == (["full", "mamba"],
                                                                          691_352, 393)
    assert h["mamba_strategy"] == "extra_buffer" and h["max_running_requests"] == 393 // 5
    assert "block_hit_rate" not in qwen["totals"]
    nobuf = run(capsys, [path, "--model", "qwen3.5-4b", "--disable-overlap-schedule"])
    assert hits(nobuf) == [0, 0, 0, 0] and nobuf["hybrid"]["mamba_strategy"] == "no_buffer"
    assert hits(run(capsys, [path, "--model", "gpt-oss-20b"])) == [0, 1600, 1600, 1600]
    gpt = run(capsys, [shared_trace(tmp_path, 4), "--model", "gpt-oss-20b", "--kv-memory", "1"])
    assert hits(gpt) == [0, 0, 1600, 1600]
    # 1 GiB / (24,576 + 0.8 x 24,576 B a token): 24,272 full tokens, 0.8 of them SWA
    h = gpt["hybrid"]
    assert (h["full_pool"], h["swa_pool"], h["sliding_window_size"]) == (24_272, 19_417, 127)
    llama = run(capsys, [path, "--model", "llama-3-8b"])
    assert hits(llama) == [0, 1600, 1600, 1600] and "hybrid" not in llama


def test_a_bad_preset_or_flag_is_one_error_line(tmp_path, capsys):
    path = shared_trace(tmp_path)
    for argv, said in ((["--model", "qwen9"], "--model qwen9"),
                       (["--model", "qwen3.5-4b", "--capacity", "5000"], "--kv-memory GIB"),
                       (["--kv-memory", "8"], "--kv-memory: only with --model"),
                       (["--model", "qwen3.5-4b", "--page-size", "16",
                         "--mamba-radix-cache-strategy", "no_buffer"], "page_size 1")):
        assert main(["simulate", path, *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and said in err and "\n" not in err, err
