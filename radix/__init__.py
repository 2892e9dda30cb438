"""RadixLens's model of LLM prefix caches: pure Python, deterministic, no torch, no streamlit.

`RadixCache` follows SGLang's radix tree (python/sglang/srt/mem_cache/radix_cache.py);
`BlockPool` follows vLLM v1's block-hash prefix cache. Every mutation is emitted as an event.
"""
