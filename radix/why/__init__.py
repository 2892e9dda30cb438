"""Why did this prompt miss? Two prompts compared token by token, with what each cache does.

`diff.py` finds where two token streams part and shows the text around it; `caches.py` runs the
pair through the real RadixCache and BlockCacheManager; `causes.py` and `structure.py` hold one
small detector per known cause; `report.py` puts them together; `inputs.py` reads prompts.
Pure Python: a tokenizer comes in as a `Codec` (engine/why.py wraps Hugging Face's).
"""
