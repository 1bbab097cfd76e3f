"""What an operator reads about a run without the browser (issue 23): the static summary in
`temporal workflow describe`, the handlers' descriptions in `temporal workflow metadata`, the
priced run found by a list query on AgentCostUsd, AgentStep and AgentCostUsd exact once the run
waits and once it ended, a sub-agent's cost in its parent's, a failure's type in AgentError, and
a refused update that says why in one line, without a stack trace."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

import tests.guardrails_for_tests as guards
from durable_agent.activities.pricing import DEMO_PRICE
from durable_agent.client.agent_client import AgentClient, AgentRun, AgentRunFailed
from durable_agent.encryption.payload_codec import ENCODING, PayloadKey, data_converter
from durable_agent.serving.dev_server import temporal_binary
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.guardrail_data import GuardrailPolicy
from durable_agent.workflows.inputs import AgentInput, Limits, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings, ScriptedTurn
from durable_agent.workflows.refusals import REFUSED
from durable_agent.workflows.status import AGENT_COST_USD, AGENT_ERROR, AGENT_STATUS, AGENT_STEP
from durable_agent.workflows.usage import Usage
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, call, eventually, turn

STEP_USAGE = Usage(input_tokens=500_000, output_tokens=100_000)
"""At the demo's made-up price ($1 in, $4 out per million): $0.90 a step."""
PROMPT = "Cancel order 1042: it arrived damaged.\nThe customer is a@b.com."


def priced(*turns: ScriptedTurn) -> ModelSettings:
    return ModelSettings(script=list(turns), price=DEMO_PRICE, retry=FAST_MODEL_RETRY)


def waiting_run_input(label: str) -> AgentInput:
    """A run that spends two priced steps, then waits for a person on cancel_order."""
    return AgentInput(
        prompt=PROMPT,
        label=label,
        tools=["get_order", "cancel_order"],
        model=priced(
            turn(call("get_order", order_id=1042), usage=STEP_USAGE),
            turn(call("cancel_order", order_id=1042, reason="arrived damaged"), usage=STEP_USAGE),
            turn(text="Order 1042 is cancelled.", usage=STEP_USAGE),
        ),
        limits=Limits(max_steps=5),
    )


