"""The Trace debugger's downloads (issue 41 items 1 and 4): each written to a file on the server
and fetched from it by a link, its size said before the click; past the cap its smaller forms
(a step range, gzip); no Streamlit download button (its deferred files went missing when two
were clicked back to back: "MediaFileStorageError: Deferred file ... not found")."""

from __future__ import annotations

import gzip
import re

from apphelp import finish_jobs, page

import pages._downloads as downloads_page
import pages._trace_blocks as trace_blocks
from pages._serve import download_dirs
from scenarios.trace import replay
from viz.dot import tree_dot
from viz.roles import step_highlight

TWO = (b'{"rid": "a", "arrival": 0, "tokens": [1, 2, 3], "output_len": 1}\n'
       b'{"rid": "b", "arrival": 1, "tokens": [1, 2, 4], "output_len": 1}\n')
LINK = re.compile(r'href="(app/static/downloads/(\w+)/([^"]+))" download="([^"]+)">'
                  r"&#11015; [^(]+ \(([^)]+)\)")


def _links(at) -> dict[str, tuple[str, str]]:
    """File name -> (path under the downloads folder, size words) of every download link."""
    out = {}
    for h in at.get("html"):
        m = LINK.search(h.proto.body)
        if m:
            out[m.group(4)] = (f"{m.group(2)}/{m.group(3)}", m.group(5))
    return out


def _file(rel: str) -> bytes:
    import runtime.downloads as d

    return (d.ROOT / rel).read_bytes()


def _open_two():
    download_dirs().sweep(lambda sid: False)  # AppTest's sessions share one id: start afresh
    at = page("trace").run()
    at.file_uploader(key="trace.upload").set_value(("two.jsonl", TWO, "text/plain")).run()
    return finish_jobs(at)


def test_small_files_are_links_with_their_sizes_and_the_rest_say_theirs_before_the_click():
    """Two requests sharing [1, 2] (7 tree steps). With the page: links to pretty_print.txt
    (its text is on the page already) and events.jsonl (written once a replay), each with its
    exact size, events.jsonl holding what EventLog.to_jsonl says; tree.dot, tree.svg and
    tree.json are buttons saying their size ("≈" where estimated: not written on every move of
    the step);
    a click on tree.dot writes the DOT of the tree at the step shown, and its link replaces
    the button. No st.download_button anywhere (it kept deferred files in memory and lost
    them to a rerun)."""
    at = _open_two()
    assert not at.exception and not at.error
    assert at.get("download_button") == []
    links = _links(at)
    assert set(links) == {"two-pretty_print.txt", "two-events.jsonl"}
    log = replay(TWO, "two.jsonl").log
    events = _file(links["two-events.jsonl"][0])
    assert events == log.to_jsonl().encode()
    assert links["two-events.jsonl"][1] == f"{len(events) / 1e3:.3g} kB"
    buttons = {b.key: b.label for b in at.button if b.key and b.key.startswith("downloads.")}
    assert buttons["downloads.trace.dot"].startswith("tree.dot (≈ ")
    assert buttons["downloads.trace.svg"].startswith("tree.svg (≈ ")
    assert buttons["downloads.trace.json"].startswith("tree.json (")
    at.button(key="downloads.trace.dot").click().run()
    dot = _file(_links(at)["two-tree.dot"][0]).decode()
    snap = log.snapshot_at(7)
    assert dot == tree_dot(snap, highlight=step_highlight(log.events_of(6), snap))
    at.number_input(key="trace.box").set_value(3).run()  # another step: the tree's files follow
    assert "two-tree.dot" not in _links(at)
    assert _file(_links(at)["two-pretty_print.txt"][0]).decode() == at.code[0].value


def test_over_the_cap_the_page_offers_a_step_range_and_gzip(monkeypatch):
    """A cap of 2,000 bytes: events.jsonl (3.9 kB) is not offered, said over the cap; its
    gzipped form and a step range are. The range (steps 2..4, as the box counts) writes those
    three steps' events, line for line as the whole log has them; the gzipped log unzips to
    the whole log."""
    monkeypatch.setattr(downloads_page, "CAP_BYTES", 2_000)
    monkeypatch.setattr(trace_blocks, "CAP_BYTES", 2_000)
    at = _open_two()
    assert not at.exception
    assert "two-events.jsonl" not in _links(at)
    assert any("two-events.jsonl: " in c.value and "over the 2 kB cap" in c.value
               for c in at.caption)
    log = replay(TWO, "two.jsonl").log
    at.slider(key="trace.events_range").set_value((2, 4)).run()
    at.button(key="downloads.trace.events_part").click().run()
    part = _file(_links(at)["two-events-2-4.jsonl"][0]).decode()
    lines = log.to_jsonl().splitlines(keepends=True)
    first = sum(len(s) for s in log.steps[:1])
    assert part == "".join(lines[first:first + sum(len(s) for s in log.steps[1:4])])
    at.button(key="downloads.trace.events_gz").click().run()
    whole = gzip.decompress(_file(_links(at)["two-events.jsonl.gz"][0]))
    assert whole == log.to_jsonl().encode()
