"""The teaching and debugging runs: build caches, drive them, hand back logs and snapshots.

Each module is one run the app shows: the Tour's walks (tour), the eviction question (eviction),
the scheduler's queue sort and cold burst (scheduler), a live engine session (live, with its text
prompts in chats), a replayed trace (trace), the four server configurations (configs); jobs and
budget bound the work and memory a browser session may take. Pictures and words live in viz/,
which never imports this package (nor this package viz/); pages wire the two together.
"""
