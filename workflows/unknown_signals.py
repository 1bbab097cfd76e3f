"""Signals of names the run does not define: dropped, counted, and logged a few times a flood.

Without a handler, the SDK buffers such a signal in the worker's memory and does not wake the
run for it. A conversation waiting between turns then never sees Temporal's suggestion to
continue as new, and once 10,000 signals (the server's cap a run) have come, the server refuses
every signal: a person's `send_message`, `end_conversation`, `approve_plan` from the Web UI.
Dropped by a handler, each one wakes the waiting run, which hands on to a fresh run when Temporal
suggests it (workflows/conversation.py), and the fresh run takes signals again.

The handler is installed when the run first waits (for a person or for the next message), where
a flood can lock it: a run recorded before it (no `drops-unknown-signals` marker) buffered them,
and replays doing so. Deterministic: logging only.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import workflow
from temporalio.common import RawValue

from . import versioning
from .outcomes import bounded

LOG_GROWTH = 10
"""A flood is logged at its 1st dropped signal, then at its 10th, 100th, 1,000th...: a line a
tenfold, so 10,000 junk signals write five lines, not 10,000."""


class UnknownSignals:
    def __init__(self) -> None:
        self._asked = False
        self.dropped = 0
        """Signals of unknown names this run dropped."""
        self._next_log = 1

    def drop_while_waiting(self) -> None:
        """The run waits: from now on, drop the signals no handler takes (once a run)."""
        if self._asked:
            return
        self._asked = True
        if versioning.drops_unknown_signals():
            workflow.set_dynamic_signal_handler(self._drop)

    def _drop(self, name: str, args: Sequence[RawValue]) -> None:
        self.dropped += 1
        if self.dropped >= self._next_log:
            self._next_log = self.dropped * LOG_GROWTH
            workflow.logger.warning(
                "ignored a signal named %s: this run has no such signal (%d ignored so far; "
                "the next line at %d)",
                bounded(repr(name), 100),
                self.dropped,
                self._next_log,
            )
