"""The server runtime: what the runs (scenarios/) and the pages share and no run defines.

A bounded worker pool with a queue a page can show (jobs), the memory budgets of one browser
session and of the whole process (budget), and the registry of what each browser session keeps
running (sessions). It imports radix/ only (the trace limits a budget sets); scenarios/ and
pages/ import it, never the reverse. Leaves out: the runs themselves (scenarios/).
"""
