"""A fork's start: the state of a run that begins with another run's transcript through step K.

The transcript is read from the original's history on the client side (forking.py) and arrives
in the input as a `ForkSeed`, so nothing here does I/O. The fork's steps are numbered on from K,
so its trace and the original's line up; its limits count from K; its usage and its
compensation log start empty, since the original paid for steps 1..K and their side effects are
the original's (listed as inherited in the result, never undone here). Its plan is the one a
person decided in steps 1..K, if any: a person's approval there stands, as the transcript says.
"""

from __future__ import annotations

from datetime import datetime

from .inputs import AgentInput, ForkSeed
from .state import RunState
from .transcript import AssistantMessage, Transcript


def seeded_state(seed: ForkSeed, started_at: datetime) -> RunState:
    """The state a fork starts in: the seed's transcript (checked by the pairing rule), its
    step count, its plan, and the call ids it holds, so that a new call never reuses one."""
    state = RunState.start(started_at)
    state.messages = Transcript(messages=list(seed.messages)).messages
    state.steps = seed.origin.step
    # A seed recorded before forks kept their plan has none: such a fork starts as it did.
    state.plan = seed.plan
    state.call_ids = [
        call.id
        for message in state.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    ]
    return state


def inherited_steps(agent_input: AgentInput) -> int:
    """The steps a run did not make itself: its limits count from there."""
    return 0 if agent_input.fork is None else agent_input.fork.origin.step
