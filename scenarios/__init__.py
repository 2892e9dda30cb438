"""The teaching and debugging runs: build caches, drive them, hand back logs and snapshots.

Each module is one run the app shows: the Tour's walks (tour), the eviction question (eviction),
the scheduler's queue sort and cold burst (scheduler), a live engine session (live, with its text
prompts in chats), a replayed trace (trace), the four server configurations (configs), a
classroom's rooms (room, classroom, changes, classload). The server runtime they run in (the
worker pool, the memory budgets, the session registry) is the package below, runtime/.
Pictures and words live in viz/, which never imports this package (nor this package viz/);
pages wire the two together.
"""
