"""Record a release's histories: what runs that a release started look like, for the code after it.

    python -m tests.record_release tests/histories/releases/0.2.0 [SCENARIO ...]

Every release (a version in pyproject.toml and its entry in CHANGELOG.md) commits the histories
this records, made by that release's own code; tests/test_releases.py replays every release's
with today's code. A worker upgraded mid-run replays exactly these: runs that wait for a person,
conversations between turns and in the middle of one. The scenarios stop where such a run
would be when the fleet is upgraded, and the run is then terminated (its history so far is
what a new worker replays).

Self-contained on purpose: it imports only what every release has (the worker's builder and the
embedded dev server, by the module path of that release) and drives the run by the names on its
wire (the workflow type, its queries, updates and signals), so it records older releases too
(docs/deployment.md, "Recording a release").
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

LAYOUTS = (
    (
        "durable_agent.serving.worker",
        "durable_agent.serving.dev_server",
        "durable_agent.workflows.inputs",
    ),
    ("durable_agent.worker", "durable_agent.worker", "durable_agent.workflows.models"),
    ("worker", "worker", "workflows.models"),
)
"""Where the release being recorded keeps its worker builder, its dev server and its models: in
folders of their own since 0.3.0, in durable_agent/worker.py from d7e71aa (2026-12-02), at the
top of the checkout before. By name, so that this file imports the project the one way
everywhere else does (tests/test_architecture.py)."""


def _release_modules() -> tuple[Any, Any, Any]:
    for names in LAYOUTS:
        try:
            return tuple(importlib.import_module(name) for name in names)  # type: ignore[return-value]
        except ModuleNotFoundError:
            continue
    raise SystemExit("no release here: run this in a checkout of the project, installed")


_worker, _dev_server, _models = _release_modules()
build_worker, embedded_dev_server = _worker.build_worker, _dev_server.embedded_dev_server
AgentInput = _models.AgentInput

WAIT_SECONDS = 30.0
TASK_QUEUE = "release-record"


def _call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "arguments": arguments}


def _input(script: list[dict[str, Any]], tools: list[str], **options: Any) -> Any:
    return AgentInput.model_validate(
        {
            "prompt": "Where is order 1042? My email is a@b.com.",
            "tools": tools,
            "model": {"provider": "scripted", "script": script},
            **options,
        }
    )


async def _until(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"the run never reached: {what}")
        await asyncio.sleep(0.05)


async def _status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    status = await handle.query("status", result_type=dict)
    return status


async def _waiting_for_a_person(handle: WorkflowHandle[Any, Any]) -> None:
    async def waiting() -> bool:
        return (await _status(handle))["status"] == "awaiting_approval"

    await _until("awaiting_approval", waiting)


async def _turn_finished(handle: WorkflowHandle[Any, Any], number: int) -> None:
    async def finished() -> bool:
        talk = (await _status(handle)).get("conversation") or {}
        return talk.get("turn") == number and not talk.get("working")

    await _until(f"turn {number} finished", finished)


async def _model_called(handle: WorkflowHandle[Any, Any], times: int) -> None:
    async def called() -> bool:
        history = await handle.fetch_history()
        scheduled = [
            event
            for event in history.events
            if event.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
        ]
        return len(scheduled) >= times

    await _until(f"model call {times} scheduled", called)


async def completed(handle: WorkflowHandle[Any, Any]) -> None:
    await handle.result()


async def plan_waiting(handle: WorkflowHandle[Any, Any]) -> None:
    await _waiting_for_a_person(handle)


async def tool_call_waiting(handle: WorkflowHandle[Any, Any]) -> None:
    await _waiting_for_a_person(handle)


async def conversation_waiting(handle: WorkflowHandle[Any, Any]) -> None:
    """Turn 1 answered; the conversation waits for the next message."""
    await _turn_finished(handle, 1)


async def conversation_mid_turn(handle: WorkflowHandle[Any, Any]) -> None:
    """Turn 1 answered; turn 2's message came by update, and its model call is in flight."""
    await _turn_finished(handle, 1)
    await handle.execute_update("send_message", "And order 1041?")
    await _model_called(handle, 3)


async def conversation_waiting_for_approval(handle: WorkflowHandle[Any, Any]) -> None:
    """Turn 2, by signal, asks to refund; the refund waits for a person."""
    await _turn_finished(handle, 1)
    await handle.signal("send_message", "Refund 5 on it, please.")
    await _waiting_for_a_person(handle)


DELEGATE_CALL = "c1"


