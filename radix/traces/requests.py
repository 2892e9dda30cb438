"""Request traces (format a), the project's own, read and written: one JSON object a line.

Follows the shape of an OpenAI request plus SGLang's extra_key / cache_salt: a prompt as token
ids, text (tokenized by the caller's tokenizer, or radix.traces.textcodec's fallback) or chat
messages; every field checked (fields.py) and the whole counted against `TraceLimits`
(limits.py). Leaves out: sampling parameters, images and tool calls in messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from radix.traces import textcodec
from radix.traces.fields import (
    MAX_OUTPUT_LEN,
    MAX_SECONDS,
    TraceError,
    as_int,
    as_int_list,
    as_number,
    as_opt_str,
    check_text,
    checked_ints,
    need,
    type_name,
)
from radix.traces.limits import DEFAULT_LIMITS, Tally, TraceLimits
from radix.traces.reading import iter_json_lines
from radix.traces.trace import Trace, TraceRequest

# One JSON object a line, one request each:
#   {"rid": str, "arrival": seconds >= 0 (default 0), "output_len": int >= 0,
#    exactly one of "tokens": [int, ...] | "text": str | "messages": [{"role", "content"}, ...],
#    optional "extra_key": str, "cache_salt": str, "priority": int, "meta": any JSON (ignored),
#    "output_tokens": [int, ...] (output_len of them: the reply a simulated run generates)}
# "messages" are OpenAI chat messages (content a string or a list of {"type": "text", "text"}).
# Strings must be valid Unicode (no lone surrogates); totals are bounded by `TraceLimits`.

FIELDS = {"rid", "arrival", "tokens", "text", "messages", "output_len", "extra_key",
          "cache_salt", "priority", "output_tokens", "meta"}  # "meta": anything, ignored
PROMPT_FIELDS = ("tokens", "text", "messages")
MAX_TEXT_CHARS = 16 * 1024 * 1024  # one request's text, before tokenizing


def load_requests(text: str, tokenize: Callable[[str], list[int]] | None = None,
                  chat_template: Callable[[list[dict]], list[int]] | None = None,
                  limits: TraceLimits = DEFAULT_LIMITS) -> Trace:
    """Parse and validate a request trace within `limits`; requests come back sorted by arrival
    (stable).

    >>> t = load_requests('{"rid": "a", "arrival": 1.5, "text": "hi there", "output_len": 2}')
    >>> t.requests[0].arrival, len(t.requests[0].token_ids)
    (1.5, 2)
    """
    requests: list[TraceRequest] = []
    seen: dict[str, int] = {}
    tally = Tally(limits)
    tally.check_lines(text, "max_requests", "requests")
    for line, obj in iter_json_lines(text):
        tr = parse_request(obj, line, tokenize, chat_template, limits.max_tokens_per_request)
        tally.add_request(line, len(tr.token_ids), tr.output_len, _prompt_field(obj))
        if tr.rid in seen:
            raise TraceError(f"duplicate rid {tr.rid!r} (first on line {seen[tr.rid]})",
                             line, "rid")
        seen[tr.rid] = line
        requests.append(tr)
    if not requests:
        raise TraceError("no requests in the file")
    requests.sort(key=lambda r: r.arrival)
    return Trace("request", requests, input_lens=[len(r.token_ids) for r in requests])


def parse_request(obj: Any, line: int, tokenize: Callable[[str], list[int]] | None,
                  chat_template: Callable[[list[dict]], list[int]] | None,
                  max_tokens: int) -> TraceRequest:
    """One line's object -> TraceRequest, or a TraceError naming the line and the field."""
    if not isinstance(obj, dict):
        raise TraceError(f"expected a JSON object, got {type_name(obj)}", line)
    unknown = sorted(set(obj) - FIELDS)
    if unknown:
        raise TraceError(f"unknown field (known: {', '.join(sorted(FIELDS))})", line, unknown[0])
    rid = need(obj, "rid", line)
    if not isinstance(rid, str) or not rid:
        raise TraceError(f"expected a non-empty string, got {type_name(rid)}", line, "rid")
    as_opt_str(rid, line, "rid")
    given = [k for k in PROMPT_FIELDS if k in obj]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise TraceError(f"exactly one of tokens, text, messages is needed; got {what}",
                         line, given[1] if len(given) > 1 else "tokens")
    token_ids = _prompt(obj, given[0], line, tokenize, chat_template, max_tokens)
    output_len = as_int(need(obj, "output_len", line), line, "output_len", 0, MAX_OUTPUT_LEN)
    output_ids = None
    if obj.get("output_tokens") is not None:
        output_ids = as_int_list(obj["output_tokens"], line, "output_tokens", MAX_OUTPUT_LEN)
        if len(output_ids) != output_len:
            raise TraceError(f"{len(output_ids)} tokens but output_len is {output_len}",
                             line, "output_tokens")
    return TraceRequest(
        rid=rid,
        arrival=as_number(obj.get("arrival", 0), line, "arrival", 0.0, MAX_SECONDS),
        token_ids=token_ids,
        output_len=output_len,
        extra_key=as_opt_str(obj.get("extra_key"), line, "extra_key"),
        cache_salt=as_opt_str(obj.get("cache_salt"), line, "cache_salt"),
        priority=as_int(obj.get("priority", 0), line, "priority", -(2 ** 31), 2 ** 31 - 1),
        output_ids=output_ids,
    )


