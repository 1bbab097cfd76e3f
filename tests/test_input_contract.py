"""A run's input that does not fit the contract never wedges a run (issue 47).

Another language's client (the `temporal` CLI, TypeScript, Go, raw JSON) can send `{"prompt":
null}`, a wrong type, or a number no timer can hold. The worker decodes the input before any
workflow code runs; a decoding error used to fail the workflow task, retried forever, with the
run RUNNING and nobody told. It now fails the run at once with AgentInputInvalid naming the field
and the rule (workflows/payloads.py), under the worker `durable-agent worker` runs (not the
tests' own, which fail a run on any error), and the project's own doors (AgentClient, the HTTP
API) refuse such an input before anything starts.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx2 as httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from durable_agent import (
    AgentClient,
    AgentInputInvalid,
    ApprovalCriteria,
    AutoMode,
    Limits,
    ModelSettings,
    ToolApprovalPolicy,
)
from durable_agent.client.contract import contract
from durable_agent.serving.dev_server import temporal_binary
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.bounds import MAX_SECONDS
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.state import RunState
from tests.helpers import call, eventually, scripted_input, turn
from tests.test_auto_mode import waiting_for_a_person

USER = {"role": "user", "content": "hi"}


def tool_result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "tool_name": "t", "content": "done"}


def assistant_calling(call_id: str) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [{"id": call_id, "name": "t", "arguments": "{}"}]}


def fork_seed(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"origin": {"workflow_id": "w", "run_id": "r", "step": 1}, "messages": messages}


def carried(**state: Any) -> dict[str, Any]:
    """A run's carried state, as a client that is not this project's may write one."""
    return RunState.start(datetime(2026, 12, 7, tzinfo=UTC)).model_dump(mode="json") | {
        "messages": [USER],
        **state,
    }


JUDGE = {
    "judge": {"provider": "scripted"},
    "criteria": {"writes": {"effect": "writes a thing"}},
}
TOO_LONG = f"Input should be less than or equal to {MAX_SECONDS}"

BROKEN: dict[str, tuple[dict[str, Any], str]] = {
    "a null prompt": ({"prompt": None}, "prompt: Input should be a valid string"),
    "a wrong type": (
        {"prompt": "hi", "limits": {"max_steps": "many"}},
        "limits.max_steps: Input should be a valid integer",
    ),
    "null parameters of a callback tool": (
        {
            "prompt": "hi",
            "callback_tools": [{"name": "ask", "description": "Ask.", "parameters": None}],
        },
        "callback_tools.0.parameters: Input should be an object",
    ),
    # What a run carries or a fork is seeded with, from a client that is not this project's:
    # each was read by workflow code, whose error failed the task forever.
    "a fork's transcript that breaks the pairing rule": (
        {"prompt": "hi", "fork": fork_seed([tool_result("c1")])},
        "fork: Value error, tool result for unknown id 'c1'",
    ),
    "a fork's transcript with a call left unanswered": (
        {"prompt": "hi", "fork": fork_seed([USER, assistant_calling("c1")])},
        "fork: Value error, the fork's transcript has calls without results: 'c1'",
    ),
    "a carried call-id filter that is not base64": (
        {"prompt": "hi", "carried": carried(older_call_ids="!!!")},
        "carried: Value error, older_call_ids is not base64",
    ),
    "a carried call-id filter of another size": (
        {"prompt": "hi", "carried": carried(older_call_ids="AAAA")},
        "carried: Value error, older_call_ids has 3 bytes",
    ),
    "a carried state without a transcript": (
        {"prompt": "hi", "carried": carried(messages=[])},
        "carried: a run's carried state holds its transcript, which is empty",
    ),
    # Numbers the schema took before it had bounds: each overflowed a timedelta inside the
    # workflow, or was refused by the server in the middle of the run.
    "1e300 seconds of approval": (
        {"prompt": "hi", "approval_timeout_seconds": 1e300},
        f"approval_timeout_seconds: {TOO_LONG}",
    ),
    "1e300 seconds of heartbeat": (
        {"prompt": "hi", "heartbeat_timeout_seconds": 1e300},
        f"heartbeat_timeout_seconds: {TOO_LONG}",
    ),
    "1e300 seconds of a model call": (
        {"prompt": "hi", "model": {"timeout_seconds": 1e300}},
        f"model.timeout_seconds: {TOO_LONG}",
    ),
    "a negative model call timeout": (
        {"prompt": "hi", "model": {"timeout_seconds": -5}},
        "model.timeout_seconds: Input should be greater than 0",
    ),
    "a negative retry interval": (
        {"prompt": "hi", "model": {"retry": {"initial_interval_seconds": -1}}},
        "model.retry.initial_interval_seconds: Input should be greater than 0",
    ),
    "a maximum retry interval under the first": (
        {"prompt": "hi", "model": {"retry": {"initial_interval_seconds": 60}}},
        "maximum_interval_seconds=30 is less than initial_interval_seconds=60",
    ),
    "1e300 seconds of wall time": (
        {"prompt": "hi", "limits": {"max_wall_seconds": 1e300}},
        f"limits.max_wall_seconds: {TOO_LONG}",
    ),
    "1e300 seconds idle": (
        {"prompt": "hi", "conversation": True, "idle_timeout_seconds": 1e300},
        f"idle_timeout_seconds: {TOO_LONG}",
    ),
    "a script of no calls": (
        {"prompt": "hi", "code_mode": {"max_calls": 0}},
        "code_mode.max_calls: Input should be greater than or equal to 1",
    ),
    "a script of a billion calls": (
        {"prompt": "hi", "code_mode": {"max_calls": 10**9}},
        "code_mode.max_calls: Input should be less than or equal to 1000",
    ),
    "a word for code mode": (
        {"prompt": "hi", "code_mode": "yes"},
        "code_mode: Input should be an object",
    ),
    "1e300 seconds of a judge": (
        {"prompt": "hi", "tool_approval": {"auto_mode": {**JUDGE, "timeout_seconds": 1e300}}},
        f"tool_approval.auto_mode.timeout_seconds: {TOO_LONG}",
    ),
}


async def failed_at_once(handle: WorkflowHandle[Any, Any]) -> ApplicationError:
    """The run's failure, which must come without a workflow task failing first."""
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), timeout=30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    history = await handle.fetch_history()
    kinds = [event.event_type for event in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    return cause


@pytest.mark.parametrize("case", BROKEN)
async def test_an_input_that_does_not_decode_fails_the_run_at_once_with_the_reason(
    client: Client, task_queue: str, case: str
) -> None:
    raw, said = BROKEN[case]
    async with build_worker(client, task_queue):  # the shipped worker: no test options
        handle = await client.start_workflow(
            "AgentWorkflow", raw, id=f"broken-{uuid.uuid4()}", task_queue=task_queue
        )
        cause = await failed_at_once(handle)
    assert cause.type == "AgentInputInvalid" and cause.non_retryable
    assert said in cause.message, cause.message
    assert "durable-agent contract" in cause.message


async def test_the_temporal_cli_gets_the_reason(client: Client, task_queue: str) -> None:
    address = client.service_client.config.target_host
    workflow_id = f"broken-{uuid.uuid4()}"
    async with build_worker(client, task_queue):
        executed = await asyncio.create_subprocess_exec(
            *[temporal_binary(), "workflow", "execute", "--address", address],
            *["--task-queue", task_queue, "--type", "AgentWorkflow"],
            *["--workflow-id", workflow_id, "--input", json.dumps({"prompt": None})],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(executed.communicate(), timeout=60)
    shown = out.decode()
    assert executed.returncode != 0, shown
    assert "prompt: Input should be a valid string" in shown, shown


async def test_agent_client_refuses_an_input_changed_after_it_was_built(
    client: Client, task_queue: str
) -> None:
    agent_input = scripted_input([turn(text="never asked")])
    agent_input.prompt = None  # type: ignore[assignment]  # pydantic does not check assignment
    workflow_id = f"refused-{uuid.uuid4()}"
    with pytest.raises(AgentInputInvalid, match="prompt: Input should be a valid string"):
        await AgentClient(client, task_queue).start(agent_input, workflow_id=workflow_id)
    with pytest.raises(RPCError) as missing:
        await client.get_workflow_handle(workflow_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND
    # A text no payload can carry (pydantic's serialisation error, before): typed, too.
    agent_input = scripted_input([turn(text="never asked")])
    agent_input.system = "from a JSON \ud800"
    with pytest.raises(AgentInputInvalid, match="lone surrogate"):
        await AgentClient(client, task_queue).start(agent_input, workflow_id=workflow_id)


async def test_agent_client_refuses_a_nan_that_json_would_send_as_null(
    client: Client, task_queue: str
) -> None:
    """JSON has no NaN: pydantic writes one as null, which a run reads as no cost limit at all,
    or as a schema's null default. Refused, naming where it is, and nothing is started or sent."""
    agents = AgentClient(client, task_queue)
    workflow_id = f"refused-{uuid.uuid4()}"
    unbounded = scripted_input([turn(text="never asked")])
    unbounded.limits.max_cost_usd = float("nan")  # pydantic does not check assignment
    with pytest.raises(AgentInputInvalid, match=r"limits\.max_cost_usd: no JSON number"):
        await agents.start(unbounded, workflow_id=workflow_id)
    number = {"type": "number", "default": float("inf")}
    schema = {"type": "object", "properties": {"n": number}}
    defaulted = scripted_input([turn(text="never asked")], output_schema=schema)
    with pytest.raises(AgentInputInvalid, match=r"output_schema\.properties\.n\.default"):
        await agents.start(defaulted, workflow_id=workflow_id)
    with pytest.raises(RPCError) as missing:
        await client.get_workflow_handle(workflow_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await agents.run(workflow_id).answer_callback("call_1_1", {"rows": [1, float("nan")]})
    assert "result.rows.1 is no JSON number" in str(refused.value.cause)


async def test_the_http_api_refuses_out_of_bounds_numbers_before_starting_anything(
    api: httpx.AsyncClient, client: Client
) -> None:
    for case in ("1e300 seconds of approval", "a negative retry interval", "1e300 seconds idle"):
        raw, said = BROKEN[case]
        workflow_id = f"refused-{uuid.uuid4()}"
        # As a stranger writes it: JSON text, where 1e300 is a number like any other.
        sent = await api.post(
            "/api/runs",
            content=json.dumps({**raw, "workflow_id": workflow_id}),
            headers={"Content-Type": "application/json"},
        )
        assert sent.status_code == 422, sent.text
        field = said.split(":")[0].split(".")[-1]
        assert field in sent.text, sent.text
        with pytest.raises(RPCError):
            await client.get_workflow_handle(workflow_id).describe()


# --- every number has bounds, and a run at them finishes -------------------------------------

NOT_OURS = {"WorkflowStreamState"}
"""temporalio's own model of the progress stream, carried in a run's state: its offsets are the
SDK's to check."""


def unbounded_numbers(schema: dict[str, Any], where: str) -> list[str]:
    """Every number or integer in `schema` (refs followed, each once) that lacks a minimum or a
    maximum, by its path."""
    defs = schema.get("$defs", {})
    found: list[str] = []
    seen: set[str] = set()
    stack: list[tuple[Any, str]] = [(schema, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            stack.extend((item, path) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        if ref := node.get("$ref"):
            name = ref.split("/")[-1]
            if name not in seen and name not in NOT_OURS:
                seen.add(name)
                stack.append((defs[name], f"{path}<{name}>"))
        if node.get("type") in ("number", "integer"):
            low = "minimum" in node or "exclusiveMinimum" in node
            high = "maximum" in node or "exclusiveMaximum" in node
            if not (low and high):
                found.append(path)
        for key, value in node.items():
            if key == "properties":
                stack.extend((v, f"{path}.{k}") for k, v in value.items())
            elif key != "$defs" and isinstance(value, dict | list):
                stack.append((value, path))
    return sorted(found)


def test_every_number_a_run_or_a_handler_is_given_has_a_minimum_and_a_maximum() -> None:
    described = contract()
    inputs = {"workflow": described["workflow"]["input"]} | {
        f"{kind} {name}": handler["input"]
        for kind in ("updates", "signals", "queries")
        for name, handler in described[kind].items()
        if handler["input"] is not None
    }
    unbounded = [
        path for name, schema in inputs.items() for path in unbounded_numbers(schema, name)
    ]
    assert unbounded == []
    # The check sees numbers: the input's own durations are among them, with their bounds.
    timeout = described["workflow"]["input"]["properties"]["approval_timeout_seconds"]
    assert (timeout["exclusiveMinimum"], timeout["maximum"]) == (0, MAX_SECONDS)
    assert unbounded_numbers({"type": "object", "properties": {"n": {"type": "number"}}}, "x")


async def test_a_run_with_every_duration_at_its_maximum_finishes(
    client: Client, task_queue: str
) -> None:
    """The largest values the schema accepts hold in timers, activities and retry policies: a
    side-effecting call goes to the judge, then to a person, and runs once approved."""
    longest = RetrySettings(
        initial_interval_seconds=MAX_SECONDS, maximum_interval_seconds=MAX_SECONDS
    )
    judge = ModelSettings(
        provider="scripted",
        timeout_seconds=MAX_SECONDS,
        retry=longest,
        script=[turn(call("verdict", decision="escalate", confidence=1, reason="a person"))],
    )
    agent_input = scripted_input(
        [turn(call("write_thing", label="w1")), turn(text="done", expect="done w1")],
        tools=["write_thing"],
        approval_timeout_seconds=MAX_SECONDS,
        heartbeat_timeout_seconds=MAX_SECONDS,
        limits=Limits(max_wall_seconds=MAX_SECONDS),
        tool_approval=ToolApprovalPolicy(
            auto_mode=AutoMode(
                judge=judge,
                criteria={"writes": ApprovalCriteria(effect="writes a thing")},
                tools={"write_thing": "writes"},
                timeout_seconds=MAX_SECONDS,
            )
        ),
    )
    agent_input.model = agent_input.model.model_copy(
        update={"timeout_seconds": MAX_SECONDS, "retry": longest}
    )
    async with build_worker(client, task_queue):  # the shipped worker: no test options
        run = await AgentClient(client, task_queue).start(agent_input)
        waiting = await waiting_for_a_person(run)
        await run.decide_tool_call(waiting.call_id, True)
        result = await asyncio.wait_for(run.result(), timeout=60)
    assert result.answer == "done"
    assert result.step_records[0].tool_calls[0].outcome == "ok"


async def test_a_conversation_idle_for_its_maximum_ends_when_asked(
    client: Client, task_queue: str
) -> None:
    agent_input = scripted_input(
        [turn(text="hello")], conversation=True, idle_timeout_seconds=MAX_SECONDS
    )
    async with build_worker(client, task_queue):
        run = await AgentClient(client, task_queue).start(agent_input)
        await run.turn(1)
        result = await asyncio.wait_for(run.end(), timeout=60)
    assert [turn.answer for turn in result.turns] == ["hello"]


async def test_a_field_of_a_newer_release_leaves_the_run_for_a_newer_worker(
    client: Client, task_queue: str
) -> None:
    """A message with a field this code does not know is what a newer release's run looks like
    to an older worker (a rollback, a rolling upgrade): its task fails, as before, and the run
    is not failed, so that a worker of that release can take it."""
    newer = {"role": "user", "content": "hi", "added_by_a_later_release": 1}
    raw = {"prompt": "hi", "fork": fork_seed([newer])}
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            "AgentWorkflow", raw, id=f"newer-{uuid.uuid4()}", task_queue=task_queue
        )

        async def task_failed() -> bool:
            history = await handle.fetch_history()
            kinds = [event.event_type for event in history.events]
            return EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED in kinds

        await eventually(task_failed, what="the workflow task to fail")
        description = await handle.describe()
        await handle.terminate("checked")
    assert description.status is not None and description.status.name == "RUNNING"
