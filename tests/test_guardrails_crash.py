"""A crash cannot skip a guardrail (issue 51): a worker SIGKILLed in the middle of a check, or
after the check but before its verdict reached the server, and the check runs again on a fresh
worker before anything it guards goes ahead: the tripped input stops the step's call (counted by
the call's own writes), the tripped result never reaches the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError

import tests.guardrails_for_tests as guards
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.guardrail_data import GuardrailPolicy
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings
from tests.helpers import TRUSTED, call, turn
from tests.test_crash_safety import (  # noqa: F401  (fixtures)
    ATTEMPT_TIMEOUT,
    QUICK_RETRY,
    Processes,
    crashed_and_taken_over,
    processes,
    retried_activities,
    seeded_db,
)


def guarded_input(notes: Path, prompt: str, guardrails: GuardrailPolicy) -> AgentInput:
    return AgentInput(
        prompt=prompt,
        tools=["note_call", "read_note"],
        model=ModelSettings(
            provider="scripted",
            script=[
                turn(call("note_call", path=str(notes), label="ran"), call("read_note", key="k")),
                turn(text="Done."),
            ],
            timeout_seconds=ATTEMPT_TIMEOUT.total_seconds(),
            retry=QUICK_RETRY,
        ),
        limits=Limits(max_steps=5),
        tool_approval=TRUSTED,
        guardrails=guardrails.model_copy(update={"timeout_seconds": 2.0}),
    )


CRASHES = {
    # The prompt is the injection: the worker dies while the input check runs beside the model
    # call; the check runs again on the fresh worker, trips, and the reply's calls never run.
    "in-an-input-check": (
        "before:guardrail:no_injection",
        guards.INJECTION,
        GuardrailPolicy(input=["no_injection"]),
    ),
    # The result check ran and its verdict was lost with the worker: it runs again, and the
    # result is still withheld.
    "after-a-result-check": (
        "after:guardrail:no_secrets",
        "read note k",
        GuardrailPolicy(tool_results=["no_secrets"]),
    ),
}


@pytest.mark.parametrize("crash", CRASHES.values(), ids=CRASHES.keys())
async def test_a_check_lost_with_its_worker_runs_again_before_what_it_guards(
    crash: tuple[str, str, GuardrailPolicy],
    client: Client,
    seeded_db: Path,  # noqa: F811
    processes: Processes,  # noqa: F811
    tmp_path: Path,
) -> None:
    crash_at, prompt, guardrails = crash
    db = tmp_path / "demo.db"
    db.write_bytes(seeded_db.read_bytes())
    notes = tmp_path / "notes.txt"
    input_ = guarded_input(notes, prompt, guardrails)
    handle = await crashed_and_taken_over(client, processes, db, crash_at, input_, "guard-crash")
    check = crash_at.split(":", 1)[1]
    if prompt == guards.INJECTION:
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        assert "input guardrail no_injection tripped" in str(failed.value.cause)
        assert not notes.exists(), "a call of the discarded reply ran"
    else:
        result = await handle.result()
        assert result.answer == "Done."
        assert notes.read_text().splitlines() == ["ran"]
        transcript = await handle.query(AgentWorkflow.transcript)
        assert guards.SECRET not in "".join(m.content or "" for m in transcript)
    assert check in await retried_activities(handle)
