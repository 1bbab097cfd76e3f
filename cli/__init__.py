"""The command line: `python starter.py` (and `durable-agent`), and the plumbing `worker.py` uses.

One concern per module; imports point one way, from the top of this list down to the plumbing,
and out to agent_client, worker and workflows.models (never back to starter):

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

This module re-exports nothing: worker.py imports `cli.plumbing`, and importing the run side here
would import worker.py back while it is still loading.
"""
