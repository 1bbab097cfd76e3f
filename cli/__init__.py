"""The command line: `python starter.py` (and `durable-agent`), and the plumbing `worker.py` uses.

- `tables`: the trace and stats tables.
- `plumbing`: the one-line parser, stderr, the server address, exiting.

This module re-exports nothing: worker.py imports `cli.plumbing`, and what this package imports
on the run side imports worker.py back.
"""
