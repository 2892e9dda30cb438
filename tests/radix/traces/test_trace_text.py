"""The fallback text codec: lossless pieces, stable ids, prefix-stable chat turns; and "text" /
"messages" traces through it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from radix.traces import load_trace, textcodec
from radix.traces.textcodec import IM_END, IM_START, TextCodec, piece_id, pieces


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_pieces_concatenate_back(text):
    assert "".join(pieces(text)) == text


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_decode_inverts_encode(text):
    codec = TextCodec()
    assert codec.decode(codec.encode(text)) == text


def test_known_ids_are_stable():
    """BLAKE2b-64 of b" world" reduced into [16, 2**30): the same on every machine."""
    assert piece_id(" world") == 16 + int.from_bytes(
        __import__("hashlib").blake2b(b" world", digest_size=8).digest(), "little") % (2**30 - 16)
    assert TextCodec().encode("Hello, world!") == TextCodec().encode("Hello, world!")


def test_chat_turns_are_prefixes():
    """Turn 2's messages extend turn 1's plus the reply, so turn 1 (without the generation
    prompt) is a prefix of turn 2's ids; special tokens are 1 and 2."""
    codec = TextCodec()
    turn1 = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    turn2 = turn1 + [{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "?"}]
    a = codec.apply_chat_template(turn1)
    b = codec.apply_chat_template(turn2)
    assert b[:len(a)] == a  # the generation prompt opens the assistant message it becomes
    assert a[0] == IM_START and a.count(IM_END) == 2


def test_text_trace_shares_the_system_prompt():
    data = (b'{"rid": "a", "messages": [{"role": "system", "content": "You help."}, '
            b'{"role": "user", "content": "Where is my parcel?"}], "output_len": 8}\n'
            b'{"rid": "b", "messages": [{"role": "system", "content": "You help."}, '
            b'{"role": "user", "content": "Refund please"}], "output_len": 8}\n'
            b'{"rid": "c", "text": "You help. Where", "output_len": 1}\n')
    a, b, c = load_trace(data).requests
    system = textcodec.apply_chat_template([{"role": "system", "content": "You help."}])[:-3]
    assert a.token_ids[:len(system)] == b.token_ids[:len(system)] == list(system)
    assert a.token_ids[len(system) + 3] != b.token_ids[len(system) + 3]
    # pieces: "You", " help", ".", " Where"
    assert textcodec.decode(c.token_ids) == "You help. Where" and len(c.token_ids) == 4
