"""What one model reply may ask for: a bounded number of calls, a bounded fan-out, bounded call
ids (issue 38). The model's output is untrusted input: a prompt injection writes it.

A reply of 2,100 read-only calls once wedged its run forever: Temporal refuses a workflow task
that would leave more than 2,000 activities pending, and the worker retried the task without
end. A delegate call whose id had about 1,000 characters made a sub-agent workflow id over
Temporal's bound, and every task of the parent failed until its wall-time budget ran out.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHistory

import tests.tools_for_tests as test_tools
from durable_agent.workflows.dispatch import MAX_CALL_ID_CHARS, MAX_CALLS_PER_REPLY
from durable_agent.workflows.inputs import Limits
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.tool_runner import MAX_CALLS_IN_FLIGHT
from tests.helpers import FAST_MODEL_RETRY, call, run_agent, scripted_input, turn


def most_in_flight(history: WorkflowHistory) -> int:
    """The most activities the run had scheduled and not yet closed, at any event."""
    pending, most = set(), 0
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            pending.add(event.event_id)
            most = max(most, len(pending))
        for ended in (
            event.activity_task_completed_event_attributes,
            event.activity_task_failed_event_attributes,
            event.activity_task_timed_out_event_attributes,
            event.activity_task_canceled_event_attributes,
        ):
            pending.discard(ended.scheduled_event_id)
    return most


async def test_a_reply_of_thousands_of_calls_runs_its_first_hundred_and_tells_the_model(
    client: Client, task_queue: str
) -> None:
    test_tools.executions.clear()
    calls = [call("count_me", id=f"c{n}", key=f"flood-{n}") for n in range(2_100)]
    script = [turn(*calls), turn(text="counted", expect="a reply may make at most 100 calls")]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["count_me"]))

    assert run.result is not None and run.result.answer == "counted"
    results = run.tool_results()
    assert len(results) == 2_100  # one result per call, in call order: the pairing rule
    ran = [n for n in range(2_100) if test_tools.executions.get(f"flood-{n}") == 1]
    assert ran == list(range(MAX_CALLS_PER_REPLY))
    assert results["c100"].startswith(
        "Error: not run: a reply may make at most 100 calls, and this is call 101 of 2100."
    )
    history = await run.handle.fetch_history()
    assert most_in_flight(history) <= MAX_CALLS_IN_FLIGHT


async def test_fifty_read_only_calls_run_at_most_the_bound_at_once(
    client: Client, task_queue: str
) -> None:
    calls = [call("count_me", key=f"fifty-in-flight-{n}") for n in range(50)]
    run = await run_agent(
        client, task_queue, scripted_input([turn(*calls), turn(text="ok")], tools=["count_me"])
    )

    assert run.result is not None
    assert all(record.outcome == "ok" for record in run.trace[0].tool_calls)
    history = await run.handle.fetch_history()
    assert MAX_CALLS_IN_FLIGHT // 2 < most_in_flight(history) <= MAX_CALLS_IN_FLIGHT


async def test_a_delegate_call_with_a_very_long_id_is_renamed_and_its_sub_agent_starts(
    client: Client, task_queue: str
) -> None:
    long_id = "x" * 1_000
    child = ModelSettings(
        provider="scripted", script=[turn(text="the sub-agent's answer")], retry=FAST_MODEL_RETRY
    )
    script: list[Any] = [
        turn(call("delegate", id=long_id, task="answer", tools=["count_me"])),
        turn(text="done", expect="the sub-agent's answer"),
    ]
    run = await run_agent(
        client,
        task_queue,
        scripted_input(
            script,
            tools=["count_me"],
            sub_agents=True,
            sub_agent_model=child,
            limits=Limits(max_wall_seconds=60),
        ),
    )

    assert run.result is not None and run.result.answer == "done"
    assert list(run.tool_results()) == ["call_1_1"]
    assert all(len(m.tool_call_id) <= MAX_CALL_ID_CHARS for m in run.transcript if m.role == "tool")
