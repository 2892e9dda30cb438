"""The slides export (viz/export.py) of the Tour's host tier walk: the file carries each
frame's tier-coloured tree, its move and its words, and the colours' legend under the title.
The export is read back from the HTML itself (its FRAMES and CAPTIONS), not from a browser."""

from __future__ import annotations

import json
import re

import scenarios.hosttier as ht
from viz.export import export_html
from viz.hosttier import TIER_COLOURS, TIER_LEGEND, export_frame


def _read(page: str, name: str):
    """The JSON value of `const <name> = ...;` in the exported page."""
    return json.loads(re.search(rf"^const {name} = (.*);$", page, re.M).group(1))


def _export(lo: int, hi: int) -> str:
    """What the Tour's host tier page downloads for frames lo..hi (its Player.export)."""
    steps, frames = ht.run_walk(), ht.run_frames()
    pairs = [export_frame(frames, steps, i) for i in range(lo, hi + 1)]
    return export_html([p[0] for p in pairs], [p[1] for p in pairs], "host tier",
                       note=TIER_LEGEND)


def test_host_tier_export_has_the_tier_colours_moves_and_words():
    """Frames 2..9 of the walk's 10. Frame 3 (the export's second) is chat B demoting chat
    A's node #1: #1 host only, filled orange (#ff7f0e), white text, outlined red, its move
    "demote" with the host's colour travelling. Frame 8 loads 5 tokens back onto #3 (green,
    device + host, dark text, move "load"). A request's last frame also says how it was
    served: chat A (frame 2) 0 + 0 + 6 computed, chat A again (frame 9) 0 from the device, 5
    loaded back, 1 computed."""
    page = _export(2, 9)
    frames, captions = _read(page, "FRAMES"), _read(page, "CAPTIONS")
    assert len(frames) == len(captions) == 8
    nodes = [{n["id"]: n for n in f["scene"]["nodes"]} for f in frames]
    n1 = nodes[1]["n1"]
    assert (n1["fill"], n1["text"], n1["stroke"], n1["move"], n1["move_fill"]) == (
        TIER_COLOURS["host"], "#ffffff", "#d62728", "demote", TIER_COLOURS["host"])
    assert n1["label"] == "#1: 1 2 3 4 5 6\nhost only"
    assert captions[1] == "chat B: node #1 demoted: its 6 device slots freed, its host copy kept"
    n3 = nodes[6]["n3"]
    assert (n3["fill"], n3["text"], n3["move"]) == (TIER_COLOURS["both"], "#222222", "load")
    assert [(i, n["fill"]) for i, n in nodes[6].items()] == [
        ("n0", "#eeeeee"), ("n1", "#ff7f0e"), ("n2", "#ff7f0e"), ("n3", "#2ca02c")]
    assert captions[6] == "chat A again: loaded back from host: 5 tokens onto node(s) #3"
    assert captions[0] == ("chat A: node #1 backed up to host: 6 tokens (write_through). "
                           "Served: chat A: 0 tokens from the device, 0 loaded back from "
                           "host, 6 computed.")
    assert captions[7].endswith("Served: chat A again: 0 tokens from the device, 5 loaded "
                                "back from host, 1 computed.")
    assert f'<h2>host tier</h2>\n<p id="note">{TIER_LEGEND}</p>' in page


def test_export_without_a_note_is_as_before():
    """The other walks pass no note: the title is followed by the player's bar, as before."""
    steps, frames = ht.run_walk(), ht.run_frames()
    scene, words = export_frame(frames, steps, 0)
    page = export_html([scene], [words], "t")
    assert '<h2>t</h2>\n<div id="bar">' in page and 'id="note"' not in page
