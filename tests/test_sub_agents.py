"""Sub-agents: a subtask in a child workflow with a fresh context; only its conclusion returns,
its spending counts against the parent, and a failing parent undoes the child's effects too."""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client

from durable_agent.activities.providers.scripted import recorded_requests
from durable_agent.demo import tools as demo_tools
from durable_agent.workflows.inputs import Limits
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.usage import Usage
from tests.helpers import FAST_MODEL_RETRY, call, run_agent, scripted_input, turn

TASK = "Cancel order 104999 (the customer asked) and say what happened."


def child_model(*turns: object) -> ModelSettings:
    return ModelSettings(provider="scripted", script=list(turns), retry=FAST_MODEL_RETRY)


@pytest.mark.usefixtures("scripted_requests")
async def test_the_parent_sees_only_the_conclusion_and_pays_for_it(
    client: Client, task_queue: str
) -> None:
    child = child_model(
        turn(call("cancel_order", order_id=104999, reason="asked"), usage=Usage(input_tokens=700)),
        turn(text="Order 104999 is cancelled.", usage=Usage(input_tokens=900)),
    )
    script = [
        turn(call("delegate", task=TASK, tools=["cancel_order"]), usage=Usage(input_tokens=100)),
        turn(text="Done: the sub-agent cancelled it.", expect="104999 is cancelled"),
    ]
    agent_input = scripted_input(
        script, tools=["get_order", "cancel_order"], sub_agents=True, sub_agent_model=child
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None
    assert run.tool_results()["call_1_1"] == "Order 104999 is cancelled."
    # Fresh context: the child's first request held only the task.
    child_id = f"{run.handle.id}/call_1_1"
    first_child_request = recorded_requests(child_id)[0]
    assert [m.content for m in first_child_request.messages] == [TASK]
    assert [t.name for t in first_child_request.tools] == ["cancel_order", "finish"]
    # The parent's transcript has none of the child's steps; its usage has the child's tokens.
    assert len(run.transcript) == 4
    assert (
        run.result.usage.input_tokens
        == 100 + 700 + 900 + run.result.step_records[1].usage.input_tokens
    )
    assert [e.call.tool for e in run.result.side_effects] == ["cancel_order"]
    assert demo_tools.get_order(104999)["status"] == "cancelled"


async def test_a_parent_at_its_limit_undoes_the_childs_side_effects(
    client: Client, task_queue: str
) -> None:
    child = child_model(
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(text="Order 104999 is cancelled."),
    )
    script = [
        turn(call("delegate", task=TASK)),
        turn(call("get_order", order_id=104999)),
        turn(call("get_order", order_id=1042)),
        turn(text="never"),
    ]
    agent_input = scripted_input(
        script,
        tools=["get_order", "cancel_order"],
        sub_agents=True,
        sub_agent_model=child,
        # The sub-agent's two steps come out of these three.
        limits=Limits(max_steps=3),
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentStepLimitExceeded"
    compensations = run.failure.details[0]["compensations"]
    assert [(c["tool"], c["status"]) for c in compensations] == [("cancel_order", "completed")]
    assert demo_tools.get_order(104999)["status"] == "processing"


async def test_a_failed_sub_agent_is_an_error_result_and_its_cost_still_counts(
    client: Client, task_queue: str
) -> None:
    child = child_model(
        turn(call("count_me", key="child-a"), usage=Usage(input_tokens=400)),
        turn(call("count_me", key="child-b"), usage=Usage(input_tokens=400)),
    )
    script = [
        turn(call("delegate", task="count things")),
        turn(text="The sub-agent gave up.", expect="the sub-agent failed"),
    ]
    agent_input = scripted_input(
        script,
        tools=["count_me"],
        sub_agents=True,
        sub_agent_model=child,
        limits=Limits(max_steps=2),
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None
    message = run.tool_results()["call_1_1"]
    assert message.startswith("Error: the sub-agent failed: AgentStepLimitExceeded")
    assert run.result.usage.input_tokens >= 800


@pytest.mark.usefixtures("scripted_requests")
async def test_a_sub_agent_gets_no_tool_its_parent_lacks_and_only_the_steps_left(
    client: Client, task_queue: str
) -> None:
    """A run given only get_order cannot reach issue_refund through a sub-agent, and the
    sub-agent's step limit is what its parent has left."""
    child = child_model(turn(text="Looked: it is on its way."))
    script = [
        turn(call("delegate", task="Refund order 1042.", tools=["issue_refund"])),
        turn(call("delegate", task="Look up order 1042.")),
        turn(text="Done."),
    ]
    agent_input = scripted_input(
        script,
        tools=["get_order"],
        sub_agents=True,
        sub_agent_model=child,
        limits=Limits(max_steps=5),
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None
    refused = run.tool_results()["call_1_1"]
    assert refused.startswith("Error: a sub-agent can only use tools this run has (get_order)")
    assert "not issue_refund" in refused
    assert demo_tools.get_order(1042)["refundable"]["amount"] == 129.99
    # The second sub-agent started at the parent's step 2: 5 - 2 = 3 steps were left for it.
    child_id = f"{run.handle.id}/call_2_1"
    first_child_request = recorded_requests(child_id)[0]
    assert [t.name for t in first_child_request.tools] == ["get_order", "finish"]
    history = await client.get_workflow_handle(child_id).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    child_input = json.loads(started.input.payloads[0].data)
    assert child_input["limits"]["max_steps"] == 3


async def test_a_sub_agent_starts_with_its_status_set_and_sends_no_first_upsert(
    client: Client, task_queue: str
) -> None:
    """The parent starts its sub-agent with AgentStatus running, AgentStep 0 and AgentCostUsd 0,
    as AgentClient starts a run: the sub-agent's first status upsert is not sent (one event,
    and a Temporal Cloud action, a sub-agent)."""
    child = child_model(
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(text="Order 104999 is cancelled."),
    )
    script = [
        turn(call("delegate", task=TASK, tools=["cancel_order"])),
        turn(text="Done.", expect="104999 is cancelled"),
    ]
    agent_input = scripted_input(
        script, tools=["cancel_order"], sub_agents=True, sub_agent_model=child
    )
    run = await run_agent(client, task_queue, agent_input)
    assert run.result is not None and run.result.answer == "Done."
    history = await client.get_workflow_handle(f"{run.handle.id}/call_1_1").fetch_history()
    upserts = [
        sorted(
            e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        )
        for e in history.events
        if e.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    ours = [fields for fields in upserts if fields != ["TemporalChangeVersion"]]
    # Only its end: running, step 0 and cost 0 were set when the parent started it.
    assert ours == [["AgentCostUsd", "AgentStatus", "AgentStep"]], upserts
    started = history.events[0].workflow_execution_started_event_attributes.search_attributes
    assert json.loads(started.indexed_fields["AgentStatus"].data) == "running"
