"""Forks: a run started from another run's step K, with the original's transcript read from its
history, none of steps 1..K's tools run again, and the original's side effects left alone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

import tests.tools_for_tests as test_tools
from durable_agent.client.agent_client import AgentClient, AgentRunFailed
from durable_agent.client.forking import (
    UNDONE_SINCE,
    ForkError,
    ForkStepOutOfRange,
    read_run,
    scripted_from,
)
from durable_agent.demo import tools as demo_tools
from durable_agent.demo.script import DEMO_PROMPT, support_demo_script
from durable_agent.encryption.payload_codec import PayloadKey, data_converter
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import AgentInput, AgentResult, Limits
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.usage import Usage
from tests import fake_openai
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, TRUSTED, call, scripted_input, turn

DEMO_TOOLS = ["search_orders", "get_order", "get_tracking", "get_customer"]
PROMPT = "where is order 1042"
SYSTEM = "You are the support agent of a small shop. Answer from the tools' data only."
MODEL = "gpt-fake-mini"
ANSWER = "Ada, order #1042 was delivered yesterday at 14:20 UTC."


def demo_replies() -> list[fake_openai.Reply]:
    """The demo run over OpenAI's wire: one call, then two, then the answer."""
    return [
        fake_openai.Reply(tool_calls=[("call_search", "search_orders", '{"email": "a@b.com"}')]),
        fake_openai.Reply(
            "Found order 1042; checking the customer and the parcel.",
            tool_calls=[
                ("call_cust", "get_customer", '{"email": "a@b.com"}'),
                ("call_track", "get_tracking", '{"order_id": 1042}'),
            ],
        ),
        fake_openai.Reply(ANSWER),
    ]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_openai.FakeOpenAI]:
    with fake_openai.FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


def tools_run(handle: WorkflowHandle[Any, Any]) -> Any:
    """The tool activities a run (its latest chain run) scheduled, by name."""

    async def read() -> list[str]:
        names = []
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                if name != "call_model":
                    names.append(name)
        return names

    return read()


async def test_a_fork_at_step_1_sends_the_originals_requests_byte_for_byte(
    client: Client, task_queue: str, fake: fake_openai.FakeOpenAI
) -> None:
    agents = AgentClient(client, task_queue)
    model = ModelSettings(provider="openai", model=MODEL, retry=FAST_MODEL_RETRY)
    fake.script += demo_replies()
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(
            AgentInput(prompt=PROMPT, system=SYSTEM, tools=DEMO_TOOLS, model=model)
        )
        assert (await original.result()).answer == ANSWER
        sent_by_original = [request.raw for request in fake.requests]
        assert len(sent_by_original) == 3

        # The same model gives the same replies from step 2 on.
        fake.script += demo_replies()[1:]
        forked = await agents.fork(original.id, step=1)
        result = await forked.result()

    assert result.answer == ANSWER
    # Steps 2 and 3, byte for byte: the same transcript through step 1 (the search's result as
    # the original's history held it), the same system prompt and tools. Step 1 is not asked.
    assert [request.raw for request in fake.requests[3:]] == sent_by_original[1:]
    assert fake.remaining == 0
    # None of step 1's calls ran again; the fork ran only its own steps' tools.
    assert await tools_run(forked.handle) == ["get_customer", "get_tracking"]
    assert result.steps == 3 and [r.step for r in result.step_records] == [2, 3]
    origin = result.forked_from
    assert origin is not None and origin.workflow_id == original.id and origin.step == 1
    assert origin.usage.input_tokens == (await original.result()).step_records[0].usage.input_tokens
    assert result.usage.input_tokens == sum(r.usage.input_tokens for r in result.step_records)
    description = await forked.handle.describe()
    assert await description.memo_value("forked_from") == {
        "workflow_id": original.id,
        "run_id": origin.run_id,
        "step": 1,
    }
    assert description.run_id != origin.run_id


