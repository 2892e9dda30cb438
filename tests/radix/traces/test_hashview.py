"""Hash-id traces shown as the trace has them (radix/traces/hashview.py): pretty_print, the tree
scene's edge labels and the explainer's "first ids" name a Mooncake trace's hash ids and
block numbers, never its token ids (hash id x 512 + k)."""

from __future__ import annotations

import io
import json

from radix.cli import main
from radix.tokens import TokenRuns
from radix.traces import load_trace
from radix.traces.hashview import block_label
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache
from viz.scene import tree_items
from viz.trace import id_labels


def two_prompts() -> RadixCache:
    """[7, 8, 9] over 1,200 tokens and [7, 3] over 1,024 share block 7 (512 tokens): the tree
    holds #7 (512) with children #8 #9[0:176] (512 + 176 = 688) and #3 (512)."""
    tree = RadixCache()
    for ids, n in (([7, 8, 9], 1200), ([7, 3], 1024)):
        tree.insert(RadixKey(TokenRuns.from_blocks(ids, 512, n)))
    return tree


def test_pretty_print_shows_hash_ids():
    text = two_prompts().pretty_print(ids=block_label, file=io.StringIO())
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert lines == ["0 [] r=1", "512 [#7] r=0", "512 [#3] r=0", "688 [#8 #9[0:176]] r=0",
                     "#tokens: 1712"]
    assert str(7 * 512) not in text and str(8 * 512) not in text


def test_tree_scene_edges_show_hash_ids():
    from radix.tree.snapshot import snapshot

    _, lines = tree_items(snapshot(two_prompts()), ids=lambda t: block_label(t, 1))
    labels = sorted(line.label for line in lines)
    assert labels == ["512 tok\n#3", "512 tok\n#7", "688 tok\n#8 … (2 blocks)"]


def test_id_labels_only_for_hash_traces():
    mooncake = load_trace(b'{"timestamp": 0, "input_length": 600, "output_length": 1, '
                          b'"hash_ids": [5, 6]}')
    assert id_labels(mooncake)(mooncake.requests[0].token_ids) == "#5 #6[0:88]"
    assert id_labels(load_trace(b'{"rid": "a", "tokens": [1, 2], "output_len": 1}')) is None


def test_explain_first_ids_are_hash_ids_and_block_numbers(tmp_path, capsys):
    """Two requests share blocks [11, 12] then differ: the second hits blocks 0-1 of its
    prompt (1,024 tokens), whose hash ids are 11 and 12 (tokens 5,632 and 6,144)."""
    path = tmp_path / "mc.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 1000 * k, "input_length": 1500,
                                        "output_length": 2, "hash_ids": ids}) + "\n"
                            for k, ids in enumerate(([11, 12, 13], [11, 12, 14]))))
    assert main(["explain", str(path), "--no-what-if"]) == 0
    out = capsys.readouterr().out
    assert "[0, 1,024)  blocks 0-1, hash ids [11, 12]" in out
    assert "5632" not in out and "5,632" not in out
    assert main(["explain", str(path), "--no-what-if", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["top_prefixes"]["tree"][0]
    assert top["hash_ids"] == [11, 12]
