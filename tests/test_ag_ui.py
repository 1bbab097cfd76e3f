"""AG-UI on `durable-agent serve --agent` (serving/ag_ui.py), driven by the official
@ag-ui/client from npm: its HttpAgent checks the order of the events itself, and keeps the
thread's messages as a front end would. Against real serve processes and the session's dev
server, with a worker of the test's queue."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from temporalio.client import Client

from durable_agent.serving.worker import build_worker
from durable_agent.workflows.model_settings import ScriptedTurn
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, call, program, turn
from tests.serve_process import TOKEN, serving

AG_UI_CLIENT = Path(__file__).parent / "ag_ui_client"
LOCATION_TOOL = {
    "name": "get_location",
    "description": "Where the user is, from their browser.",
    "parameters": {"type": "object", "properties": {}},
}


@pytest.fixture(scope="session")
def ag_ui_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/ag_ui_client with @ag-ui/client installed from npm, in a directory of its own."""
    program(("node",), "apt-get install nodejs npm")
    npm = program(("npm",), "apt-get install npm")
    where = tmp_path_factory.mktemp("ag-ui-client")
    for name in ("package.json", "drive.mjs"):
        shutil.copy(AG_UI_CLIENT / name, where / name)
    installed = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    return where


class Thread:
    """One AG-UI thread, driven by HttpAgent in a Node process (tests/ag_ui_client/drive.mjs)."""

    def __init__(self, node: asyncio.subprocess.Process) -> None:
        self.node = node

    async def run(self, **asked: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """One runAgent: its events, and how it ended ({"done": ...} or {"error": ...})."""
        assert self.node.stdin is not None
        self.node.stdin.write((json.dumps(asked) + "\n").encode())
        events = []
        async for line in self.lines():
            said = json.loads(line)
            if "event" in said:
                events.append(said["event"])
            else:
                return events, said
        raise AssertionError("the client ended")

    async def lines(self) -> AsyncIterator[str]:
        assert self.node.stdout is not None
        while True:
            async with asyncio.timeout(60):
                line = await self.node.stdout.readline()
            if not line:
                return
            yield line.decode()


@asynccontextmanager
async def thread(
    ag_ui_client: Path,
    http: httpx.AsyncClient,
    token: str | None = TOKEN,
    thread_id: str | None = None,
) -> AsyncIterator[Thread]:
    node = await asyncio.create_subprocess_exec(
        shutil.which("node") or "node",
        "drive.mjs",
        f"{http.base_url}/ag-ui",
        token or "",
        thread_id or f"thread-{uuid.uuid4().hex[:12]}",
        cwd=ag_ui_client,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield Thread(node)
    finally:
        assert node.stdin is not None
        node.stdin.close()
        await asyncio.wait_for(node.wait(), 30)


def agent_file(tmp_path: Path, script: list[ScriptedTurn], **more: Any) -> Path:
    path = tmp_path / "agent.json"
    model = {
        "provider": "scripted",
        "script": [t.model_dump(mode="json") for t in script],
        "retry": FAST_MODEL_RETRY.model_dump(mode="json"),
    }
    path.write_text(json.dumps({"label": "support", "model": model, **more}))
    return path


@asynccontextmanager
async def served(client: Client, task_queue: str, path: Path) -> AsyncIterator[httpx.AsyncClient]:
    address = client.service_client.config.target_host
    worker = build_worker(client, task_queue, **TEST_WORKER_OPTIONS)
    words = ("--address", address, "--task-queue", task_queue, "--agent", str(path))
    async with worker, serving(*words) as http:
        yield http


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


SUPPORT_SCRIPT = [
    # Turn 1: a tool of the worker's and the client's own, in one reply.
    turn(
        call("search_orders", id="call_search", email="ada@example.com"),
        call("get_location", id="call_location"),
    ),
    turn(text="You are in {last_tool_result.city}."),
    # Turn 2.
    turn(text="Goodbye."),
    # Turn 3: a call with side effects waits for a person.
    turn(call("cancel_order", id="call_cancel", order_id=1042, reason="asked")),
    turn(text="Cancelled."),
]


async def test_a_thread_of_turns_client_tools_and_an_approval_through_the_official_client(
    client: Client, task_queue: str, tmp_path: Path, ag_ui_client: Path
) -> None:
    path = agent_file(tmp_path, SUPPORT_SCRIPT, tools=["search_orders", "cancel_order"])
    async with served(client, task_queue, path) as http, thread(ag_ui_client, http) as chat:
        # The first run: the model calls a tool of the worker's and the client's; the run
        # finishes with the client's call pending, for the client to answer.
        events, ended = await chat.run(user="Where am I?", tools=[LOCATION_TOOL])
        assert "done" in ended, ended
        assert kinds(events)[:2] == ["RUN_STARTED", "STEP_STARTED"]
        assert events[-1]["type"] == "RUN_FINISHED"
        assert events[-1]["outcome"] == {
            "type": "success",
            "pendingToolCallIds": ["call_location"],
        }
        started = {
            e["toolCallId"]: e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"
        }
        assert started["call_location"] == "get_location"

        # The client answers its tool with a tool message in the next input.
        events, ended = await chat.run(
            tool={"toolCallId": "call_location", "content": json.dumps({"city": "Paris"})},
            tools=[LOCATION_TOOL],
        )
        assert "done" in ended, ended
        results = {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
        assert results["call_location"] == "ok"
        assert ended["done"]["result"] == "You are in Paris."
        texts = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
        assert "".join(texts) == "You are in Paris."
        assert kinds(events)[-1] == "RUN_FINISHED"

        # A follow-up message on the same thread is the conversation's next turn.
        events, ended = await chat.run(user="Thanks!")
        assert ended["done"]["result"] == "Goodbye."

        # A call that waits for a person ends the run with an interrupt; resume decides it.
        events, ended = await chat.run(user="Cancel order 1042.")
        outcome = events[-1]["outcome"]
        assert outcome["type"] == "interrupt", events[-1]
        (interrupt,) = outcome["interrupts"]
        assert interrupt["id"] == "approval:call_cancel"
        assert interrupt["toolCallId"] == "call_cancel"
        assert ended["done"]["interrupts"][0]["id"] == "approval:call_cancel"
        resume = [
            {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approve": True}}
        ]
        events, ended = await chat.run(resume=resume)
        assert "done" in ended, ended
        assert ended["done"]["result"] == "Cancelled."
        assert [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"] == [
            "cancel_order"
        ]


async def test_a_wrong_or_missing_token_is_refused_and_starts_nothing(
    client: Client, task_queue: str, tmp_path: Path, ag_ui_client: Path
) -> None:
    path = agent_file(tmp_path, [turn(text="never")])
    async with served(client, task_queue, path) as http:
        for token in ("wrong-token-0123456789", None):
            thread_id = f"refused-{uuid.uuid4().hex[:12]}"
            async with thread(ag_ui_client, http, token, thread_id) as chat:
                events, ended = await chat.run(user="hello")
                assert events == [] and ended["status"] == 401, ended
            assert (await http.get(f"/api/runs/ag-ui-{thread_id}")).status_code == 404
