"""The Trace debugger's "Why this hit rate?" panel and its step narration (AppTest)."""

from __future__ import annotations

import json
from pathlib import Path

from apphelp import ROOT, echarts, finish_jobs, page, plain, plotly_specs, texts
from machine import seconds
from streamlit.testing.v1 import AppTest

A = list(range(1, 41))
TRACE = "".join(json.dumps(r) + "\n" for r in (
    {"rid": "a", "arrival": 0, "tokens": A, "output_len": 2},
    {"rid": "b", "arrival": 9, "tokens": A, "output_len": 2},
    {"rid": "c", "arrival": 18, "tokens": list(range(100, 110)), "output_len": 1}))


def _explained(at: AppTest, timeout: float | None = None) -> AppTest:
    """Opens the panel and waits for the explainer's jobs (the buckets, then the what-ifs), each
    up to `timeout` s (120 s on an idle machine, scaled)."""
    timeout = timeout or seconds(120)
    from pages._serve import holdings

    at.session_state["trace.explain"] = True
    at.run()
    for _ in range(4):
        state = holdings().get(at.session_state["trace.sid"], "trace")
        job = state.get("explain_job")
        if job is None:
            break
        assert job.wait(timeout), f"{job.name}: still running after {timeout} s"
        at.run()
    return at


def _upload(at: AppTest) -> AppTest:
    at.file_uploader(key="trace.upload").set_value(("abc.jsonl", TRACE.encode(), "text/plain"))
    at.run()
    return finish_jobs(at)


def test_panel_buckets_add_up_to_the_prompt_tokens_and_go_to_a_step():
    """a, b: the same 40 tokens, 9 s apart (a has finished); c: 10 other tokens. Prompt tokens
    40 + 40 + 10 = 90. Tree: b hits 39 (the last-token cap keeps 1), first seen 40 + 10 = 50;
    blocks of 16: b hits 32, the partial 8-token block is block rounding. The hit bucket's
    example is b; its button moves the debugger to the tree after b's lookup (step 4 of the
    replay: reset, then a's match, lock, finish: b's match is log step 4, so trace.at = 5);
    the block cache's, to the tree after b's finish (log step 6: 7) with b's chain shown."""
    at = _explained(_upload(page("trace").run()))
    assert not at.exception and not at.error
    titles = [s["layout"]["title"]["text"] for s in plotly_specs(at) if "title" in s["layout"]]
    assert "Where the 90 prompt tokens went" in titles
    assert any(t.startswith("Hit rate against KV capacity") for t in titles)
    assert "Hit rate against page / block size" in titles and "Namespaces on and off" in titles
    table = [d.value for d in at.dataframe if "bucket" in d.value.columns][0]
    total = table[table["bucket"] == "all prompt tokens"]
    assert list(total["radix tree (SGLang)"]) == ["90 tokens"]
    assert list(total["block cache (vLLM)"]) == ["90 tokens"]
    hit = table[table["bucket"] == "hit"]
    assert list(hit["radix tree (SGLang)"]) == ["39 tokens (43.3%)"]
    assert list(hit["block cache (vLLM)"]) == ["32 tokens (35.6%)"]
    # the lead-ins are bold, not literal asterisks (#24 item 7)
    leads = [m.value for m in at.markdown if m.value.startswith("**")]
    assert [plain(v).split("** ")[0] for v in leads] == ["**Hit rate:", "**Where it happened:",
                                                         "**Causes found", "**What if:",
                                                         "**Host tier:"], leads
    assert not [m.value for m in at.markdown if "\\*" in m.value]
    go = at.button(key="trace.explain_go.tree.hit.0")
    assert plain(go.label) == "b: 39 tokens, step 5"
    go.click().run()
    assert at.session_state["trace.at"] == 5
    assert any(t.startswith("step 5 of ") and "b match_prefix" in t for t in texts(at.caption))
    at.button(key="trace.explain_go.blocks.hit.0").click().run()  # after b's finish: log 6
    assert at.session_state["trace.at"] == 7 and not at.exception
    assert at.selectbox(key="trace.block_rid").value == "b"


def test_panel_closed_runs_nothing_and_step_narration_tells_the_split():
    """Closed, the panel starts no job. Log steps: 0 reset, then per request match_prefix,
    inc_lock_ref, cache_finished_req: b's finish is log step 6 (the tree after it: 7). b's row
    holds 40 + 2 - 1 = 41 slots; a's finish already cut its prompt node at 40, so b's insert
    hangs a 1-token output leaf under it and nothing splits. a's finish (log step 3, shown at
    4) is the one that splits: 41 tokens in one new leaf, then the prompt re-insert cuts it
    40 + 1."""
    from pages._serve import holdings

    at = page("trace").run()
    data = TRACE.replace('"a"', '"x"').encode()  # other content: not the first test's state
    at.file_uploader(key="trace.upload").set_value(("xbc.jsonl", data, "text/plain")).run()
    at = finish_jobs(at)
    state = holdings().get(at.session_state["trace.sid"], "trace")
    assert state.get("explain_job") is None and not state.get("explained")
    at.number_input(key="trace.box").set_value(4).run()
    lines = [t for t in texts(at.markdown) if "prompt boundary" in t]
    assert len(lines) == 1 and "40 prompt + 1 output token " in lines[0], lines
    assert "priority + 1" in lines[0]
    at.number_input(key="trace.box").set_value(7).run()
    assert not [t for t in texts(at.markdown) if "prompt boundary" in t]


