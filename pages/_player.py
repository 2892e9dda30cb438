"""The one page player: frames 0..n-1 with start, back, next, end, play/pause, a speed that sets
both the autoplay interval and the animation's length, and a scrubber.

A page gives its number of frames and a `show(index, duration_ms)` that draws one frame; the
player keeps the index in `<key>.i` and the URL (`step`, or the page's own parameters through
`to_link` / `from_link`), so a bookmarked URL opens on the same frame. While playing, only the
frame's fragment reruns, every `interval` seconds. Not a page: app.py does not list it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import streamlit as st

from pages._downloads import Item, show_item
from viz.escape import safe_filename
from viz.export import bundle_script, export_html

# name -> (seconds per frame while playing, animation length in ms)
SPEEDS = {"slow": (1.6, 1_000), "normal": (0.9, 550), "fast": (0.45, 250)}


def _clamp(i: int, n: int) -> int:
    return max(0, min(int(i), n - 1))


class Player:
    """Buttons and state of one page's player."""

    def __init__(self, key: str, num_frames: int, *, page: str, start: int = 0,
                 to_link: Callable[[int], dict[str, str]] | None = None,
                 from_link: Callable[[dict[str, str]], int | None] | None = None) -> None:
        self.key, self.n = key, max(1, num_frames)
        self.to_link = to_link or (lambda i: {"step": str(i)})
        self.from_link = from_link or _step_param
        ident = f"{key}.n"
        if st.session_state.get(ident) != self.n:  # a new run: start over, or where the URL says
            st.session_state[ident] = self.n
            linked = None
            if not st.session_state.get(f"_player.linked.{page}"):  # the URL, once a session
                st.session_state[f"_player.linked.{page}"] = True
                linked = self.from_link(st.query_params.to_dict())
            st.session_state[f"{key}.i"] = _clamp(start if linked is None else linked, self.n)
            st.session_state[f"{key}.playing"] = False
        st.session_state.setdefault(f"{key}.speed", "normal")

    @property
    def index(self) -> int:
        return _clamp(st.session_state[f"{self.key}.i"], self.n)

    def go(self, i: int) -> None:
        st.session_state[f"{self.key}.i"] = _clamp(i, self.n)

    @property
    def playing(self) -> bool:
        return bool(st.session_state[f"{self.key}.playing"])

    def _move(self, to: str) -> None:
        i = self.index
        self.go({"start": 0, "back": i - 1, "next": i + 1, "end": self.n - 1}[to])
        st.session_state[f"{self.key}.playing"] = False

    def _toggle(self) -> None:
        playing = not self.playing
        st.session_state[f"{self.key}.playing"] = playing
        if playing and self.index >= self.n - 1:
            self.go(0)

    def buttons(self) -> None:
        """start, back, next, end, play/pause and the speed, on one row."""
        cols = st.columns([1, 1, 1.1, 1, 1.2, 2.2])
        for col, name, label in zip(cols, ("start", "back", "next", "end"),
                                    ("|◀ start", "◀ back", "next ▶", "end ▶|")):
            col.button(label, on_click=self._move, args=(name,), key=f"{self.key}.b_{name}",
                       width="stretch")
        cols[4].button("pause" if self.playing else "play ▶▶", on_click=self._toggle,
                       key=f"{self.key}.b_play", width="stretch")
        cols[5].select_slider("speed", list(SPEEDS), key=f"{self.key}.speed",
                              label_visibility="collapsed",
                              help="sets the autoplay interval and the animation's length")

    @property
    def duration_ms(self) -> int:
        return SPEEDS[st.session_state[f"{self.key}.speed"]][1]

    def _scrubbed(self, widget: str, shown: int) -> None:
        value = st.session_state.get(widget, shown)
        if value == shown:  # an echo of the frame drawn with it, not a drag: a click won
            return
        self.go(value)
        st.session_state[f"{self.key}.playing"] = False

    def frames(self, show: Callable[[int, int], None]) -> None:
        """Draws the current frame with `show(index, duration_ms)`, the scrubber under it, and
        keeps the URL on the frame; while playing, advances one frame per interval."""
        interval = SPEEDS[st.session_state[f"{self.key}.speed"]][0]

        @st.fragment(run_every=interval if self.playing else None)
        def _frame() -> None:
            if self.playing:
                if self.index >= self.n - 1:
                    st.session_state[f"{self.key}.playing"] = False
                    st.rerun(scope="app")
                self.go(self.index + 1)
            i = self.index
            show(i, self.duration_ms)
            if self.n > 1:
                # subtle: a new key per frame, so the slider starts at the frame shown; a key set
                # from code would send its stale value back with a click made mid-run, and a
                # new widget may report its first value as a change: only a value other than
                # the frame it was drawn at is a drag
                widget = f"{self.key}.scrub.{i}"
                st.slider("frame", 0, self.n - 1, i, key=widget, on_change=self._scrubbed,
                          args=(widget, i), label_visibility="collapsed")
            for name, value in self.to_link(i).items():
                if st.query_params.get(name) != value:
                    st.query_params[name] = value

        _frame()


    def export(self, name: str, frame: Callable[[int], tuple[dict[str, Any], str]],
               note: str = "") -> None:
        """A range of this player's frames as one animated HTML file (`note`: a line under
        its title, such as the colours' legend)."""
        interval = int(SPEEDS[st.session_state[f"{self.key}.speed"]][0] * 1000)
        export_range(self.key, name, self.n, self.index, frame, interval, self.duration_ms,
                     note=note)