async def test_a_failing_fork_does_not_undo_the_originals_side_effect(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    original_script = [
        turn(call("cancel_order", order_id=104999, reason="customer asked")),
        turn(text="Cancelled."),
    ]
    tools = ["cancel_order", "issue_refund", "count_me"]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(scripted_input(original_script, tools=tools))
        assert (await original.result()).answer == "Cancelled."
        assert demo_tools.get_order(104999)["status"] == "cancelled"

        # The fork refunds (its own effect), then runs out of steps and fails.
        forked = await agents.fork(
            original.id,
            step=1,
            model=ModelSettings(
                script=scripted_from(
                    1,
                    [
                        turn(call("issue_refund", order_id=1042, amount=10)),
                        turn(call("count_me", key=f"busy-{uuid.uuid4()}")),
                    ],
                ),
                retry=FAST_MODEL_RETRY,
            ),
            limits=Limits(max_steps=2),
            tool_approval=TRUSTED,
        )
        with pytest.raises(AgentRunFailed) as failed:
            await forked.result()

    assert failed.value.type == "AgentStepLimitExceeded"
    # Two steps of its own, counted from the fork point.
    assert "max_steps=2 reached: the run made 2 model calls" in failed.value.message
    compensations = failed.value.details.compensations
    assert [(c.tool, c.status) for c in compensations] == [("issue_refund", "completed")]
    assert demo_tools.get_order(1042)["refundable"]["amount"] == 129.99
    # The original's cancellation stands: the fork inherited it, and never undid it.
    assert demo_tools.get_order(104999)["status"] == "cancelled"
    recorded = await read_run(client, forked.id)
    assert recorded.input.fork is not None
    (inherited,) = recorded.input.fork.origin.effects
    assert inherited.call.tool == "cancel_order" and inherited.compensation == "reinstate_order"


async def test_a_fork_of_a_run_that_undid_its_effects_inherits_none_and_is_told(
    client: Client, task_queue: str
) -> None:
    """The original cancelled an order at step 1, then failed and reinstated it: a fork at step
    1 goes on in a world where the order stands, so it inherits no effect and its transcript
    says the cancellation was undone, while a fork of a run that kept its effect is told
    nothing."""
    agents = AgentClient(client, task_queue)
    original_script = [
        turn(call("cancel_order", order_id=104999, reason="customer asked")),
        turn(call("count_me", key=f"busy-{uuid.uuid4()}")),
    ]
    tools = ["cancel_order", "count_me"]
    fork_script = scripted_from(1, [turn(text="Seen.")])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(
            scripted_input(original_script, tools=tools, limits=Limits(max_steps=2))
        )
        with pytest.raises(AgentRunFailed) as failed:
            await original.result()
        assert [c.status for c in failed.value.details.compensations] == ["completed"]
        assert demo_tools.get_order(104999)["status"] != "cancelled"
        recorded = await read_run(client, original.id)
        origin = recorded.origin(1)
        assert origin.effects == [] and origin.undone == ["call_1_1"]
        forked = await agents.fork(
            original.id, step=1, model=ModelSettings(script=fork_script), tool_approval=TRUSTED
        )
        result = await forked.result()
        (told,) = [
            m for m in await forked.transcript() if getattr(m, "tool_call_id", "") == "call_1_1"
        ]
        assert told.content.endswith(UNDONE_SINCE) and told.content.count("[Undone since") == 1
        assert result.forked_from is not None and result.forked_from.undone == ["call_1_1"]

        # A run that kept its effect: the fork inherits it, and reads the result as it was.
        kept = await agents.start(
            scripted_input([original_script[0], turn(text="Cancelled.")], tools=tools)
        )
        await kept.result()
        kept_origin = (await read_run(client, kept.id)).origin(1)
        assert kept_origin.undone == [] and len(kept_origin.effects) == 1
        kept_fork = await agents.fork(
            kept.id, step=1, model=ModelSettings(script=fork_script), tool_approval=TRUSTED
        )
        await kept_fork.result()
        assert not any(
            UNDONE_SINCE in str(getattr(m, "content", "")) for m in await kept_fork.transcript()
        )


async def test_a_fork_of_a_run_that_continued_as_new(client: Client, task_queue: str) -> None:
    agents = AgentClient(client, task_queue)
    keys = [f"can-{uuid.uuid4()}" for _ in range(3)]
    script = [
        *(turn(call("count_me", key=key)) for key in keys),
        turn(text="counted: {last_tool_result}"),
    ]
    agent_input = scripted_input(script, tools=["count_me"], continue_as_new_after_steps=1)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(agent_input)
        answer = (await original.result()).answer
        description = await original.handle.describe()
        assert (
            description.run_id != description.raw_description.workflow_execution_info.first_run_id
        )
        before = dict(test_tools.executions)

        forked = await agents.fork(original.id, step=2)
        result: AgentResult = await forked.result()
        transcript = await forked.transcript()
        original_transcript = await original.transcript()

    assert answer == f"counted: {keys[2]} has run 1 times"
    assert result.answer == f"counted: {keys[2]} has run 2 times"  # the fork's own step 3
    # Steps 1 and 2 came from the chain's earlier runs; only step 3's call ran again.
    assert {key: test_tools.executions[key] - before[key] for key in keys} == {
        keys[0]: 0,
        keys[1]: 0,
        keys[2]: 1,
    }
    assert transcript[:5] == original_transcript[:5]  # the prompt, two calls and their results
    origin = result.forked_from
    assert origin is not None and origin.step == 2
    recorded = await read_run(client, original.id)
    assert origin.run_id == recorded.step(2).run_id  # type: ignore[union-attr]
    assert origin.run_id != recorded.first_run_id
    # The fork continued as new too (it has the original's continue_as_new_after_steps): its
    # later runs carry its state, and the seed goes on without its transcript.
    handed = [e async for e in forked.handle.fetch_history_events()]
    (continued,) = [
        e.workflow_execution_started_event_attributes.input
        for e in handed
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    ]
    next_input = (await client.data_converter.decode(continued.payloads, [AgentInput]))[0]
    assert next_input.carried is not None and next_input.fork.messages == []
    assert next_input.fork.origin == origin


async def test_a_step_past_the_last_is_refused_with_the_step_count(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(
            scripted_input([turn(call("count_me", key="k")), turn(text="ok")])
        )
        await original.result()
        with pytest.raises(ForkStepOutOfRange, match="had 2 steps") as refused:
            await agents.fork(original.id, step=3)
        assert isinstance(refused.value, ForkError)

        # Step 0 forks from the prompt: nothing is inherited.
        forked = await agents.fork(original.id, step=0, tool_approval=TRUSTED)
        result = await forked.result()
    assert result.answer == "ok" and result.steps == 2
    assert result.forked_from is not None and result.forked_from.usage == Usage()
    assert result.forked_from.effects == []


async def test_an_encrypted_run_forks_with_its_keys_and_not_without(
    client: Client, task_queue: str
) -> None:
    key = PayloadKey("fork-key", bytes(range(32)))
    encrypted = Client(client.service_client, data_converter=data_converter(keys=[key]))
    agents = AgentClient(encrypted, task_queue)
    async with build_worker(encrypted, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(scripted_input(support_demo_script(), prompt=DEMO_PROMPT))
        answer = (await original.result()).answer
        forked = await agents.fork(original.id, step=2)
        result = await forked.result()
    assert result.answer == answer and [r.step for r in result.step_records] == [3]
    with pytest.raises(ForkError, match="cannot be read here"):
        await read_run(client, original.id)  # this client has no key


async def test_a_fork_of_a_fork_inherits_from_both(client: Client, task_queue: str) -> None:
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(scripted_input(support_demo_script(), prompt=DEMO_PROMPT))
        answer = (await original.result()).answer
        first = await agents.fork(original.id, step=1)
        first_result = await first.result()
        second = await agents.fork(first.id, step=2)
        result = await second.result()
        with pytest.raises(ForkError, match=f"is a fork of {original.id} at step 1"):
            await agents.fork(first.id, step=0)

    assert result.answer == answer and [r.step for r in result.step_records] == [3]
    assert first_result.forked_from is not None and result.forked_from is not None
    assert result.forked_from.workflow_id == first.id and result.forked_from.step == 2
    # Step 1 as the original paid for it, step 2 as the first fork did.
    step_2 = first_result.step_records[0].usage
    assert result.forked_from.usage == first_result.forked_from.usage + step_2
