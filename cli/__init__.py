"""The command line: `durable-agent` (and the checkout's starter.py and worker.py), declared with
click, its tables laid out by rich. Imports point one way, from the entries down to `args`, and
out to the library, which never imports this package. Every command line of the project (these,
the codec server's, the benchmarks') is parsed by serving/command_line.py: one-line errors,
stderr, exiting.

- `starter`: the entry, which parses and hands each command over; `worker`: the worker command;
  `contract`: the wire contract; `serve`: the HTTP API.
- `args`: the run's options and their rules (`RunArgs`), `@subcommand`, and the command's name
  as it was typed (`program`).
- `run`: start a run, follow it and report it; `result`.
- `conversation`: a conversation's turns followed, and send, interrupt, end.
- `terminal/`: a person at this terminal, typing: the lines read as they come and Ctrl-C, a
  decision typed, and `chat`, a conversation held there.
- `decide`: a plan or a tool call that waits for a person; approve, reject, approve-call,
  deny-call.
- `read`: watch, status, calls, list, trace, stats. `fork`: fork, diff, eval.
- `tables`: what is printed of runs: progress lines and tables.
"""

from __future__ import annotations

if not __name__.startswith("durable_agent."):
    # This folder imported by a bare name from the checkout would load a second copy of each
    # module (a `@tool` registered through it would register nowhere).
    raise ImportError(f"this folder is durable_agent.{__name__}: import durable_agent.{__name__}")