def _prompt_field(obj: dict) -> str:
    return next((k for k in PROMPT_FIELDS if k in obj), "tokens")


def _prompt(obj: dict, key: str, line: int, tokenize: Callable[[str], list[int]] | None,
            chat_template: Callable[[list[dict]], list[int]] | None,
            max_tokens: int) -> list[int]:
    """The prompt as `Tokens`: a list of its own (a JSON list or a tokenizer's output, checked
    and kept as it is, not copied)."""
    value = obj[key]
    if key == "tokens":
        ids = checked_ints(value, line, key, max_tokens)
    elif key == "text":
        if not isinstance(value, str):
            raise TraceError(f"expected a string, got {type_name(value)}", line, key)
        if len(value) > MAX_TEXT_CHARS:
            raise TraceError(f"text longer than {MAX_TEXT_CHARS:,} characters", line, key)
        check_text(value, line, key)
        raw = tokenize(value) if tokenize else textcodec.encode(value, max_tokens + 1)
        ids = checked_ints(_capped(raw, max_tokens, line, key), line, key, max_tokens)
    else:
        messages = _messages(value, line)
        raw = (chat_template(messages) if chat_template
               else textcodec.apply_chat_template(messages, max_tokens + 1))
        ids = checked_ints(_capped(raw, max_tokens, line, key), line, key, max_tokens)
    if not ids:
        raise TraceError("the prompt is empty (0 tokens)", line, key)
    return ids


def _capped(ids: Any, max_tokens: int, line: int, key: str) -> list:
    """The tokenizer's ids as a list, refused past `max_tokens` (the fallback codec stops one
    past it, so the count is only known to be larger)."""
    ids = list(ids)
    if len(ids) > max_tokens:
        raise TraceError(f"more than {max_tokens:,} tokens, over the cap (max_tokens_per_request)",
                         line, key)
    return ids


def _messages(value: Any, line: int) -> list[dict]:
    """OpenAI chat messages, normalised to [{"role": str, "content": str}, ...]."""
    if not isinstance(value, list) or not value:
        raise TraceError(f"expected a non-empty list of messages, got {type_name(value)}",
                         line, "messages")
    out, total = [], 0
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise TraceError(f"expected an object, got {type_name(m)}", line, where)
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not role:
            raise TraceError(f"expected a role string, got {type_name(role)}",
                             line, where + ".role")
        as_opt_str(role, line, where + ".role")
        if isinstance(content, list):
            content = _text_parts(content, line, where + ".content")
        if not isinstance(content, str):
            raise TraceError(f"expected a string or a list of text parts, got {type_name(content)}",
                             line, where + ".content")
        total += len(content)
        if total > MAX_TEXT_CHARS:
            raise TraceError(f"messages longer than {MAX_TEXT_CHARS:,} characters", line, where)
        check_text(content, line, where + ".content")
        out.append({"role": role, "content": content})
    return out


def _text_parts(parts: list, line: int, where: str) -> str:
    texts = []
    for j, part in enumerate(parts):
        if not (isinstance(part, dict) and part.get("type") == "text"
                and isinstance(part.get("text"), str)):
            raise TraceError('only {"type": "text", "text": str} parts are supported',
                             line, f"{where}[{j}]")
        texts.append(part["text"])
    return "".join(texts)


def request_to_json(tr: TraceRequest) -> dict:
    """The line object of one request (optional fields only when set).

    >>> request_to_json(TraceRequest("a", 0.0, (5, 6), 1))
    {'rid': 'a', 'arrival': 0.0, 'tokens': [5, 6], 'output_len': 1}
    """
    obj: dict[str, Any] = {"rid": tr.rid, "arrival": tr.arrival, "tokens": list(tr.token_ids),
                           "output_len": tr.output_len}
    for key in ("extra_key", "cache_salt"):
        if getattr(tr, key) is not None:
            obj[key] = getattr(tr, key)
    if tr.priority:
        obj["priority"] = tr.priority
    if tr.output_ids is not None:
        obj["output_tokens"] = list(tr.output_ids)
    return obj


def dumps_requests(requests: Iterable[TraceRequest]) -> str:
    """A request trace as text, one compact JSON object a line."""
    return "".join(json.dumps(request_to_json(r), separators=(",", ":")) + "\n"
                   for r in requests)
