"""Detectors that read how the prompts were made, not only their text: namespaces, the chat
template, a reordered tools list, and tokenization.

`namespace`: different (extra_key, cache_salt) keep equal tokens apart in both caches (the tree
keys children by namespace; vLLM's block hash takes LoRA name and cache_salt as extra keys).
`chat_template`: the same messages rendered to different text, or the texts part inside the
template's own markup (a default system prompt, role headers) rather than in any message.
`tools_order`: the same tools in another order. `tokenization`: same text, different ids.
Leaves out: multimodal hashes (no image inputs here).
"""

from __future__ import annotations

import json

from radix.why.causes import Cause
from radix.why.diff import escape, first_char_diff
from radix.why.prompt import Prompt


def namespace(a: Prompt, b: Prompt) -> Cause | None:
    """Different namespaces: nothing is shared, whatever the tokens.

    >>> namespace(Prompt("a", (1,), cache_salt="t1"), Prompt("b", (1,), cache_salt="t2")).kind
    'namespace'
    """
    if a.namespace == b.namespace:
        return None
    parts = [f"{name} {va!r} vs {vb!r}" for name, va, vb in
             zip(("extra_key (LoRA)", "cache_salt"), a.namespace, b.namespace) if va != vb]
    return Cause("namespace", f"kept apart by namespace: {'; '.join(parts)}. Equal tokens in "
                              "two namespaces never share a tree node or a block hash")


def _tool_name(tool: object) -> str:
    if isinstance(tool, dict):
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
        if isinstance(name, str):
            return name
    return json.dumps(tool, sort_keys=True)[:24]


def tools_order(a: Prompt, b: Prompt) -> Cause | None:
    """The same tools (as JSON) in another order.

    >>> t1, t2 = {"name": "search"}, {"name": "weather"}
    >>> a = Prompt("a", (1,), messages=({"role": "user", "content": "hi"},), tools=(t1, t2))
    >>> tools_order(a, Prompt("b", (2,), messages=a.messages, tools=(t2, t1))).kind
    'reordered'
    """
    if not a.tools or not b.tools or a.tools == b.tools:
        return None
    key = [sorted(json.dumps(t, sort_keys=True) for t in side) for side in (a.tools, b.tools)]
    if key[0] != key[1]:
        return None
    names = [[_tool_name(t) for t in side] for side in (a.tools, b.tools)]
    return Cause("reordered", f"the same {len(a.tools)} tools in another order: A {names[0]}, "
                              f"B {names[1]}. Sort them (by name) before sending")


def _content_spans(p: Prompt) -> list[tuple[int, int]]:
    """Where each message's content lies in the rendered text (searched in order)."""
    spans, cursor = [], 0
    for m in p.messages or ():
        i = (p.text or "").find(m["content"], cursor)
        if i < 0:
            continue
        spans.append((i, i + len(m["content"])))
        cursor = i + len(m["content"])
    return spans


def chat_template(a: Prompt, b: Prompt) -> Cause | None:
    """Same messages rendered differently, or the texts part in template markup."""
    if a.text is None or b.text is None or a.text == b.text:
        return None
    if a.is_chat and b.is_chat and a.messages == b.messages and a.tools == b.tools:
        what = []
        if a.add_generation_prompt != b.add_generation_prompt:
            what.append(f"add_generation_prompt {a.add_generation_prompt} vs "
                        f"{b.add_generation_prompt}")
        if a.template != b.template:
            what.append("a different chat template")
        return Cause("chat_template", "the same messages rendered to different text ("
                     f"{', '.join(what) or 'template settings differ'})")
    at = first_char_diff(a.text, b.text)
    for side, p in (("A", a), ("B", b)):
        if p.is_chat and not any(lo <= at < hi for lo, hi in _content_spans(p)):
            return Cause("chat_template", f"the texts part inside {side}'s chat-template "
                         f"markup, not in any message: {side} has "
                         f"'{escape(p.text[at:at + 48])}' there (a default system prompt, a "
                         "role header, or a hand-written template on the other side)")
    return None


def tokenization(a: Prompt, b: Prompt) -> Cause | None:
    """The same text, different token ids: special tokens or BOS handled differently."""
    if a.text is None or a.text != b.text or a.token_ids == b.token_ids:
        return None
    return Cause("tokenization", "the same text tokenized to different ids (special tokens "
                                 "parsed on one side only, or a BOS token added)")


STRUCTURE_DETECTORS = (namespace, tools_order, chat_template, tokenization)
