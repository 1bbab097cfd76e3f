"""Where a step leaves the run: a small union of tiny types, one for each way on.

Each step of the loop (agent.py) ends in one of them, and `AgentWorkflow._loop` alone
dispatches them, matching exhaustively: run again, a turn ended, wait for the next turn, hand on
(continue as new), finished. A failure is not one of them: it is an `AgentError` raised. Pure
data.
"""

from __future__ import annotations

from dataclasses import dataclass

from .inputs import AgentResult
from .state import TurnOutcome


@dataclass(frozen=True)
class RunAgain:
    """The step is done; the next one calls the model."""


@dataclass(frozen=True)
class TurnEnded:
    """The model answered (or, in a conversation, the turn was interrupted or hit its step
    limit): a run ends here, a conversation records the turn."""

    outcome: TurnOutcome
    answered: AgentResult | None = None


@dataclass(frozen=True)
class WaitForTurn:
    """A conversation waits, spending nothing, for the next message."""


@dataclass(frozen=True)
class HandOn:
    """Continue as new, at a step boundary or between turns."""


@dataclass(frozen=True)
class Finished:
    result: AgentResult


NextStep = RunAgain | TurnEnded | WaitForTurn | HandOn | Finished
