"""The radix tree (SGLang 0.5.23's mem_cache), one concept a file, in the order a reader meets them:
key.py (RadixKey), node.py (TreeNode and the edge links), walk.py (the walk down the tree),
results.py (what the calls return), evict_policy.py (sort keys and heaps), unified.py (the
unified flavor), radix_cache.py (RadixCache), lifecycle.py (its request calls), snapshot.py
(TreeSnapshot, format_tree), invariants.py (the rules, checked), replay.py (TreeModel and
EventLog, fed by the cache's events). The host tier (radix/hosttier/) builds on the same key,
node, walk and split. Nothing is imported here: `radix` exports the public names.
"""
