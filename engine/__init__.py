"""RadixLens's engine: real inference through the caches of `radix/` (the only torch code).

`model.py` loads a Llama-family or Gemma 3 text model (default SmolLM2-135M-Instruct, GGUF),
`kv_pool.py` holds K/V rows by slot id, `runner.py` runs prefill of unmatched suffixes and batched
decode over them as one step (`attention.py`: spans of new tokens, cascade over shared prefix
slots; a decode token is a span of one), `service.py` runs radix's
scheduler loop with them, or with the simulated runner (`backends.py`), in a background
thread; `sampling.py` stops and samples as a server;
`kv_publisher.py`, `cluster.py`, `openai_api.py`, `server.py` make `python -m engine serve`
(OpenAI API, vLLM's KV events over ZMQ, `--dp N` replicas). `python -m engine run TRACE`.
`procservice.py` runs a whole service in a spawned child behind the same calls (the app's).
`hosttier.py`: SGLang's host tier over the pool (`EngineService(..., host_ratio=R)`,
`--host-ratio R`): the KV rows of demoted nodes kept in a CPU host pool and loaded back.
Sliding-window layers (docs/HYBRID.md): `swa_pool.py` keeps their rows apart, SGLang's
component tree (radix/tree's UnifiedRadixCache, `backends.py`) frees them as the window passes;
`unified_engine.py` runs requests through it in this thread.
The names below are the public API (docs/CONTRACTS.md); they load lazily, so `import engine`
does not import torch until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {  # name -> module
    "LoadedModel": "engine.model", "load_model": "engine.model",
    "KVPool": "engine.kv_pool", "ModelRunner": "engine.runner",
    "EngineService": "engine.service", "RequestHandle": "engine.service",
    "RequestResult": "engine.service", "RequestCancelled": "engine.service",
    "SamplingParams": "engine.sampling", "ZmqEventPublisher": "engine.kv_publisher",
    "Cluster": "engine.cluster", "ClusterConfig": "engine.cluster",
    "HostKVPool": "engine.hosttier", "HostTierScheduler": "engine.hosttier",
    "build_host_tier": "engine.hosttier", "ProcessService": "engine.procservice",
    "SWAKVPool": "engine.swa_pool", "UnifiedEngine": "engine.unified_engine",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
