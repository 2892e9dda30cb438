"""Token sequences: `Tokens`, the one kind, made by `tokens(seq)`; it is stored as runs of
consecutive ints or as a plain list (SGLang's own kind: its RadixKey.token_ids is a List[int]),
a representation choice inside the one name.

A Mooncake hash id h stands for the 512 tokens h*512 .. h*512+511, so a 40,000-token prompt is a
handful of runs, not 40,000 Python ints: `TokenRuns` (runs.py) keeps those; real token ids (a
request trace, a tokenizer's output) are a list. `tokens(seq)` picks one and hands back what is
`Tokens` already unchanged, so a sequence is converted once where it comes in (a trace line,
a request) and then passed on as the same object, or a slice of it: `TraceRequest.token_ids`,
`Req.origin_input_ids` and `all_ids`, `RadixKey.token_ids`, the tree's node keys, the events'
`token_ids`, the block hashing input. `RunList` is TokenRuns' mutable sibling for a request's
growing rows (output_ids, slot_ids), with the helpers that compare and join either kind and the
common-prefix walks that the tree and both kinds share (KV slots are handed out as runs by
radix/request.py's SlotAllocator(runs=True)).

A `Tokens` list is never mutated once made: it is shared, not copied (a trace's prompt is the
same object in the Req, the tree's node key and the NodeInserted event), so an append to it
would change all of them. It is a list and not a tuple for speed alone (no copy for callers
that pass lists, list + list joins and list compares are the fastest in CPython). Who owns
mutable rows: a Req its `output_ids` and `slot_ids`, the tree each node's `value` (slots,
cut by split_edge), the block managers their own hash lists; nothing else appends. Guards:
`Req.all_ids` hands out the prompt itself only while there is no output (else a fresh list
of both), and `TraceRequest`, which holds it, is never hashed (`__hash__` is None).

Kinds kept at the edges on purpose, each for its reason:
- mutable rows, `list` (or `RunList`): a request's output_ids and slot_ids grow token by token
  (SGLang's req_to_token row); `all_ids` joins them to the prompt as `Tokens`.
- `range`: a plain trace's synthetic reply (radix/traces/trace.py `output_tokens`), never built
  as a list; it is appended to output_ids token by token.
- `array('q')` and numpy arrays: storage and arithmetic, not identity: a log's compacted event
  (scenarios/trace.py `compact`, 8 bytes a token), the block views and hash-id arrays of
  scenarios/ (vectorised), the differential tools' SGLang stand-ins (tools/).
- torch tensors: the model's input in engine/ (converted where a batch is built).
- text: what a page or pretty_print shows (a tokenizer's decode), never compared.
Follows nothing upstream. Leaves out: per-token storage of compact ids.
"""

from radix.tokens.runs import (
    RunList,
    TokenRuns,
    Tokens,
    common_prefix,
    common_prefix_from,
    head,
    is_compact,
    joined,
    mutable_copy,
    tokens,
)

__all__ = ["RunList", "TokenRuns", "Tokens", "common_prefix", "common_prefix_from", "head",
           "is_compact", "joined", "mutable_copy", "tokens"]
