"""`why` on realistic prompt pairs through the default model's real tokenizer (SmolLM2-135M).

Each cause has a pair a user would send: an ISO timestamp in the system prompt, a request id, a
per-turn counter, \\r\\n vs \\n, NFC vs NFD, a tools list in two orders, a chat template's default
system prompt, the same messages with and without the generation prompt, two cache_salts; and an
unrelated pair that must say "no known cause". The counts come from the real caches run on the
real token ids (radix/why/caches.py); where a count is asserted, the docstring shows it.
"""

from __future__ import annotations

import json

import pytest

from radix.why.inputs import read_prompt
from radix.why.prompt import Prompt
from radix.why.report import NO_CAUSE, format_why, why

SYSTEM = ("You are the support assistant of Acme Hardware. Be brief and polite. Never promise "
          "refunds; hand those to a human.\n")


@pytest.fixture(scope="module")
def codec():
    from engine.why import load_codec
    return load_codec()


def text(codec, label: str, s: str, **ns) -> Prompt:
    return Prompt(label, tuple(codec.encode(s)), text=s, **ns)


def kinds(report) -> list[str]:
    return [c.kind for c in report.causes]


def test_iso_date_in_the_system_prompt(codec):
    a = text(codec, "a", SYSTEM + "Current time: 2026-12-01T09:15:00Z\nUser: where is my order?")
    b = text(codec, "b", SYSTEM + "Current time: 2026-12-02T14:40:12Z\nUser: where is my order?")
    r = why(a, b, decode=codec.decode)
    assert kinds(r) == ["date_time"]
    assert "'2026-12-01T09:15:00Z'" in r.causes[0].sentence
    assert r.tree.hit == r.diff.common < len(b.token_ids) - 10  # the date breaks the rest
    assert r.blocks.hit == r.diff.common // 16 * 16


def test_request_id_and_counter(codec):
    uid = why(text(codec, "a", SYSTEM + "request 3f2a9c1e-8b7d-4e2f-9a10-55c1d2e3f4a5\nHi"),
              text(codec, "b", SYSTEM + "request 9d0e1f2a-3b4c-4d5e-8f60-718293a4b5c6\nHi"))
    assert kinds(uid) == ["uuid_hex"]
    turn = why(text(codec, "a", SYSTEM + "Conversation turn 41.\nUser: and now?"),
               text(codec, "b", SYSTEM + "Conversation turn 42.\nUser: and now?"))
    assert kinds(turn) == ["counter"] and "'41'" in turn.causes[0].sentence


def test_crlf_vs_lf(codec):
    """Same text with Windows line endings: the first "\\r" is its own token, so the streams
    part right after the first line."""
    body = SYSTEM + "Rules:\n- answer in English\n- cite the order number\nUser: hi"
    r = why(text(codec, "a", body), text(codec, "b", body.replace("\n", "\r\n")),
            decode=codec.decode)
    assert kinds(r) == ["line_endings"]
    assert "[\\r]" in r.context_b and "[\\r]" not in r.context_a


def test_nfc_vs_nfd(codec):
    import unicodedata
    body = SYSTEM + "Customer: José Müller from Zürich asks about the café order.\nUser: hi"
    r = why(text(codec, "a", unicodedata.normalize("NFC", body)),
            text(codec, "b", unicodedata.normalize("NFD", body)))
    assert kinds(r) == ["unicode_nfc", "unicode_nfkc"]  # NFKC also composes: both fit


def test_tools_in_two_orders_in_the_system_prompt(codec):
    """Tools serialised one per line into the system prompt (SmolLM2's template has no tools
    section, so applications do this themselves), in two orders."""
    tools = [json.dumps({"name": n, "description": d}) for n, d in
             (("get_weather", "Weather for a city"), ("search_orders", "Find an order"),
              ("refund", "Start a refund"))]
    a = text(codec, "a", SYSTEM + "Tools:\n" + "\n".join(tools) + "\nUser: hi")
    b = text(codec, "b", SYSTEM + "Tools:\n" + "\n".join(tools[1:] + tools[:1]) + "\nUser: hi")
    assert kinds(why(a, b)) == ["reordered"]


def test_tools_list_field_in_two_orders(codec, tmp_path):
    """Chat input with a "tools" field: the structural detector names the tools."""
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
    t1, t2 = ({"type": "function", "function": {"name": n}} for n in ("search", "weather"))
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(json.dumps({"messages": msgs, "tools": [t1, t2],
                              "chat_template": "{{ tools | tojson }}{{ messages[0].content }}"}))
    fb.write_text(json.dumps({"messages": msgs, "tools": [t2, t1],
                              "chat_template": "{{ tools | tojson }}{{ messages[0].content }}"}))
    r = why(read_prompt(str(fa), codec), read_prompt(str(fb), codec))
    assert kinds(r)[0] == "reordered" and "['search', 'weather']" in r.causes[0].sentence


