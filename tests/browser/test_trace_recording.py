"""A real browser on the Trace debugger given a `radix watch --record` recording: the final pool
is drawn as a block grid and its prefix tree as the tree view, times as UTC dates."""

from __future__ import annotations

import pytest
from browserhelp import shoot, wait_drawn
from machine import ms

from radix.blocks.kv_events import EventBatch, encode_batch
from radix.events import BlockStored
from radix.watch.recording import record_bytes

pytestmark = pytest.mark.browser
T0 = 1_796_170_000.0  # 2026-12-02 00:06:40 UTC


def test_a_recording_draws_its_final_pool_and_tree(server, page, tmp_path):
    """Chain 1-2 (seq 0), a restart, chain 10-11 then 12 under 11 (seqs 0, 1): the pool holds
    10, 11, 12, one run under the root: two tree nodes (root and the run), a grid drawn."""
    out = b""
    for i, (seq, hashes, parent) in enumerate([(0, (1, 2), None), (0, (10, 11), None),
                                               (1, (12,), 11)]):
        tokens = tuple(t for h in hashes for t in (h, h))
        batch = EventBatch(T0 + i, (BlockStored(hashes, parent, tokens, 2, None, "GPU", None),))
        out += record_bytes(encode_batch(batch), seq, T0 + i, "tcp://10.0.0.7:5557")
    path = tmp_path / "watch.msgpack"
    path.write_bytes(out)
    page.goto(f"{server}/trace")
    page.wait_for_selector("[data-testid=stFileUploaderDropzoneInput]", state="attached",
                           timeout=ms(60_000))
    page.set_input_files("[data-testid=stFileUploaderDropzoneInput]", str(path))
    page.get_by_text("the pool at the end of the recording").wait_for(timeout=ms(120_000))
    page.locator(".radixlens-tree g.node").nth(1).wait_for(timeout=ms(60_000))
    wait_drawn(page)
    assert page.locator(".radixlens-tree g.node").count() == 2
    assert page.locator("[data-testid=stEChartsChart]").count() == 1  # the block grid
    text = page.inner_text("[data-testid=stMain]")
    assert "3 blocks of 2 tokens cached" in text and "2026-12-02 00:06:40" in text
    assert "e+09" not in text
    shoot(page, tmp_path, "trace_recording.png")
