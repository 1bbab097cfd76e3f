"""Code mode survives SIGKILL: a worker killed while a script waits on its fifth call, or in
the middle of one of the script's legs, and the run finishes on a fresh worker with every call
run once, counted by the calls' own writes (tests/crash_worker.py's `note_call`), and the
script's work before the crash not done again (its legs before it not retried)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, CodeMode, Limits
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.transcript import Transcript
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

CALLS = 6


def code(path: Path) -> str:
    return (
        "done = []\n"
        f"for i in range(1, {CALLS + 1}):\n"
        f"    done.append(await note_call(path={str(path)!r}, label=f'call {{i}}'))\n"
        "print(', '.join(done))\n"
        "len(done)\n"
    )


def script_input(path: Path) -> AgentInput:
    return AgentInput(
        prompt="Note six calls.",
        tools=["note_call"],
        model=ModelSettings(
            provider="scripted",
            script=[
                turn(call("run_code", id="script_1", code=code(path))),
                turn(text="Six calls noted.", expect="call 6"),
            ],
            timeout_seconds=ATTEMPT_TIMEOUT.total_seconds(),
            retry=QUICK_RETRY,
        ),
        limits=Limits(max_steps=5),
        tool_approval=TRUSTED,
        code_mode=CodeMode(),
        # A leg lost with its worker is retried after a second's silence, not after 35 s.
        heartbeat_timeout_seconds=1.0,
    )


CRASHES = {
    # Four calls done; the fifth's activity starts on the doomed worker, which dies before the
    # tool's code runs.
    "waiting-on-its-fifth-call": ("before:note_call:5", "note_call"),
    # The sixth leg (after the fifth call) starts, and the worker dies in it.
    "in-a-leg": ("before:run_script:6", "run_script"),
    # The fourth leg ran to its next call; its result never reached the server.
    "after-a-leg": ("after:run_script:4", "run_script"),
}


@pytest.mark.parametrize("crash", CRASHES.values(), ids=CRASHES.keys())
async def test_a_script_resumes_on_another_worker_with_nothing_repeated(
    crash: tuple[str, str],
    client: Client,
    seeded_db: Path,  # noqa: F811
    processes: Processes,  # noqa: F811
    tmp_path: Path,
) -> None:
    crash_at, retried = crash
    db = tmp_path / "demo.db"
    db.write_bytes(seeded_db.read_bytes())
    notes = tmp_path / "notes.txt"
    input_ = script_input(notes)
    handle = await crashed_and_taken_over(client, processes, db, crash_at, input_, "code-crash")
    result = await handle.result()

    assert result.answer == "Six calls noted."
    # Each call wrote its line once: none was run again, the script did not start over.
    assert notes.read_text().splitlines() == [f"call {i}" for i in range(1, CALLS + 1)]
    transcript = await handle.query(AgentWorkflow.transcript)
    assert Transcript(messages=transcript).is_complete()
    script_result = next(m for m in transcript if m.role == "tool")
    assert script_result.content == ", ".join(f"call {i}" for i in range(1, CALLS + 1)) + "\n6"
    # What was lost with the worker ran again; the script's legs before it did not.
    assert await retried_activities(handle) == {retried}
