"""What the A2A tests share (tests/test_a2a.py, tests/test_a2a_js.py): real `durable-agent serve
--agent FILE` processes on the session's dev server, a worker of the module's queue beside them,
scripted agents, and the official Python client (`a2a-sdk`) of a serve."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client as A2AClient
from a2a.helpers.proto_helpers import new_data_part, new_text_message
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest, StreamResponse, Task, TaskState
from temporalio.testing import WorkflowEnvironment

from durable_agent.serving.worker import build_worker
from tests.helpers import TEST_WORKER_OPTIONS
from tests.serve_process import TOKEN, serving

PLAIN_SCRIPT = [{"text": "The first answer."}, {"text": "The second answer."}]
GATED_SCRIPT = [
    {"calls": [{"name": "issue_refund", "arguments": {"order_id": 1042, "amount": 5.0}}]},
    {"calls": [{"name": "cancel_order", "arguments": {"order_id": 104998, "reason": "asked"}}]},
    {"text": "Done."},
]
STRUCTURED_SCRIPT = [
    {"calls": [{"name": "finish", "arguments": {"city": "Paris"}}]},
    {"text": "Never read.", "expect": "what no message says"},  # fails the run
]
READ_FILE = {
    "name": "read_local_file",
    "description": "Read a file on the user's laptop.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "result": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}
ASKING_SCRIPT = [
    {"calls": [{"name": "submit_plan", "arguments": {"steps": ["Read the notes", "Answer"]}}]},
    {
        "calls": [{"name": "read_local_file", "arguments": {"path": "notes.txt"}}],
        "expect": "approved",
    },
    {"text": "The file says: {last_tool_result.text}"},
]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
FAST_RETRY = {"maximum_attempts": 3, "initial_interval_seconds": 0.05}


def agent_file(where: Path, script: list[dict[str, Any]], **fields: Any) -> Path:
    path = where / f"agent-{uuid.uuid4().hex[:6]}.json"
    model = {"provider": "scripted", "script": script, "retry": FAST_RETRY}
    path.write_text(json.dumps({"label": "helper", "model": model, **fields}))
    return path


@pytest.fixture(scope="module")
def queue() -> str:
    return f"test-a2a-{uuid.uuid4()}"


@pytest.fixture(scope="module")
async def worker(temporal_env: WorkflowEnvironment, queue: str) -> AsyncIterator[None]:
    async with build_worker(temporal_env.client, queue, **TEST_WORKER_OPTIONS):
        yield


@asynccontextmanager
async def served(
    temporal_env: WorkflowEnvironment, queue: str, agent: Path
) -> AsyncIterator[httpx.AsyncClient]:
    address = temporal_env.client.service_client.config.target_host
    async with serving("--address", address, "--task-queue", queue, "--agent", str(agent)) as api:
        yield api


@pytest.fixture(scope="module")
async def plain(
    temporal_env: WorkflowEnvironment,
    queue: str,
    worker: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[httpx.AsyncClient]:
    """A serve whose agent answers twice: a first message, then a follow-up."""
    agent = agent_file(tmp_path_factory.mktemp("plain"), PLAIN_SCRIPT, tools=["get_order"])
    async with served(temporal_env, queue, agent) as api:
        yield api


@pytest.fixture(scope="module")
async def gated(
    temporal_env: WorkflowEnvironment,
    queue: str,
    worker: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[httpx.AsyncClient]:
    """A serve whose agent refunds (allowed), then cancels an order (waits for a person)."""
    agent = agent_file(tmp_path_factory.mktemp("gated"), GATED_SCRIPT, **GATED_FIELDS)
    async with served(temporal_env, queue, agent) as api:
        yield api


@pytest.fixture(scope="module")
async def structured(
    temporal_env: WorkflowEnvironment,
    queue: str,
    worker: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[httpx.AsyncClient]:
    """A serve whose agent answers with an output schema, then fails."""
    where = tmp_path_factory.mktemp("structured")
    agent = agent_file(where, STRUCTURED_SCRIPT, output_schema=CITY)
    async with served(temporal_env, queue, agent) as api:
        yield api


@pytest.fixture(scope="module")
async def asking(
    temporal_env: WorkflowEnvironment,
    queue: str,
    worker: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[httpx.AsyncClient]:
    """A serve whose agent plans first, then asks the client for a file (a callback tool)."""
    where = tmp_path_factory.mktemp("asking")
    fields = {"plan": True, "tools": [], "callback_tools": [READ_FILE]}
    async with served(temporal_env, queue, agent_file(where, ASKING_SCRIPT, **fields)) as api:
        yield api


GATED_FIELDS: dict[str, Any] = {
    "tools": ["issue_refund", "cancel_order"],
    "tool_approval": {"allow": ["issue_refund"]},
}


@asynccontextmanager
async def a2a(
    api: httpx.AsyncClient, *, streaming: bool = True, token: str | None = TOKEN
) -> AsyncIterator[A2AClient]:
    """The official client, from the served card, sending `token`."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming)
        client = await create_client(str(api.base_url), client_config=config)
        async with client:
            yield client


def message(text: str | None = None, *, task: Task | None = None, **data: Any) -> Message:
    if text is not None:
        sent = new_text_message(text, role=Role.ROLE_USER)
    else:
        sent = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER)
        sent.parts.append(new_data_part(data))
    if task is not None:
        sent.task_id, sent.context_id = task.id, task.context_id
    return sent


async def send(client: A2AClient, sent: Message) -> list[StreamResponse]:
    return [event async for event in client.send_message(SendMessageRequest(message=sent))]


def final_task(events: list[StreamResponse]) -> Task:
    """The task as the events leave it (the first is the task; the rest update it)."""
    assert events[0].HasField("task"), events[0]
    task = Task()
    task.CopyFrom(events[0].task)
    for event in events[1:]:
        if event.HasField("status_update"):
            task.status.CopyFrom(event.status_update.status)
        elif event.HasField("artifact_update"):
            task.artifacts.append(event.artifact_update.artifact)
    return task


def states(events: list[StreamResponse]) -> list[str]:
    said = []
    for event in events:
        if event.HasField("task"):
            said.append(TaskState.Name(event.task.status.state))
        elif event.HasField("status_update"):
            said.append(TaskState.Name(event.status_update.status.state))
        else:
            said.append("artifact")
    return said


async def runs_on(temporal_env: WorkflowEnvironment, queue: str) -> int:
    """The runs of `queue`: what a refused call must not have added to."""
    return (await temporal_env.client.count_workflows(f"TaskQueue='{queue}'")).count