async def temporal_cli(env: WorkflowEnvironment, *args: str) -> str:
    """The `temporal` CLI, as an operator runs it, against the session's dev server."""
    address = env.client.service_client.config.target_host
    process = await asyncio.create_subprocess_exec(
        temporal_binary(),
        *args,
        "--address",
        address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def attributes(run: AgentRun) -> dict[str, Any]:
    described = await run.handle.describe()
    return {key.name: value for key, value in described.typed_search_attributes}


async def waits(run: AgentRun) -> bool:
    return (await run.status()).status == "awaiting_approval"


async def test_describe_metadata_and_a_list_query_on_cost_show_what_a_run_is(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    label = f"web-ui-{uuid.uuid4().hex[:8]}"
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(waiting_run_input(label))
        unpriced = await agents.start(
            AgentInput(prompt="say hi", label=label, model=ModelSettings(script=[turn(text="hi")]))
        )
        await eventually(lambda: waits(run), what="the run waits for a person")
        await unpriced.result()

        # The summary names the kind of task and the prompt's first line; the details the model,
        # the limits and the tools offered.
        described = await temporal_cli(temporal_env, "workflow", "describe", "-w", run.id)
        assert f'StaticSummary  "{label}: Cancel order 1042: it arrived damaged."' in described
        assert "`scripted` `scripted`" in described and "made-up price" in described
        assert "5 steps" in described and "`get_order`, `cancel_order`" in described

        # Every handler a person uses says what it takes.
        metadata = await temporal_cli(temporal_env, "workflow", "metadata", "-w", run.id)
        for handler, words in {
            "approve_plan": "Approve the plan that waits",
            "reject_plan": "Reject the plan that waits",
            "decide_plan": '{"approve": true, "version": 1}',
            "decide_tool_call": '{"call_id": "call_2_1", "approve": true}',
            "sub_agent_approvals": "not by people",
        }.items():
            # (decide_tool_call is a signal and an update: two lines)
            lines = [x for x in metadata.splitlines() if x.strip().startswith(f"{handler} ")]
            assert any(words in line for line in lines), (handler, metadata)
        # The current details say what waits, with the arguments to read and the input to paste.
        assert '`{"order_id": 1042, "reason": "arrived damaged"}`' in metadata
        assert '`{"call_id": "call_2_1", "approve": true}`' in metadata
        assert "Steps done: 2 · cost so far: \\$1.8000" in metadata

        # Waiting, the list shows the exact step and cost.
        shown = await attributes(run)
        assert shown["AgentStatus"] == "awaiting_approval" and shown["AgentStep"] == 2
        assert shown["AgentCostUsd"] == pytest.approx(1.8)

        async def listed() -> list[str]:
            out = await temporal_cli(
                temporal_env,
                "workflow",
                "list",
                "--query",
                # docs/web-ui.md's "most expensive" list
                "AgentCostUsd > 1 AND ParentWorkflowId IS NULL",
            )
            return [line.split()[1] for line in out.splitlines()[1:] if line.strip()]

        await eventually(lambda: _has(listed, run.id), what="the priced run in the list")
        assert unpriced.id not in await listed()
        assert AGENT_COST_USD.name not in await attributes(unpriced)

        await run.decide_tool_call("call_2_1", approve=True)
        result = await run.result()

    # Ended: exact again, whatever the schedule while it ran.
    ended = await attributes(run)
    assert ended[AGENT_STATUS.name] == "completed" and ended[AGENT_STEP.name] == result.steps == 3
    assert result.usage.cost_usd is not None
    assert ended[AGENT_COST_USD.name] == pytest.approx(result.usage.cost_usd) == 2.7


async def _has(listed: Any, workflow_id: str) -> bool:
    return workflow_id in await listed()


async def test_a_refused_update_says_why_in_one_line_and_without_a_stack_trace(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(waiting_run_input("refusals"))
        await eventually(lambda: waits(run), what="the run waits for a person")
        refusals = []
        for decide in (
            run.decide_tool_call("call_9_9", approve=True),
            run.approve_plan(),
        ):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await decide
            refusals.append(refused.value.cause)

        # A signal cannot be refused to its sender: the run's page says it was ignored, and why.
        await run.handle.signal("decide_tool_call", {"call_id": "call_7_7", "approve": True})

        async def said_ignored() -> bool:
            metadata = await temporal_cli(temporal_env, "workflow", "metadata", "-w", run.id)
            return (
                "**A decision sent by signal was ignored**: no tool call 'call\\_7\\_7'" in metadata
            )

        await eventually(said_ignored, what="the ignored signal on the run's page")
        await run.decide_tool_call("call_2_1", approve=False, reason="keep it")
        await run.result()

    unknown, no_plan = refusals
    for error in refusals:
        assert isinstance(error, ApplicationError) and error.type == REFUSED
        assert error.non_retryable and "\n" not in error.message
        assert error.failure is not None and error.failure.stack_trace == ""
    assert unknown.message == (
        "no tool call 'call_9_9' asked for approval in this run (waiting: call_2_1)"
    )
    assert no_plan.message.startswith("no plan is waiting for a decision (the run is ")


async def test_a_failed_run_names_its_error_and_a_sub_agents_cost_counts_in_its_parents(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    child = priced(
        turn(call("get_order", order_id=1042), usage=STEP_USAGE),
        turn(text="Order 1042 is on its way.", usage=STEP_USAGE),
    )
    parent = AgentInput(
        prompt="Where is order 1042?",
        tools=["get_order"],
        sub_agents=True,
        sub_agent_model=child,
        model=priced(
            turn(
                call("delegate", task="Look order 1042 up.", tools=["get_order"]), usage=STEP_USAGE
            ),
            turn(call("get_order", order_id=1042), usage=STEP_USAGE),
            turn(call("get_order", order_id=1042), usage=STEP_USAGE),
        ),
        # The parent runs out of steps after its sub-agent (given the 2 it has left) ended.
        limits=Limits(max_steps=3),
        tool_approval=ToolApprovalPolicy(approve_all=True),
    )
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(parent)
        with pytest.raises(AgentRunFailed) as failed:
            await run.result()
    assert failed.value.type == "AgentStepLimitExceeded"
    shown = await attributes(run)
    assert shown[AGENT_STATUS.name] == "failed"
    assert shown[AGENT_ERROR.name] == "AgentStepLimitExceeded"
    # Three steps of its own and two of its sub-agent's, at $0.90 each.
    assert shown[AGENT_COST_USD.name] == pytest.approx(4.5)
    child_shown = await attributes(agents.run(f"{run.id}/call_1_1"))
    assert child_shown[AGENT_COST_USD.name] == pytest.approx(1.8)

    # docs/web-ui.md's "failed at a limit" list finds it.
    async def failed_at_a_limit() -> bool:
        query = 'AgentError IN ("AgentStepLimitExceeded", "AgentBudgetExceeded")'
        out = await temporal_cli(temporal_env, "workflow", "list", "--query", query)
        return run.id in out

    await eventually(failed_at_a_limit, what="the failed run in the list")


async def test_with_keys_the_summary_and_details_are_ciphertext(
    client: Client, task_queue: str
) -> None:
    keys = [PayloadKey("web-ui", bytes(range(32)))]
    encrypted = Client(
        client.service_client, namespace=client.namespace, data_converter=data_converter(keys=keys)
    )
    agents = AgentClient(encrypted, task_queue)
    label = f"secret-label-{uuid.uuid4().hex[:8]}"
    async with build_worker(encrypted, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(
            AgentInput(prompt=PROMPT, label=label, model=ModelSettings(script=[turn(text="hi")]))
        )
        await run.result()
    history = await client.get_workflow_handle(run.id).fetch_history()
    metadata = history.events[0].user_metadata
    for payload in (metadata.summary, metadata.details):
        assert payload.metadata["encoding"] == ENCODING
        assert label.encode() not in payload.data
    # With the keys, they read.
    described = await encrypted.get_workflow_handle(run.id).describe()
    assert await described.static_summary() == f"{label}: Cancel order 1042: it arrived damaged."


async def test_a_run_a_guardrail_stopped_is_in_the_guardrail_list(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    """docs/web-ui.md's "stopped by a guardrail" list finds a run whose input tripped one."""
    agent_input = AgentInput(
        prompt=guards.INJECTION,
        model=priced(turn(text="never read")),
        guardrails=GuardrailPolicy(input=["no_injection"]),
    )
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(agent_input)
        with pytest.raises(AgentRunFailed) as failed:
            await run.result()
    assert failed.value.type == "AgentGuardrailTripped"
    assert (await attributes(run))[AGENT_ERROR.name] == "AgentGuardrailTripped"

    async def listed() -> bool:
        query = 'AgentError="AgentGuardrailTripped"'
        return run.id in await temporal_cli(temporal_env, "workflow", "list", "--query", query)

    await eventually(listed, what="the stopped run in the list")
