"""A fork's start: the state of a run that begins with another run's transcript through step K.

The transcript is read from the original's history on the client side (forking.py) and arrives
in the input as a `ForkSeed`, so nothing here does I/O. The fork's steps are numbered on from K,
so its trace and the original's line up; its limits count from K; its usage and its
compensation log start empty, since the original paid for steps 1..K and their side effects are
the original's (listed as inherited in the result, never undone here). Its plan is the one a
person decided in steps 1..K, if any: a person's approval there stands, as the transcript says.

A fork inside step K's script (`origin.call`) starts one step earlier, after step K - 1's
results: its step K is the original's reply, given rather than asked for (the original paid for
it), whose run_code script then resumes where the seed says (code_mode.py). Its limits count
from K all the same.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

from .activity_io import ModelResponse
from .inputs import AgentInput, ForkSeed
from .state import RunState
from .transcript import AssistantMessage, Transcript
from .usage import Usage

GIVEN_STEP_PAUSE = timedelta(milliseconds=1)
"""What a fork inside a script waits before its given step: a workflow task of its own."""


def seeded_state(seed: ForkSeed, started_at: datetime) -> RunState:
    """The state a fork starts in: the seed's transcript (checked by the pairing rule), its
    step count, its plan, and the call ids it holds, so that a new call never reuses one."""
    state = RunState.start(started_at)
    state.messages = Transcript(messages=list(seed.messages)).messages
    state.steps = seed.origin.step - (1 if seed.script is not None else 0)
    # A seed recorded before forks kept their plan has none: such a fork starts as it did.
    state.plan = seed.plan
    state.call_ids = [
        call.id
        for message in state.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    ]
    return state


async def given_reply(agent_input: AgentInput, steps: int) -> ModelResponse | None:
    """A fork inside a script: its first step's reply, the original's, which the model is not
    asked for and which costs the fork nothing; None for any other step, and any other run.

    The step starts in a workflow task of its own, after a 1 ms timer. Without it, the step
    follows the result of the tools' local activity (run_setup.py) in one activation, and a query
    that came while that activity ran makes the server close the task early and the result
    arrive in the next one. A patch the step asks (the first wait for a person asks
    `drops-unknown-signals`) would then replay in the first task, before its marker is known:
    a nondeterminism error (tests/test_code_mode_fork.py replays a fork that waits)."""
    seed = agent_input.fork
    if seed is None or seed.script is None or steps != seed.origin.step - 1:
        return None
    await workflow.sleep(GIVEN_STEP_PAUSE)
    return ModelResponse(
        message=seed.script.reply,
        usage=Usage(),
        model=agent_input.model.model,
        finish_reason="tool_calls",
    )


def inherited_steps(agent_input: AgentInput) -> int:
    """The steps a run did not make itself: its limits count from there."""
    return 0 if agent_input.fork is None else agent_input.fork.origin.step