def _recorded(trace_path: Path) -> bytes:
    """What vLLM would publish for the trace (its block cache hashing with vllm-sha256), one
    batch per request, as msgpack EventBatches."""
    from radix.blocks.kv_events import EventBatch, encode_batch
    from radix.blocks.manager import BlockCacheManager
    from radix.blocks.pool import BlockPool
    from radix.traces import load_trace, to_req

    pool = BlockPool(4096, 16, enable_kv_cache_events=True, hash_algo="vllm-sha256")
    manager, out = BlockCacheManager(pool), b""
    for i, tr in enumerate(load_trace(trace_path).requests):
        req = to_req(tr)
        hit = manager.get_computed_blocks(req)
        manager.allocate_slots(req, len(tr.token_ids) - hit.num_computed_tokens, hit)
        manager.free(req)
        out += encode_batch(EventBatch(float(i), tuple(manager.take_events()), 0))
    return out


def test_vllm_hashes_in_the_block_view_and_a_recording_matched():
    """three_requests with a recording made by vLLM's hashing. With radixlens hashes the page
    offers no recording upload (it could match nothing). With vllm-sha256 every recorded hash
    is stored by the replay; with vllm-sha256-cbor none is (and the page asks why); the block
    view's hover hashes are vLLM's (R1's first block: low 64 bits, first 8 hex digits)."""
    from radix.blocks.hashing import hash_request_tokens, hash_to_int64
    from radix.traces import load_trace

    path = ROOT / "examples" / "traces" / "three_requests.jsonl.gz"
    at = page("trace").run()
    at.file_uploader(key="trace.upload").set_value((path.name, path.read_bytes(), "x")).run()
    at = finish_jobs(at)
    assert "trace.recording" not in [u.key for u in at.get("file_uploader")]
    at.selectbox(key="trace.hash").set_value("vllm-sha256").run()
    at = finish_jobs(at)
    at.file_uploader(key="trace.recording").set_value(("rec.msgpack", _recorded(path), "x"))
    at.run()
    assert not at.exception and not at.error
    said = " ".join(texts(at.success))
    assert "(vllm-sha256) stores 271 of them (100.0%)" in said and "every recorded hash" in said
    first = load_trace(path).requests[0].token_ids
    want = f"{hash_to_int64(hash_request_tokens(first, 16, hash_algo='vllm-sha256')[0]):016x}"
    assert want[:8] in json.dumps([option for _, option in echarts(at)])  # the keyed grid
    at.selectbox(key="trace.hash").set_value("vllm-sha256-cbor").run()
    at = finish_jobs(at)
    said = plain(at.warning[0].value)
    assert "stores 0 of them" in said and "first that differs: batch 0" in said


def test_panel_refused_by_the_budget_says_so_once_and_offers_a_retry(monkeypatch):
    """An explainer too big for the session's budget (the per-request estimate raised to a
    TiB) is refused with the figures; the next rerun starts no new job (the refusal stays,
    with a button to run again)."""
    import radix.runs.memory
    from pages._serve import holdings

    monkeypatch.setattr(radix.runs.memory, "BYTES_PER_REQUEST", 2**40)
    at = page("trace").run()
    data = TRACE.replace('"c"', '"z"').encode()  # its own content: not another test's state
    at.file_uploader(key="trace.upload").set_value(("abz.jsonl", data, "text/plain")).run()
    at = _explained(finish_jobs(at))
    assert "too big for this server's memory budget" in plain(at.error[0].value)
    assert "trace explain needs" in plain(at.error[0].value)
    at.run()
    state = holdings().get(at.session_state["trace.sid"], "trace")
    assert state.get("explain_job") is None and not state.get("explained")
    assert at.button(key="trace.explain_again")


