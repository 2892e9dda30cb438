"""Scenario workloads (workloads.py) and ready trace files (traces/); see generate.py."""