PLOTLY_JS_BYTES = 4_816_000  # plotly.js inlined when a frame brings a figure (about 4.8 MB)


@contextmanager
def export_panel(title: str, key: str) -> Iterator[bool]:
    """An expander for a page's export, yielding whether it is open: its frames (one built to
    say the file's size) are made only when it is."""
    with st.expander(title, key=f"{key}.export_open", on_change="rerun"):
        yield bool(st.session_state.get(f"{key}.export_open"))


def export_range(key: str, name: str, n: int, at: int,
                 frame: Callable[[int], tuple[dict[str, Any], str]], interval_ms: int = 900,
                 duration_ms: int = 550, max_frames: int = 300, note: str = "",
                 ident: tuple = (), sample: Callable[[int], tuple] | None = None) -> None:
    """Frames lo..hi (`frame(i)` -> (scene, caption), or (scene, caption, block figure)) as
    one self-contained animated HTML file, written when its button (the size estimated from
    frame lo, or from `sample(lo)`: a frame cheaper to make) is clicked, then downloaded from
    its link (pages/_downloads.py). `ident`: what the frames are made of besides their range
    (a Live session's history moves)."""
    if n < 2:
        return
    lo, hi = st.slider("frames to export", 0, n - 1, (max(0, at - 5), min(n - 1, at + 5)),
                       key=f"{key}.export")
    hi = min(hi, lo + max_frames - 1)
    first = (sample or frame)(lo)
    each = len(json.dumps(first[0])) + len(first[1]) + (
        len(first[2].to_json()) if len(first) > 2 and hasattr(first[2], "to_json") else 0)
    size = len(bundle_script()) + 3_000 + each * (hi - lo + 1) + (
        PLOTLY_JS_BYTES if len(first) > 2 else 0)
    first = first if sample is None else None  # a sample is not the frame itself

    def write(out: BinaryIO, progress: Callable[[float, str], None], cancel: Any) -> None:
        pairs = []
        for k in range(lo, hi + 1):
            if cancel.is_set():
                raise InterruptedError("cancelled")
            pairs.append(first if k == lo and first is not None else frame(k))
            progress((k - lo + 1) / (hi - lo + 1), f"frame {k} of {lo}..{hi}")
        # a frame may bring a third part: its block view (a plotly figure) for below the tree
        figures = [p[2] for p in pairs] if all(len(p) > 2 for p in pairs) else None
        out.write(export_html([p[0] for p in pairs], [p[1] for p in pairs],
                              f"RadixLens {name}: frames {lo}..{hi}", interval_ms,
                              duration_ms=duration_ms, figures=figures, note=note).encode())

    show_item(Item(f"{key}.export_dl", safe_filename(f"radixlens-{name}-{lo}-{hi}.html"), size,
                   False, write, (name, lo, hi, interval_ms, duration_ms, *ident),
                   label=f"animated HTML of frames {lo}..{hi}"))


def _step_param(params: dict[str, str]) -> int | None:
    try:
        return int(params["step"]) if "step" in params else None
    except ValueError:
        return None
