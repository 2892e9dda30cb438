"""runtime/downloads.py: a session's prepared files, one per slot, capped, removed with it."""

from __future__ import annotations

import os
import time

import pytest

from runtime.downloads import DownloadDir, OverCap, human_size, remove_stale


def test_prepare_replace_get_and_close(tmp_path):
    """A file prepared in a slot is served under the session's random folder; preparing the
    slot again replaces it (the old file is gone); another ident finds nothing; close removes
    the folder."""
    d = DownloadDir(tmp_path)
    a = d.prepare("x", "a.txt", lambda out: out.write(b"hello"), ident=1)
    assert a.size == 5 and a.url == f"app/static/downloads/{d.name}/a.txt"
    assert d.get("x", 1) == a and d.get("x", 2) is None
    b = d.prepare("x", "b.txt", lambda out: out.write(b"hi"), ident=2)
    assert not a.path.exists() and b.path.read_bytes() == b"hi" and d.get("x", 2) == b
    d.close()
    assert not d.path.exists() and d.get("x", 2) is None


def test_over_the_cap_stops_and_leaves_nothing(tmp_path):
    """Writing past the cap raises OverCap; no partial file stays."""
    d = DownloadDir(tmp_path)

    def big(out):
        for _ in range(10):
            out.write(b"x" * 100)

    with pytest.raises(OverCap):
        d.prepare("x", "big.txt", big, cap=500)
    assert list(d.path.iterdir()) == [] and d.get("x") is None


def test_two_slots_with_one_name_keep_both(tmp_path):
    d = DownloadDir(tmp_path)
    a = d.prepare("x", "same.txt", lambda out: out.write(b"a"))
    b = d.prepare("y", "same.txt", lambda out: out.write(b"b"))
    assert a.path != b.path and a.path.read_bytes() == b"a" and b.path.read_bytes() == b"b"


def test_stale_folders_go(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    past = time.time() - 3 * 24 * 3600
    os.utime(old, (past, past))
    assert remove_stale(tmp_path) == ["old"] and new.exists()


def test_sizes_in_words():
    assert [human_size(n) for n in (0, 999, 1_000, 12_345, 5_053_834_310)] == [
        "0 B", "999 B", "1 kB", "12.3 kB", "5.05 GB"]
