"""Reading the two prompts of `why`: text files, JSON chat messages, token-id lists, trace rids.

A spec is a file path (JSON when it parses as a JSON list or object, else text, read as bytes so
`\\r\\n` survives) or inline JSON (`[1, 2, 3]`). JSON forms: a list of token ids; a list of chat
messages; an object with "token_ids", "text" or "messages" (+ "tools", "add_generation_prompt",
"chat_template") and the namespace fields "extra_key" / "lora" and "cache_salt". With a trace,
a spec that names a request id of it is that request. Bad input raises ValueError naming the
file and the field. Leaves out: multimodal content parts (text parts are joined).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from radix.why.prompt import Codec, Prompt

NEEDS_CODEC = ("{label}: {what} needs the model's tokenizer; radix/ loads none: run "
               "`python -m engine why` (same arguments), or give token ids")


def read_prompt(spec: str, codec: Codec | None = None,
                trace: Mapping[str, Any] | None = None) -> Prompt:
    """One prompt from a spec (see the module docstring).

    >>> read_prompt("[5, 6, 7]").token_ids
    (5, 6, 7)
    >>> read_prompt('{"token_ids": [1, 2], "cache_salt": "t1"}').namespace
    (None, 't1')
    """
    if trace is not None and spec in trace:
        return _from_trace(spec, trace[spec], codec)
    if spec.lstrip()[:1] in ("[", "{") and not Path(spec).exists():
        return _from_json(_parse(spec, "inline JSON"), "inline JSON", codec)
    path = Path(spec)
    if not path.is_file():
        known = f" (nor a request id of the trace: {len(trace):,} ids)" if trace else ""
        raise ValueError(f"{spec}: no such file{known}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{spec}: not UTF-8 text (byte {exc.start})") from None
    if text.lstrip()[:1] in ("[", "{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # a text prompt that starts with a bracket
        if data is not None:
            return _from_json(data, spec, codec)
    return _text_prompt(spec, text, codec, {})


def _parse(text: str, label: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{label}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def _from_json(data: Any, label: str, codec: Codec | None) -> Prompt:
    if isinstance(data, list):
        if all(isinstance(m, dict) for m in data) and data:
            data = {"messages": data}
        else:
            data = {"token_ids": data}
    if not isinstance(data, dict):
        raise ValueError(f"{label}: expected a JSON list or object, got {type(data).__name__}")
    given = [k for k in ("token_ids", "text", "prompt", "messages") if k in data]
    if len(given) != 1:
        raise ValueError(f"{label}: give exactly one of \"token_ids\", \"text\", \"messages\" "
                         f"(found {given or 'none'})")
    ns = _namespace(data, label)
    if given[0] == "token_ids":
        return Prompt(label, _token_ids(data["token_ids"], label), **ns)
    if given[0] in ("text", "prompt"):
        value = data[given[0]]
        if not isinstance(value, str):
            raise ValueError(f"{label}: field \"{given[0]}\": expected a string")
        return _text_prompt(label, value, codec, ns)
    return _chat_prompt(label, data, codec, ns)


def _token_ids(value: Any, label: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{label}: field \"token_ids\": expected a non-empty list of ints")
    for i, t in enumerate(value):
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            raise ValueError(f"{label}: field \"token_ids\"[{i}]: expected an int >= 0, "
                             f"got {t!r}")
    return tuple(value)


def _namespace(data: dict, label: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for field_name, key in (("extra_key", "extra_key"), ("lora", "extra_key"),
                            ("cache_salt", "cache_salt")):
        value = data.get(field_name)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{label}: field \"{field_name}\": expected a string")
        if value is not None:
            out[key] = value
    return out


def _text_prompt(label: str, text: str, codec: Codec | None, ns: dict) -> Prompt:
    if codec is None:
        raise ValueError(NEEDS_CODEC.format(label=label, what="a text prompt"))
    if not text:
        raise ValueError(f"{label}: the prompt is empty")
    return Prompt(label, tuple(codec.encode(text)), text=text, **ns)


def _chat_prompt(label: str, data: dict, codec: Codec | None, ns: dict) -> Prompt:
    messages = _messages(data["messages"], label)
    tools = data.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError(f"{label}: field \"tools\": expected a list")
    gen = data.get("add_generation_prompt", True)
    template = data.get("chat_template")
    if not isinstance(gen, bool):
        raise ValueError(f"{label}: field \"add_generation_prompt\": expected true or false")
    if template is not None and not isinstance(template, str):
        raise ValueError(f"{label}: field \"chat_template\": expected a Jinja template string")
    if codec is None:
        raise ValueError(NEEDS_CODEC.format(label=label, what="a chat prompt"))
    text = codec.render(messages, tools, gen, template)
    return Prompt(label, tuple(codec.encode_rendered(text)), text=text, messages=tuple(messages),
                  tools=None if tools is None else tuple(tools),
                  template="model" if template is None else template,
                  add_generation_prompt=gen, **ns)


def _messages(value: Any, label: str) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{label}: field \"messages\": expected a non-empty list")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise ValueError(f"{label}: field \"messages\"[{i}]: expected an object")
        if not isinstance(m.get("role"), str):
            raise ValueError(f"{label}: field \"messages\"[{i}].role: expected a string")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: the text parts, joined
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            if not texts or not all(isinstance(t, str) for t in texts):
                raise ValueError(f"{label}: field \"messages\"[{i}].content: parts without text")
            content = "".join(texts)
        if not isinstance(content, str):
            raise ValueError(f"{label}: field \"messages\"[{i}].content: expected a string")
        out.append({"role": m["role"], "content": content})
    return out


def _from_trace(rid: str, tr: Any, codec: Codec | None) -> Prompt:
    ids = tuple(tr.token_ids)
    text = codec.decode(list(ids)) if codec is not None else None
    return Prompt(f"request {rid}", ids, text=text, extra_key=tr.extra_key,
                  cache_salt=tr.cache_salt, notes=("text decoded from the trace's token ids",)
                  if text is not None else ())