def test_chat_template_default_system_prompt(codec, tmp_path):
    """A: the client templated ChatML by hand (no system turn); B: the same user message through
    the model's template, which inserts SmolLM2's default system prompt first."""
    fa, fb = tmp_path / "a.txt", tmp_path / "b.json"
    fa.write_text("<|im_start|>user\nWhere is my order?<|im_end|>\n<|im_start|>assistant\n")
    fb.write_text(json.dumps([{"role": "user", "content": "Where is my order?"}]))
    r = why(read_prompt(str(fa), codec), read_prompt(str(fb), codec))
    assert kinds(r) == ["chat_template"] and "B's chat-template markup" in r.causes[0].sentence


def test_same_messages_with_and_without_generation_prompt(codec):
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Order 7?"}]
    a = read_prompt(json.dumps({"messages": msgs, "add_generation_prompt": False}), codec)
    b = read_prompt(json.dumps({"messages": msgs}), codec)
    r = why(a, b)
    assert kinds(r) == ["chat_template"] and "add_generation_prompt False vs True" in \
        r.causes[0].sentence
    assert r.diff.common == len(a.token_ids)  # B extends A: nothing is lost but the rule


def test_chat_rendering_matches_apply_chat_template(codec):
    """The ids `why` compares are the engine's: apply_chat_template(tokenize=True)."""
    msgs = [{"role": "user", "content": "Where is my order?"}]
    p = read_prompt(json.dumps(msgs), codec)
    direct = codec.tokenizer.apply_chat_template(msgs, add_generation_prompt=True,
                                                 tokenize=True, return_dict=True)["input_ids"]
    assert list(p.token_ids) == list(direct)


def test_namespaces_keep_equal_prompts_apart(codec):
    a = text(codec, "a", SYSTEM + "User: hi", cache_salt="tenant-1")
    b = text(codec, "b", SYSTEM + "User: hi", cache_salt="tenant-2")
    r = why(a, b)
    assert kinds(r) == ["namespace"] and r.diff.identical
    assert r.tree.hit == r.blocks.hit == 0


def test_unrelated_prompts_say_no_known_cause(codec):
    r = why(text(codec, "a", SYSTEM + "User: where is my order?"),
            text(codec, "b", SYSTEM + "User: can I change my address?"))
    assert r.causes == [] and f"cause: {NO_CAUSE}" in format_why(r)


def test_the_block_floor_on_real_tokens(codec):
    """A shared system prompt shorter than one block: the tree reuses it, vLLM cannot. SYSTEM
    tokenizes to fewer than 64 tokens; with blocks of 64 the shared prefix fills no block."""
    a = text(codec, "a", SYSTEM + "User: where is my order?")
    b = text(codec, "b", SYSTEM + "User: can I change my address?")
    r = why(a, b, block_size=64)
    assert 0 < r.diff.common < 64 and r.tree.hit == r.diff.common
    assert r.blocks.hit == 0 and r.blocks.lost_to_unit == r.diff.common
    assert "the block floor" in format_why(r)


def test_whitespace_and_nfkc(codec):
    """Double spaces and trailing blanks; a no-break space (U+00A0) where a space was."""
    body = SYSTEM + "Rules: answer in English.\nUser: hi"
    r = why(text(codec, "a", body), text(codec, "b", body.replace("Rules: answer",
                                                                   "Rules:  answer")))
    assert kinds(r) == ["whitespace"]
    r = why(text(codec, "a", body), text(codec, "b", body.replace("Rules: answer",
                                                                   "Rules:\u00a0answer")))
    assert kinds(r) == ["unicode_nfkc"]


def test_tokenization_same_text_other_ids(codec):
    """The same text as ids from another tokenization (here: the text's ids with a BOS-like id
    in front, as a server adding BOS would send)."""
    s = SYSTEM + "User: hi"
    a = text(codec, "a", s)
    b = Prompt("b", (1,) + a.token_ids, text=s)
    assert kinds(why(a, b)) == ["tokenization"]


def test_engine_why_on_two_requests_of_a_text_trace(codec, tmp_path, capsys):
    """`--trace` with text lines: the engine tokenizes them with the real tokenizer."""
    from engine.__main__ import main as engine_main
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"rid": r, "arrival": i, "output_len": 1,
                                     "text": SYSTEM + f"Session id: {sid}\nUser: hi"}) + "\n"
                         for i, (r, sid) in enumerate((("r1", "a3f9c2e1b7d4"),
                                                       ("r2", "9e8d7c6b5a4f")))))
    assert engine_main(["why", "r1", "r2", "--trace", str(f)]) == 0
    out = capsys.readouterr().out
    assert "A: request r1" in out and "request id (UUID / hex / random id)" in out
