"""Code mode as everything that shows a run shows it (docs/code-mode.md): a run started over the
HTTP API with `code_mode` runs a script; a bad `code_mode` is refused at the door; the event
stream carries each of the script's calls, named by its script, before run_code's own finish;
the status, the list and the Web UI's current details name a waiting call and its script; each
call's activity summary starts with the script's id."""

from __future__ import annotations

import asyncio
import json
import textwrap
import uuid
from typing import Any

import httpx2 as httpx
import jsonschema
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client
from temporalio.service import RPCError

from durable_agent.client.agent_client import AgentClient
from durable_agent.client.contract import contract
from durable_agent.workflows.errors import AgentInputInvalid
from durable_agent.workflows.inputs import AgentInput, CodeMode, ToolApprovalPolicy
from tests.helpers import call, scripted_input, turn
from tests.test_http_api import sse

TWO_WRITES = textwrap.dedent(
    """
    wrote = []
    for label in ["a", "b"]:
        try:
            wrote.append(await write_thing(label=label))
        except PermissionError as denied:
            print("denied", label)
    look = await read_thing(label="c")
    [wrote, look]
    """
)


async def waiting_on(api: httpx.AsyncClient, workflow_id: str, call_id: str) -> dict[str, Any]:
    """The run's status once `call_id` is the one call that waits for a person."""

    async def waits() -> dict[str, Any]:
        while True:
            status = (await api.get(f"/api/runs/{workflow_id}")).json()
            waiting = [a for a in status["approvals"] if a["status"] == "awaiting_approval"]
            if [a["call_id"] for a in waiting] == [call_id]:
                return dict(status)
            await asyncio.sleep(0.1)

    return await asyncio.wait_for(waits(), 30)