async def sub_agent_waiting(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """The parent delegated; its sub-agent's refund waits for a person, shown in the parent's
    status. Both histories are kept: the child's, and the parent's waiting on it."""

    async def shown() -> bool:
        return bool((await _status(handle)).get("sub_agent_approvals"))

    await _until("the sub-agent's call shown in the parent", shown)
    return [f"{handle.id}/{DELEGATE_CALL}"]


TRUSTED = {"approve_all": True}
READ_ONLY = ["get_order", "get_tracking", "search_orders"]

Drive = Callable[[WorkflowHandle[Any, Any]], Awaitable[list[str] | None]]
"""Brings a run to where it is recorded; answers the ids of other runs (its sub-agents) whose
histories are recorded beside it, if any."""

SCENARIOS: dict[str, tuple[Any, Drive]] = {
    "run_completed": (
        _input(
            [
                {"calls": [_call("search_orders", "c1", email="a@b.com")]},
                {
                    "calls": [
                        _call("get_order", "c2", order_id=1042),
                        _call("get_tracking", "c3", order_id=1042),
                    ]
                },
                {"text": "Order 1042 was delivered."},
            ],
            READ_ONLY,
            tool_approval=TRUSTED,
        ),
        completed,
    ),
    "structured_answer": (
        _input(
            [
                {"calls": [_call("get_order", "c1", order_id=1042)]},
                {"calls": [_call("finish", "c2", order="1042", status="lost")]},
                {"calls": [_call("finish", "c3", order="1042", status="delivered")]},
            ],
            READ_ONLY,
            tool_approval=TRUSTED,
            output_schema={
                "type": "object",
                "properties": {
                    "order": {"type": "string", "pattern": "^[0-9]{4}$"},
                    "status": {"enum": ["delivered", "in transit"]},
                },
                "required": ["order", "status"],
                "additionalProperties": False,
            },
        ),
        completed,
    ),
    "plan_waiting": (
        _input(
            [
                {
                    "calls": [
                        _call("get_order", "c1", order_id=1042),
                        _call("submit_plan", "c2", steps=["Refund 5 on order 1042"]),
                    ]
                }
            ],
            [*READ_ONLY, "issue_refund"],
            plan=True,
        ),
        plan_waiting,
    ),
    "tool_call_waiting": (
        _input(
            [
                {
                    "calls": [
                        _call("get_order", "c1", order_id=1042),
                        _call("issue_refund", "c2", order_id=1042, amount=5),
                    ]
                }
            ],
            [*READ_ONLY, "issue_refund"],
        ),
        tool_call_waiting,
    ),
    "conversation_waiting": (
        _input(
            [
                {"calls": [_call("get_order", "c1", order_id=1042)]},
                {"text": "Order 1042 was delivered."},
            ],
            READ_ONLY,
            conversation=True,
        ),
        conversation_waiting,
    ),
    "conversation_mid_turn": (
        _input(
            [
                {"calls": [_call("get_order", "c1", order_id=1042)]},
                {"text": "Order 1042 was delivered."},
                {"text": "never sent: the history is taken before", "delay_seconds": 600},
            ],
            READ_ONLY,
            conversation=True,
        ),
        conversation_mid_turn,
    ),
    "conversation_waiting_for_approval": (
        _input(
            [
                {"calls": [_call("get_order", "c1", order_id=1042)]},
                {"text": "Order 1042 was delivered."},
                {"calls": [_call("issue_refund", "c2", order_id=1042, amount=5)]},
            ],
            [*READ_ONLY, "issue_refund"],
            conversation=True,
        ),
        conversation_waiting_for_approval,
    ),
    "sub_agent_waiting": (
        _input(
            [
                {"calls": [_call("delegate", DELEGATE_CALL, task="Refund 5 on order 1042.")]},
                {"text": "never sent: the history is taken before"},
            ],
            [*READ_ONLY, "issue_refund"],
            sub_agents=True,
            sub_agent_model={
                "provider": "scripted",
                "script": [
                    {"calls": [_call("get_order", "s1", order_id=1042)]},
                    {"calls": [_call("issue_refund", "s2", order_id=1042, amount=5)]},
                    {"text": "never sent: the history is taken before"},
                ],
            },
        ),
        sub_agent_waiting,
    ),
}


def file_name(workflow_id: str) -> str:
    """The file a run's history is kept in: its workflow id, a sub-agent's `/` written `~`."""
    return f"{workflow_id.replace('/', '~')}.json"


def workflow_id(path: Path) -> str:
    """The workflow id of the run whose history `path` keeps (`file_name` reversed): a replay
    needs the one it ran with, since a run's sub-agents are named after it."""
    return path.stem.replace("~", "/")


async def record(client: Client, name: str) -> dict[str, str]:
    """The scenario's histories by file name: its run's, and those of the sub-agents it drove
    (`NAME~CALL_ID.json`)."""
    agent_input, drive = SCENARIOS[name]
    # The scenario's name, which its file is named after and the replay test gives the history:
    # a parent's history holds its sub-agents' ids, made from its own.
    handle = await client.start_workflow(
        "AgentWorkflow", agent_input, id=name, task_queue=TASK_QUEUE
    )
    try:
        others = await drive(handle) or []
        histories = {file_name(name): (await handle.fetch_history()).to_json()}
        for other in others:
            history = await client.get_workflow_handle(other).fetch_history()
            histories[file_name(other)] = history.to_json()
        return histories
    finally:
        description = await handle.describe()
        if description.status is not None and description.status.name == "RUNNING":
            await handle.terminate("recorded")


async def main(out: Path, only: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as data:
        for variable, file in (
            ("AGENT_DEMO_DB", "demo.db"),
            ("AGENT_RESULT_STORE", "results.db"),
            ("AGENT_MESSAGE_STORE", "messages.db"),
        ):
            os.environ[variable] = str(Path(data) / file)
        async with embedded_dev_server() as env:
            client = env.client
            async with build_worker(client, TASK_QUEUE):
                for name in only or SCENARIOS:
                    for file, history in (await record(client, name)).items():
                        path = out / file
                        path.write_text(history)
                        events = len(json.loads(history)["events"])
                        print(f"{path}: {events} events")
    return 0


if __name__ == "__main__":
    # argparse is left out on purpose: nothing here may differ between the releases it records.
    if len(sys.argv) < 2 or any(name not in SCENARIOS for name in sys.argv[2:]):
        sys.stderr.write(
            "usage: python -m tests.record_release OUT_DIR [SCENARIO ...]\n"
            f"scenarios: {', '.join(SCENARIOS)}\n"
        )
        sys.exit(2)
    sys.exit(asyncio.run(main(Path(sys.argv[1]), sys.argv[2:])))
