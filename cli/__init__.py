"""The command line: `durable-agent` (and the checkout's starter.py and worker.py).

One concern per module; imports point one way, from the entries down to the plumbing, and out to
the library (client, serving, workflows), which never imports this package:

- `starter`: the `durable-agent` entry, which parses and hands each command over;
  `worker`: the worker command.
- `run`: start a run, follow it to its end and report it (self-contained or through --address).
- `conversation`: a conversation at the terminal (`chat`, `--conversation`) and the subcommands
  that carry one on (send, interrupt, end); `chat`: its dev server, in a session of its own.
- `decide`: a plan or a tool call that waits for a person, decided at the terminal or by a
  subcommand (approve, reject, approve-call, deny-call).
- `read`: the subcommands that only read (watch, status, calls, list, trace, stats).
- `fork`: a new run from a run's step K (fork), two runs compared (diff), and a label's runs
  forked with another model and scored (eval).
- `progress`: a run's progress as lines (steps, events, usage).
- `tables`: the trace and stats tables.
- `args`: the parser, and one typed, frozen object per command.
- `plumbing`: the one-line parser, stderr, the server address, exiting.
"""

from __future__ import annotations

if not __name__.startswith("durable_agent."):
    # This folder imported by a bare name from the checkout would load a second copy of each
    # module (a `@tool` registered through it would register nowhere).
    raise ImportError(f"this folder is durable_agent.{__name__}: import durable_agent.{__name__}")
