"""`engine serve --host-ratio 2` tells a client what came from the host, as SGLang 0.5.23 does.

One server (a subprocess, --dp 1, the tiny random-init Llama of examples/configs on CPU, an
80-token device pool, host 2x = 161 tokens, write-through). A request that sets SGLang's
`return_cached_tokens_details` gets `sglext.cached_tokens_details` {"device", "host"} at the
response level (a whole answer), or in a chunk of its own with no choices before the usage
chunk (a stream), as SGLang's serving_completions.py / serving_chat.py send it; the official
`openai` client passes the flag in `extra_body` and keeps `sglext` as an extra field.
"""

from __future__ import annotations

import sys

import pytest
from enginehelp import engine_serve

pytestmark = pytest.mark.engine
SERVE = [sys.executable, "-m", "engine", "serve", "--port", "0", "--dp", "1", "--device", "cpu",
         "--random-init", "examples/configs/tiny_llama.json", "--capacity", "80",
         "--host-ratio", "2", "--router", "round-robin", "--kv-events-endpoint", "off",
         "--kv-replay-endpoint", "off"]
A, B = list(range(1000, 1050)), list(range(2000, 2050))
DETAILS = {"return_cached_tokens_details": True}


@pytest.fixture(scope="module")
def client(openai):
    with engine_serve(argv=SERVE) as seen:
        url = seen[0].split()[2]
        model = openai.OpenAI(base_url=url, api_key="none").models.list().data[0].id
        yield openai.OpenAI(base_url=url, api_key="none"), model


def _details(answer) -> dict | None:
    ext = (answer.model_extra or {}).get("sglext")
    return None if ext is None else ext["cached_tokens_details"]


def test_a_prompt_loaded_back_from_host_reports_its_host_tokens(client):
    """Device 80 tokens, one output token each (so prompt + output[:-1] = the prompt is cached).
    A (50 tokens) is computed and backed up (write-through). B (50 other tokens) needs 50 slots,
    30 are free: LRU demotes A's 50-token leaf to host. A again matches A[:-1] = 49 tokens, all
    on host: loading them needs 49 slots, 30 are free, so B is demoted; 49 host, 0 device (its
    last token is computed). A a third time: 49 on the device. A request that hit nothing gets
    no sglext (SGLang's details are None then), nor does one that did not ask."""
    c, model = client
    first = c.completions.create(model=model, prompt=A, max_tokens=1, extra_body=DETAILS)
    assert "sglext" not in (first.model_extra or {})
    c.completions.create(model=model, prompt=B, max_tokens=1, extra_body=DETAILS)
    again = c.completions.create(model=model, prompt=A, max_tokens=1, extra_body=DETAILS)
    assert _details(again) == {"device": 0, "host": 49}
    chunks = list(c.completions.create(model=model, prompt=A, max_tokens=1, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body=DETAILS))
    ext = [ch for ch in chunks if "sglext" in (ch.model_extra or {})]
    assert len(ext) == 1 and ext[0].choices == [] and chunks[-2] is ext[0]
    assert _details(ext[0]) == {"device": 49, "host": 0}
    assert chunks[-1].usage.prompt_tokens == 50
    plain = c.completions.create(model=model, prompt=A, max_tokens=1)
    assert "sglext" not in (plain.model_extra or {})


def test_a_chat_answer_carries_the_split_too(client):
    """The chat endpoint: the same message twice; the second answer's split has device tokens
    (the whole templated prompt but its last token) and no host tokens (nothing was demoted)."""
    c, model = client
    msgs = [{"role": "user", "content": "tents"}]
    c.chat.completions.create(model=model, messages=msgs, max_tokens=1)
    raw = c.chat.completions.with_raw_response.create(model=model, messages=msgs, max_tokens=1,
                                                      extra_body=DETAILS)
    answer = raw.parse()
    assert _details(answer) == {"device": answer.usage.prompt_tokens - 1, "host": 0}