def test_host_tier_section_splits_the_hits_and_says_why_each_was_on_the_host():
    """Capacity 1,000, host 2x: a and b (600 distinct tokens each, 601 slots with their KV
    output) do not fit together, so b's allocation demotes a (backed up at insert); a again
    finds its first 599 tokens on the host and loads them back. Off by default: no job."""
    from pages._serve import holdings

    a, b = list(range(1, 601)), list(range(1_001, 1_601))
    data = "".join(json.dumps(r) + "\n" for r in (
        {"rid": "a", "arrival": 0, "tokens": a, "output_len": 2},
        {"rid": "b", "arrival": 10, "tokens": b, "output_len": 2},
        {"rid": "a2", "arrival": 20, "tokens": a, "output_len": 2})).encode()
    at = page("trace").run()
    at.number_input(key="trace.capacity").set_value(1_000).run()
    at.file_uploader(key="trace.upload").set_value(("host.jsonl", data, "text/plain")).run()
    at = _explained(finish_jobs(at))
    state = holdings().get(at.session_state["trace.sid"], "trace")
    assert at.selectbox(key="trace.explain_host").value == "off"
    assert state.get("explain_host_job") is None
    at.selectbox(key="trace.explain_host").set_value("2x").run()
    job = state.get("explain_host_job")
    if job is not None:
        assert job.wait(seconds(120))
        at.run()
    assert not at.exception and not at.error
    said = [plain(m.value) for m in at.markdown if "Host 2x" in m.value]
    assert len(said) == 1 and ("device hit 0 (0.0%), host hit (loaded back) 599 (33.3%), miss "
                               "1,201 (66.7%) of 1,800 prompt tokens") in said[0], said
    assert "allocation 599, by a load back's room 0" in said[0]
    rows = [d.value for d in at.dataframe if "why it was on the host" in d.value.columns][0]
    assert list(rows["request"]) == ["a2"] and list(rows["host hit"]) == [599]
    assert list(rows["why it was on the host"]) == ["599 demoted while serving b (allocation)"]


def test_what_ifs_run_in_worker_processes_and_match_the_cli(capsys, monkeypatch):
    """three_requests at the page's capacity (1,000,000), fcfs, with worker processes for any
    what-ifs (short ones run in the server's thread: IN_PROCESS_UNDER_S set to 0): the panel's
    what-ifs ran in workers (their progress lines say so: before issue 27 they ran in the
    server's own thread, and the lines named a run and a request) that are gone once they
    end, and they are `explain --json --policy fcfs --capacity 1000000 --jobs 1`'s (one
    process, in order) number for number."""
    import multiprocessing

    import pages._trace_explain as panel_page
    import scenarios.explain
    from pages._serve import holdings
    from radix.cli import main

    monkeypatch.setattr(scenarios.explain, "IN_PROCESS_UNDER_S", 0.0)
    said, real = [], panel_page.run_what_ifs

    def heard(trace, x, *, progress, **kw):  # the job's progress lines, every one
        return real(trace, x, progress=lambda f, t: said.append(t) or progress(f, t), **kw)
    monkeypatch.setattr(panel_page, "run_what_ifs", heard)

    path = ROOT / "examples" / "traces" / "three_requests.jsonl.gz"
    at = page("trace").run()
    at.file_uploader(key="trace.upload").set_value((path.name, path.read_bytes(), "x")).run()
    at = finish_jobs(at)
    state = holdings().get(at.session_state["trace.sid"], "trace")
    at.session_state["trace.explain"] = True
    at.run()
    for _ in range(4):  # the explainer's job, then the what-ifs'
        if (job := state.get("explain_job")) is None or not job.pending:
            break
        assert job.wait(seconds(120)), f"{job.name}: still running"
        at.run()
    assert not at.exception and said and said[0].startswith("what-ifs: "), said
    assert said[0].endswith(" worker processes") and "worker processes)" in said[-1], said
    assert not [p for p in multiprocessing.active_children() if p.name == "radixlens-worker"]
    (panel,) = state["explained"].values()
    assert panel.explanation.what_if
    assert main(["explain", str(path), "--json", "--policy", "fcfs", "--capacity", "1000000",
                 "--jobs", "1", "--quiet"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert json.loads(json.dumps(panel.explanation.what_if)) == cli["what_if"]
    assert cli["what_if"]["capacity"] and cli["what_if"]["page_size"]


def test_a_gone_session_s_running_job_is_cancelled():
    """A session's held trace state names a job that runs until cancelled (as the what-ifs'
    workers would): the sweep that finds the session gone cancels it, and a replaced holding
    cancels the jobs of the one it replaces; the other session's job runs on."""
    from pages._serve import Holdings
    from runtime.jobs import JobPool

    pool, held = JobPool(workers=3), Holdings()
    a, b, c = (pool.submit(name, lambda progress, cancel: cancel.wait()) for name in "abc")
    held.put("gone", "trace", {"key": 1, "explain_job": a})
    held.put("here", "trace", {"key": 2, "explain_job": b})
    held.put("here", "other", c)
    assert held.sweep(lambda sid: sid == "here") == ["gone"]
    assert a.wait(seconds(10)) and a.state == "cancelled" and b.pending
    held.put("here", "trace", {"key": 3})
    assert b.wait(seconds(10)) and b.state == "cancelled" and c.pending
    c.cancel()