async def test_a_script_started_over_http_is_shown_call_by_call_under_its_script(
    api: httpx.AsyncClient, client: Client
) -> None:
    agent_input = scripted_input(
        [
            turn(call("run_code", id="script_1", code=TWO_WRITES)),
            turn(text="One written, one denied.", expect="denied b"),
        ],
        tools=["write_thing", "read_thing"],
        code_mode=CodeMode(max_calls=10),
        tool_approval=ToolApprovalPolicy(),
    )
    body = agent_input.model_dump(mode="json", exclude_defaults=True)
    assert body["code_mode"] == {"max_calls": 10}  # the input as a stranger writes it
    started = await api.post("/api/runs", json=body)
    assert started.status_code == 201, started.text
    workflow_id = started.json()["workflow_id"]

    # The status names the waiting call, and the script that waits on it.
    status = await waiting_on(api, workflow_id, "script_1.1")
    (asked,) = status["approvals"]
    assert (asked["tool"], asked["script"], asked["parsed_arguments"]) == (
        "write_thing",
        "script_1",
        {"label": "a"},
    )
    assert "in the script of run_code call script_1" in status["details"]
    # So does the list of runs that wait for a person.
    listed = next(r for r in (await api.get("/api/runs")).json() if r["workflow_id"] == workflow_id)
    assert [(c["call_id"], c["script"]) for c in listed["waiting"]["calls"]] == [
        ("script_1.1", "script_1")
    ]
    # And the Web UI's page of the run, its current details.
    handle = client.get_workflow_handle(workflow_id)
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "**Waiting for a person** to decide 1 tool call:" in metadata.current_details
    assert (
        "1. `write_thing` (call `script_1.1`, in the script of run_code call `script_1`) with "
        in metadata.current_details
    ), metadata.current_details

    approved = await api.post(
        f"/api/runs/{workflow_id}/decisions",
        json={"kind": "tool_call", "call_id": "script_1.1", "approve": True},
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["script"] == "script_1"
    await waiting_on(api, workflow_id, "script_1.2")
    denied = await api.post(
        f"/api/runs/{workflow_id}/decisions",
        json={"kind": "tool_call", "call_id": "script_1.2", "approve": False, "reason": "no"},
    )
    assert denied.status_code == 200, denied.text

    *progress, done = await sse(api, workflow_id)
    outcome = json.loads(done["data"])
    assert outcome["status"] == "completed", outcome
    assert outcome["result"]["answer"] == "One written, one denied."
    events = [(e["event"], json.loads(e["data"])) for e in progress if "id" in e]
    calls = [
        (kind, data.get("call_id"), data.get("script"), data.get("outcome"))
        for kind, data in events
        if kind.startswith(("tool_call_", "approval_"))
    ]
    # Each call of the script, in the order it ran, under its script; then run_code's finish.
    assert calls == [
        ("tool_call_started", "script_1", None, None),
        ("approval_requested", "script_1.1", "script_1", None),
        ("approval_decided", "script_1.1", "script_1", "approved"),
        ("tool_call_started", "script_1.1", "script_1", None),
        ("tool_call_finished", "script_1.1", "script_1", "ok"),
        ("approval_requested", "script_1.2", "script_1", None),
        ("approval_decided", "script_1.2", "script_1", "denied"),
        ("tool_call_finished", "script_1.2", "script_1", "denied"),
        ("tool_call_started", "script_1.3", "script_1", None),
        ("tool_call_finished", "script_1.3", "script_1", "ok"),
        ("tool_call_finished", "script_1", None, "ok"),
    ]
    # The stream resumes from any offset inside the script, without gap or repeat.
    at = next(int(e["id"]) for e in progress if e.get("event") == "approval_requested")
    resumed = await sse(api, workflow_id, last=at)
    assert [e for e in resumed if "id" in e] == [e for e in progress if "id" in e][at + 1 :]

    # Each call's activity: its summary (the Web UI's list of activities) names the script.
    history = await handle.fetch_history()
    summaries = [
        (await client.data_converter.decode([e.user_metadata.summary]))[0]
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert [s for s in summaries if not s.startswith("model ")] == [
        "script script_1 leg 1",
        'script_1: write_thing {"label": "a"}',
        "script script_1 leg 2",
        "script script_1 leg 3",
        'script_1: read_thing {"label": "c"}',
        "script script_1 leg 4",
    ]
    trace = (await api.get(f"/api/runs/{workflow_id}/trace")).json()
    records = trace["step_records"][0]["tool_calls"]
    assert [(r["id"], r.get("script")) for r in records] == [
        ("script_1.1", "script_1"),
        ("script_1.2", "script_1"),
        ("script_1.3", "script_1"),
        ("script_1", None),
    ]


BAD_CODE_MODES: dict[str, tuple[Any, str]] = {
    "no calls": ({"max_calls": 0}, "max_calls"),
    "a billion calls": ({"max_calls": 10**9}, "max_calls"),
    "no time": ({"max_cpu_seconds": 0}, "max_cpu_seconds"),
    "a day of time": ({"max_cpu_seconds": 86_400}, "max_cpu_seconds"),
    "a kilobyte of memory": ({"max_memory_bytes": 1024}, "max_memory_bytes"),
    "a word for a number": ({"max_calls": "many"}, "max_calls"),
    "a word for the mode": ("yes", "code_mode"),
}


def test_the_contract_describes_code_mode_with_its_bounds() -> None:
    started = contract()["workflow"]["input"]
    schema = started["$defs"]["CodeMode"]
    bounds = {
        name: (field.get("minimum", field.get("exclusiveMinimum")), field["maximum"])
        for name, field in schema["properties"].items()
    }
    assert bounds == {
        "max_cpu_seconds": (0, 600),
        "max_memory_bytes": (1024**2, 4 * 1024**3),
        "max_calls": (1, 1000),
        "max_output_chars": (0, 1_000_000),
    }
    validator = jsonschema.Draft202012Validator(started)
    assert validator.is_valid({"prompt": "hi", "code_mode": {}})
    assert validator.is_valid({"prompt": "hi", "code_mode": {"max_calls": 1000}})
    for what, (mode, _) in BAD_CODE_MODES.items():
        assert not validator.is_valid({"prompt": "hi", "code_mode": mode}), what


def test_the_cli_writes_code_mode_into_the_input_the_contract_takes() -> None:
    from tests.test_contract import run_cli

    shown = run_cli("--print-input", "--code-mode", "Total my orders")
    assert shown.returncode == 0, shown.stderr
    written = json.loads(shown.stdout)
    assert written["code_mode"] == CodeMode().model_dump(mode="json")  # the defaults
    assert jsonschema.Draft202012Validator(contract()["workflow"]["input"]).is_valid(written)
    assert AgentInput.model_validate(written).code_mode == CodeMode()
    plain = json.loads(run_cli("--print-input", "Total my orders").stdout)
    assert "code_mode" not in plain


async def test_a_bad_code_mode_is_refused_at_the_door_and_starts_nothing(
    api: httpx.AsyncClient, client: Client
) -> None:
    for what, (mode, field) in BAD_CODE_MODES.items():
        workflow_id = f"refused-{uuid.uuid4()}"
        sent = await api.post(
            "/api/runs",
            content=json.dumps({"prompt": "hi", "code_mode": mode, "workflow_id": workflow_id}),
            headers={"Content-Type": "application/json"},
        )
        assert sent.status_code == 422, (what, sent.text)
        assert field in sent.text, (what, sent.text)
        with pytest.raises(RPCError):
            await client.get_workflow_handle(workflow_id).describe()
    # An app's own input, its code mode changed after it was built, is refused as it starts.
    agent_input = AgentInput(prompt="hi")
    agent_input.code_mode = CodeMode.model_construct(max_calls=0)
    workflow_id = f"refused-{uuid.uuid4()}"
    with pytest.raises(AgentInputInvalid, match=r"code_mode\.max_calls: Input should be greater"):
        await AgentClient(client, "no-queue").start(agent_input, workflow_id=workflow_id)
    with pytest.raises(RPCError):
        await client.get_workflow_handle(workflow_id).describe()
