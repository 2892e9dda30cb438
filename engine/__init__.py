"""RadixLens's engine: real inference through the caches of `radix/` (the only torch code).

`model.py` loads a Llama-architecture model (default SmolLM2-135M-Instruct from its GGUF),
`kv_pool.py` holds K/V rows by slot id, `runner.py` runs prefill of unmatched suffixes and batched
decode over them, `scheduler.py` is the continuous-batching loop, `service.py` runs it in a
background thread, `sim.py` prices steps with a cost model instead. `python -m engine run TRACE`.
"""
