"""viz/live.py: the Live page's table, totals, lines and progress words (no model)."""

from __future__ import annotations

from radix.events import RequestAdmitted
from scenarios.live import LiveRequest, Progress, Told
from viz.live import progress_line, request_rows, told_lines, totals


def _req(rid: str, metrics: dict | None, n_out: int = 2) -> LiveRequest:
    return LiveRequest(rid, rid, True, 2_151, None, list(range(n_out)), metrics)


def test_rows_known_answer():
    """R2 matched 2,055, prefilled 80: 2,055 / 22,036 tok/s = 93.3 ms of H100 prefill saved,
    2,055 x 128 KiB = 256.9 MiB of KV; TTFT 0.25 s = 250.0 ms. Newest first; running rows
    have no numbers yet."""
    done = _req("R2", {"matched_tokens": 2_055, "prefilled_tokens": 80, "ttft": 0.25,
                       "decode_tps": 12.345})
    rows = request_rows([done, _req("R3", None, 1)])
    assert rows[0]["request"] == "R3" and rows[0]["status"] == "running"
    assert rows[0]["matched"] is None and rows[0]["output tokens"] == 1
    admitted = request_rows([done, _req("R3", None, 1)], admitted={"R3": (512, 2_112)})
    assert (admitted[0]["matched"], admitted[0]["prefilled"]) == (512, 2_112)
    assert admitted[0]["TTFT ms (measured)"] is None
    r = rows[1]
    assert (r["matched"], r["prefilled"], r["status"]) == (2_055, 80, "done")
    assert r["saved prefill ms (derived)"] == 93.3
    assert r["saved KV MiB (derived)"] == 256.9
    assert (r["TTFT ms (measured)"], r["decode tok/s (measured)"]) == (250.0, 12.3)


def test_totals_known_answer():
    """Matched 300 + 0, prefilled 100 + 400: hit rate 300 / 800 = 0.375; 300 tokens at
    22,036 tok/s = 13.6 ms derived."""
    reqs = [_req("a", {"matched_tokens": 300, "prefilled_tokens": 100, "ttft": 0.1}),
            _req("b", {"matched_tokens": 0, "prefilled_tokens": 400, "ttft": 0.1}),
            _req("c", None)]
    t = totals(reqs)
    assert (t.finished, t.matched, t.prefilled, t.hit_rate) == (2, 300, 500, 0.375)
    assert round(t.saved_prefill_ms, 1) == 13.6
    assert totals([]).hit_rate == 0.0


def test_lines_with_their_age_and_progress_words():
    """A told admission 2.5 s old; a request prefilling 512 of 1,024 with 1,000 tokens ahead at
    500 tok/s: half done, (1,000 + 512) / 500 = 3.0 s left."""
    told = [Told(100.0, "r", "scheduler", RequestAdmitted("r", 2_055, 80, True, 0), None, None)]
    assert told_lines(told, {}, now=102.5) == [
        "2.5 s ago: r admitted: 2,055 tokens from the tree, 80 to prefill (chunked: more next "
        "round)"]
    frac, text = progress_line(Progress("r", "prefill", 512, 1_024, 1, 1_000), 500.0)
    assert frac == 0.5 and "prefilled 512 of 1,024" in text and "~3.0 s" in text
    frac, text = progress_line(Progress("w", "waiting", 0, 300, 2, 900), None)
    assert frac == 0.0 and "2 request(s) ahead with 900 prompt tokens" in text
    assert progress_line(Progress("d", "decode", 3, 6, 0, 0), 1.0)[0] == 0.5
