"""AG-UI on `durable-agent serve --agent` (serving/ag_ui.py), driven by the official
@ag-ui/client from npm: its HttpAgent checks the order of the events itself, and keeps the
thread's messages as a front end would. Against real serve processes and the session's dev
server, with a worker of the test's queue."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from ag_ui.core import ToolMessage
from temporalio.client import Client

import tests.guardrails_for_tests as guards
from durable_agent.demo import tools as demo_tools
from durable_agent.serving import ag_ui, ag_ui_events
from durable_agent.serving.ag_ui_events import AgUiRun
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.decisions import ApprovalCriteria
from durable_agent.workflows.events import AgentEvent
from durable_agent.workflows.inputs import AutoMode, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings, ScriptedTurn
from tests import fake_anthropic
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, call, npm_installed, turn
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
    where = tmp_path_factory.mktemp("ag-ui-client")
    return npm_installed(AG_UI_CLIENT, where, ("package.json", "tsconfig.json", "drive.mjs"))


class Thread:
    """One AG-UI thread, driven by HttpAgent in a Node process (tests/ag_ui_client/drive.mjs)."""

    def __init__(self, node: asyncio.subprocess.Process) -> None:
        self.node = node

    async def run(
        self, on_event: Callable[[dict[str, Any]], None] | None = None, **asked: Any
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """One runAgent: its events (each given to `on_event` as it comes), and how it ended
        ({"done": ...} or {"error": ...})."""
        assert self.node.stdin is not None
        self.node.stdin.write((json.dumps(asked) + "\n").encode())
        events = []
        async for line in self.lines():
            said = json.loads(line)
            if "event" not in said:
                return events, said
            events.append(said["event"])
            if on_event is not None:
                on_event(said["event"])
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
        # Arguments longer than an event carries (1,000 characters): the client gets them whole.
        call("get_location", id="call_location", why="x" * 1_500),
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
        assert started == {"call_search": "search_orders", "call_location": "get_location"}
        arguments = {e["toolCallId"]: e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS"}
        assert json.loads(arguments["call_location"]) == {"why": "x" * 1_500}
        results = {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}

        # The client answers its tool with a tool message in the next input.
        events, ended = await chat.run(
            tool={"toolCallId": "call_location", "content": json.dumps({"city": "Paris"})},
            tools=[LOCATION_TOOL],
        )
        assert "done" in ended, ended
        results.update(
            {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
        )
        # The worker's tool's result, in the one run or the other (it runs beside the client's
        # call); none for the client's call: the client has it, it sent it.
        assert list(results) == ["call_search"]
        # ... as the model read it: the tool's own answer, not a bare "ok".
        assert json.loads(results["call_search"]) == demo_tools.search_orders("ada@example.com")
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


async def test_the_answer_streams_to_the_client_as_the_model_writes_it(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    ag_ui_client: Path,
    claude: fake_anthropic.FakeAnthropic,
) -> None:
    answer = "Order 1042 left the warehouse on Monday and arrives on Thursday, by courier."
    claude.script.append(fake_anthropic.Reply(answer, pause_after=6))
    path = tmp_path / "agent.json"
    model = {"provider": "anthropic", "model": "claude-fake-sonnet", "stream": True}
    path.write_text(json.dumps({"model": model}))

    def shown(event: dict[str, Any]) -> None:
        if event["type"] == "TEXT_MESSAGE_CONTENT" and not claude.hold.is_set():
            # The model is held mid-reply: what came first is a part of its answer.
            assert answer.startswith(event["delta"]) and event["delta"] != answer
            claude.hold.set()

    async with served(client, task_queue, path) as http, thread(ag_ui_client, http) as chat:
        events, ended = await chat.run(shown, user="Where is order 1042?")
    assert "done" in ended, ended
    assert claude.hold.is_set()
    contents = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert "".join(contents) == answer and len(contents) > 1
    assert ended["done"]["result"] == answer
    assert [m["content"] for m in ended["done"]["newMessages"]] == [answer]


def run_input(thread_id: str, *messages: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": f"run-{uuid.uuid4().hex[:8]}",
        "messages": list(messages),
        **more,
    }


def user(text: str) -> dict[str, Any]:
    return {"id": f"user-{uuid.uuid4().hex[:8]}", "role": "user", "content": text}


async def sse(
    http: httpx.AsyncClient, body: dict[str, Any], last: int | None = None
) -> list[tuple[int | None, dict[str, Any]]]:
    """One AG-UI run read whole over SSE: each event with its id (None where it has none)."""
    headers = {} if last is None else {"Last-Event-ID": str(last)}
    events: list[tuple[int | None, dict[str, Any]]] = []
    event_id: int | None = None
    async with http.stream("POST", "/ag-ui", json=body, headers=headers, timeout=60) as answer:
        assert answer.status_code == 200, await answer.aread()
        async for line in answer.aiter_lines():
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                events.append((event_id, json.loads(line[6:])))
                event_id = None
    return events


def resumed_from(full: list[tuple[int | None, dict[str, Any]]], cut: int) -> list[dict[str, Any]]:
    """What a client that got `full` up to its event `cut` gets on resuming: the events after
    it, less the ends of the steps it saw begin (a stream shows only what it began)."""
    begun = {e["stepName"] for _, e in full[: cut + 1] if e["type"] == "STEP_STARTED"}
    return [
        e
        for _, e in full[cut + 1 :]
        if not (e["type"] == "STEP_FINISHED" and e["stepName"] in begun)
    ]


async def test_a_dropped_stream_resumes_from_its_last_id_on_another_serve_without_loss_or_repeat(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = agent_file(tmp_path, SUPPORT_SCRIPT, tools=["search_orders"])
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    first = run_input(thread_id, user("Where am I?"), tools=[LOCATION_TOOL])
    async with served(client, task_queue, path) as http:
        full = await sse(http, first)
        assert full[0][1]["type"] == "RUN_STARTED" and full[0][0] == -1
        assert full[-1][1]["outcome"]["pendingToolCallIds"] == ["call_location"]
        # Dropped after any event with an id, the client resumes from that id and gets the
        # rest of the run once.
        for cut, (event_id, _) in enumerate(full[:-1]):
            if event_id is not None:
                again = await sse(http, first, last=event_id)
                assert again[0][1]["type"] == "RUN_STARTED"
                assert [e for _, e in again[1:]] == resumed_from(full, cut), cut

    # serve stopped; another one, with nothing of this thread in its memory, carries it on.
    async with served(client, task_queue, path) as http:
        assert [e for _, e in await sse(http, first, last=-1)] == [e for _, e in full]
        answered = run_input(
            thread_id,
            user("Where am I?"),
            {
                "id": "t1",
                "role": "tool",
                "toolCallId": "call_location",
                "content": '{"city": "Oslo"}',
            },
            tools=[LOCATION_TOOL],
        )
        second = await sse(http, answered)
        assert second[-1][1]["result"] == "You are in Oslo."
        start = second[0][0]
        assert start is not None
        assert [e for _, e in await sse(http, answered, last=start)][1:] == [
            e for _, e in second[1:]
        ]


async def test_what_a_client_gets_wrong_is_refused_before_anything_starts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = agent_file(tmp_path, SUPPORT_SCRIPT, tools=["search_orders"])
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    tool_result = {"id": "t1", "role": "tool", "toolCallId": "call_location", "content": "{}"}
    foreign = {"type": "object", "$schema": "http://schemas.example.com/fetch-me"}
    outside = {"type": "object", "properties": {"a": {"$ref": "http://example.com/a.json"}}}
    refused: list[tuple[dict[str, str], bytes | dict[str, Any], int]] = [
        ({}, b"{not json", 422),
        ({}, {"runId": "r", "messages": [user("hi")]}, 422),
        ({}, run_input("a thread/with a slash", user("hi")), 422),
        ({}, run_input(thread_id, {"id": "a", "role": "assistant", "content": "hi"}), 422),
        ({}, run_input(thread_id, user("   ")), 422),
        (
            {},
            run_input(thread_id, user("hi"), tools=[{**LOCATION_TOOL, "parameters": foreign}]),
            422,
        ),
        (
            {},
            run_input(thread_id, user("hi"), tools=[{**LOCATION_TOOL, "parameters": outside}]),
            422,
        ),
        ({}, run_input(thread_id, user("hi"), tools=[{**LOCATION_TOOL, "name": "no spaces"}]), 422),
        # NaN is no JSON (json.dumps writes it): the tool's schema in the run had null for it.
        (
            {},
            run_input(
                thread_id,
                user("hi"),
                tools=[
                    {**LOCATION_TOOL, "parameters": {"properties": {"a": {"default": math.nan}}}}
                ],
            ),
            422,
        ),
        ({}, run_input(thread_id, user("hi"), tool_result), 404),
        (
            {},
            run_input(
                thread_id, user("hi"), resume=[{"interruptId": "plan", "status": "cancelled"}]
            ),
            404,
        ),
        ({"Last-Event-ID": "3"}, run_input(thread_id, user("hi")), 404),
        ({"Last-Event-ID": "three"}, run_input(thread_id, user("hi")), 422),
        # int() read these as 3 (or 30): a resume from an id no stream sent.
        ({"Last-Event-ID": "+3"}, run_input(thread_id, user("hi")), 422),
        ({"Last-Event-ID": "3_0"}, run_input(thread_id, user("hi")), 422),
        ({"Last-Event-ID": "3:1:+0:5"}, run_input(thread_id, user("hi")), 422),
        ({"Last-Event-ID": "3:-1:0:5"}, run_input(thread_id, user("hi")), 422),
        ({}, b"{" + b" " * 4_100_000 + b"}", 413),
        # A lone surrogate parses, but writes nowhere: not into a run's input, nor an event.
        ({}, run_input(thread_id, user("hi \ud800")), 422),
        ({}, {**run_input(thread_id, user("hi")), "runId": "\ud800"}, 422),
    ]
    async with served(client, task_queue, path) as http:
        for headers, body, status in refused:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers = {**headers, "Content-Type": "application/json"}
            answer = await http.post("/ag-ui", content=content, headers=headers)
            assert answer.status_code == status, (
                body if isinstance(body, dict) else "",
                answer.text,
            )
            assert "detail" in answer.json()
        # JSON that Python cannot read as text is 422 with the reason (FastAPI's was a 400,
        # "There was an error parsing the body").
        asking = json.dumps(run_input(thread_id, user("hi"))).encode()
        explained = [
            (asking.replace(b'"hi"', b'"h\xffi"'), "the body is not UTF-8: byte 0xff at offset "),
            (
                asking[:-1] + b', "state": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                "nested too deep",
            ),
        ]
        # A client's tool named as another tool of the run: refused here, where the run started
        # and failed at once (RUN_ERROR).
        for tools, reason in [
            ([{**LOCATION_TOOL, "name": "finish"}], "'finish': a built-in tool of every run"),
            (
                [{**LOCATION_TOOL, "name": "search_orders"}],
                "'search_orders': one of the worker's tools",
            ),
            ([LOCATION_TOOL, LOCATION_TOOL], "'get_location': another callback tool"),
        ]:
            body = run_input(thread_id, user("hi"), tools=tools)
            explained.append((json.dumps(body).encode(), reason))
        for content, reason in explained:
            headers = {"Content-Type": "application/json"}
            answer = await http.post("/ag-ui", content=content, headers=headers)
            assert answer.status_code == 422, answer.text
            assert reason in answer.json()["detail"], answer.text
        assert (await http.get(f"/api/runs/ag-ui-{thread_id}")).status_code == 404

        # A thread that waits for its client's tool: a new message, a result for a call that
        # does not wait, a decision on nothing are refused, and it still waits.
        first = run_input(thread_id, user("Where am I?"), tools=[LOCATION_TOOL])
        waiting = await sse(http, first)
        for body, status in [
            (run_input(thread_id, user("Hello?")), 409),
            (run_input(thread_id, {**tool_result, "toolCallId": "call_other"}), 409),
            (run_input(thread_id, {**tool_result, "content": "[" * 10_000 + "]" * 10_000}), 422),
            (
                run_input(
                    thread_id,
                    resume=[
                        {
                            "interruptId": "approval:call_x",
                            "status": "resolved",
                            "payload": {"approve": True},
                        }
                    ],
                ),
                409,
            ),
            (
                run_input(
                    thread_id,
                    resume=[
                        {"interruptId": "approval:call_x", "status": "resolved", "payload": "yes"}
                    ],
                ),
                422,
            ),
        ]:
            answer = await http.post("/ag-ui", json=body)
            assert answer.status_code == status, answer.text
        pending = (await http.get(f"/api/runs/ag-ui-{thread_id}")).json()["pending_callbacks"]
        assert [call["call_id"] for call in pending] == ["call_location"]

        # Cancelled (over the HTTP API), the run a client resumes ends as cancelled.
        assert (await http.post(f"/api/runs/ag-ui-{thread_id}/cancel")).status_code == 202
        last = waiting[-1][0]
        assert last is not None
        after = await sse(http, first, last=last)
        assert after[-1][1]["type"] == "RUN_FINISHED"
        assert after[-1][1]["outcome"] == {"type": "cancelled"}
        answer = await http.post("/ag-ui", json=run_input(thread_id, user("Hello?")))
        assert answer.status_code == 409, answer.text


async def test_a_run_resumed_past_the_conversations_last_event_is_refused_and_holds_no_place(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It waited, silent, holding one of the thread's places, until the conversation published
    that many events: for a thread that waits for its client, for ever."""
    monkeypatch.setenv("AGENT_API_MAX_RUN_STREAMS", "2")
    path = agent_file(tmp_path, SUPPORT_SCRIPT, tools=["search_orders"])
    first = run_input(f"thread-{uuid.uuid4().hex[:12]}", user("Where am I?"), tools=[LOCATION_TOOL])
    async with served(client, task_queue, path) as http:
        full = await sse(http, first)
        last = max(event_id for event_id, _ in full if event_id is not None)
        # More refusals than the thread has places: one that held its place made the next 429.
        for past in (f"{last + 500}", f"{last + 500}:1:0:5", f"{last + 9000}"):
            refused = await http.post(
                "/ag-ui", json=first, headers={"Last-Event-ID": past}, timeout=10
            )
            assert refused.status_code == 416, refused.text
            assert refused.json()["detail"].startswith(
                f"Last-Event-ID {past} is past the run's last event ("
            )
        again = await sse(http, first, last=-1)
        assert [e for _, e in again] == [e for _, e in full]


async def test_serve_restarted_mid_reply_the_client_resumes_on_the_next_without_loss_or_repeat(
    client: Client, task_queue: str, tmp_path: Path, claude: fake_anthropic.FakeAnthropic
) -> None:
    answer = "Order 1042 left the warehouse on Monday and arrives on Thursday, by courier."
    claude.script.append(fake_anthropic.Reply(answer, pause_after=6))
    path = tmp_path / "agent.json"
    model = {"provider": "anthropic", "model": "claude-fake-sonnet", "stream": True}
    path.write_text(json.dumps({"model": model}))
    body = run_input(f"thread-{uuid.uuid4().hex[:12]}", user("Where is order 1042?"))
    address = client.service_client.config.target_host
    words = ("--address", address, "--task-queue", task_queue, "--agent", str(path))
    got: list[tuple[str | None, dict[str, Any]]] = []
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        async with (
            serving(*words) as http,
            http.stream("POST", "/ag-ui", json=body, timeout=60) as answered,
        ):
            event_id = None
            async for line in answered.aiter_lines():
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    got.append((event_id, json.loads(line[6:])))
                    if got[-1][1]["type"] == "TEXT_MESSAGE_CONTENT":
                        # The model is mid-reply (held): serve stops, as in a deploy.
                        http.process.terminate()  # type: ignore[attr-defined]
                    event_id = None
        assert [e["type"] for _, e in got][-1] == "TEXT_MESSAGE_CONTENT"  # no end: cut off
        last = next(i for i, _ in reversed(got) if i is not None)
        assert last.count(":") == 3  # the offset, and where the client is in the text
        claude.hold.set()
        async with serving(*words) as http:
            headers = {"Last-Event-ID": last}
            async with http.stream("POST", "/ag-ui", json=body, headers=headers) as answered:
                rest = [
                    json.loads(line[6:])
                    async for line in answered.aiter_lines()
                    if line.startswith("data: ")
                ]
    assert [e["type"] for e in rest][:2] == ["RUN_STARTED", "TEXT_MESSAGE_START"]
    assert rest[-1]["type"] == "RUN_FINISHED" and rest[-1]["result"] == answer
    text = [
        e["delta"]
        for _, e in got + [(None, e) for e in rest]
        if e["type"] == "TEXT_MESSAGE_CONTENT"
    ]
    assert "".join(text) == answer  # each character once, across the two serves
    message_ids = {e["messageId"] for _, e in got + [(None, e) for e in rest] if "messageId" in e}
    assert len(message_ids) == 1


async def test_a_plan_waits_for_a_person_as_an_interrupt_that_resume_decides(
    client: Client, task_queue: str, tmp_path: Path, ag_ui_client: Path
) -> None:
    steps = ["Look up order 1042", "Say where it is"]
    script = [turn(call("submit_plan", id="call_plan", steps=steps)), turn(text="It shipped.")]
    path = agent_file(tmp_path, script, plan=True)
    async with served(client, task_queue, path) as http, thread(ag_ui_client, http) as chat:
        events, ended = await chat.run(user="Where is order 1042?")
        outcome = events[-1]["outcome"]
        assert outcome["type"] == "interrupt", events[-1]
        (interrupt,) = outcome["interrupts"]
        assert (interrupt["id"], interrupt["reason"]) == ("plan", "plan_approval")
        assert interrupt["message"] == "\n".join(steps)
        # HttpAgent refuses a next run that does not answer the interrupt.
        _, refused = await chat.run(user="Hello?")
        assert "pending interrupt" in refused["error"], refused
        resume = [{"interruptId": "plan", "status": "resolved", "payload": {"approve": True}}]
        events, ended = await chat.run(resume=resume)
        assert ended["done"]["result"] == "It shipped.", ended


async def test_two_calls_of_the_clients_tools_in_one_reply_end_a_run_each(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    calls = [call("get_location", id="call_1", n=1), call("get_location", id="call_2", n=2)]
    path = agent_file(tmp_path, [turn(*calls), turn(text="Both answered.")])
    thread_id = f"thread-{uuid.uuid4().hex[:12]}"
    messages = [user("Where am I?")]
    async with served(client, task_queue, path) as http:
        for answering in ("call_1", "call_2"):
            ran = await sse(http, run_input(thread_id, *messages, tools=[LOCATION_TOOL]))
            assert ran[-1][1]["outcome"]["pendingToolCallIds"] == [answering]
            result = {"id": answering, "role": "tool", "toolCallId": answering, "content": "{}"}
            messages.append(result)
        ran = await sse(http, run_input(thread_id, *messages, tools=[LOCATION_TOOL]))
        assert ran[-1][1]["result"] == "Both answered."


NOW = datetime(2026, 12, 7, tzinfo=UTC)


def judged_agent_file(tmp_path: Path, script: list[ScriptedTurn], *judge: ScriptedTurn) -> Path:
    """An agent whose `cancel_order` calls auto mode's judge reviews before a person."""
    cancels = ApprovalCriteria(effect="cancels a customer's order", approve_when="one order")
    auto_mode = AutoMode(
        judge=ModelSettings(provider="scripted", model="judge-1", script=list(judge)),
        criteria={"cancels": cancels},
        tools={"cancel_order": "cancels"},
    )
    policy = ToolApprovalPolicy(auto_mode=auto_mode).model_dump(mode="json", exclude_none=True)
    return agent_file(tmp_path, script, tools=["cancel_order"], tool_approval=policy)


def verdict(decision: str, reason: str) -> ScriptedTurn:
    return turn(call("verdict", decision=decision, confidence=0.95, reason=reason))


async def test_a_call_auto_modes_judge_reviews_interrupts_only_when_it_goes_to_a_person(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The judge decides first: a call it approves runs within the AG-UI run, with its verdict
    as a CUSTOM event; one it escalates ends the run with the interrupt a person answers. (An
    interrupt at the request, as before, ended the run while the judge worked, and a resume
    once it had decided was refused.)"""
    script = [
        turn(call("cancel_order", id="call_one", order_id=1042, reason="asked")),
        turn(text="Cancelled 1042."),
        turn(call("cancel_order", id="call_two", order_id=1043, reason="asked")),
        turn(text="Cancelled 1043."),
    ]
    judge = [verdict("approve", "one order, asked for"), verdict("escalate", "not sure")]
    path = judged_agent_file(tmp_path, script, *judge)
    thread_id = f"judged-{uuid.uuid4().hex[:8]}"
    async with served(client, task_queue, path) as http:
        events = [e for _, e in await sse(http, run_input(thread_id, user("Cancel 1042.")))]
        assert events[-1]["outcome"] == {"type": "success"}, events[-1]
        assert events[-1]["result"] == "Cancelled 1042."
        (judged,) = [e["value"] for e in events if e["type"] == "CUSTOM"]
        assert (judged["kind"], judged["call_id"], judged["outcome"]) == (
            "judge_verdict",
            "call_one",
            "approved",
        )
        assert [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["call_one"]

        events = [e for _, e in await sse(http, run_input(thread_id, user("And 1043.")))]
        outcome = events[-1]["outcome"]
        assert outcome["type"] == "interrupt", events[-1]
        assert [i["id"] for i in outcome["interrupts"]] == ["approval:call_two"]
        verdicts = [e["value"]["outcome"] for e in events if e["type"] == "CUSTOM"]
        assert verdicts == ["escalated"]
        assert not [e for e in events if e["type"] == "TOOL_CALL_RESULT"]

        approve = {"interruptId": "approval:call_two", "status": "resolved"}
        resume = [{**approve, "payload": {"approve": True}}]
        # An entry the client got wrong refuses the resume whole, before any entry is sent
        # (the approval before it was, and this resume's was then refused as decided).
        wrong = [*resume, {**approve, "payload": {"approve": "yes"}}]
        refused = await http.post("/ag-ui", json=run_input(thread_id, resume=wrong))
        assert refused.status_code == 422, refused.text
        events = [e for _, e in await sse(http, run_input(thread_id, resume=resume))]
        assert events[-1]["result"] == "Cancelled 1043.", events[-1]
        assert [e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"] == ["call_two"]


@pytest.mark.parametrize(
    ("after", "interrupts"),
    [
        # The judge escalated: a person decides.
        ([("judge_verdict", "escalated")], True),
        # An operator turned auto mode off while it worked: the call went to a person, and the
        # verdict that came after is late.
        ([("judge_verdict", "late")], True),
        # A person decided it elsewhere first: the verdict is late, and nothing waits.
        ([("approval_decided", "approved"), ("judge_verdict", "late")], False),
        ([("judge_verdict", "approved")], False),
        ([("judge_verdict", "denied")], False),
    ],
)
def test_a_judged_call_interrupts_the_run_by_its_events_alone(
    after: list[tuple[str, str]], interrupts: bool
) -> None:
    """Where a stretch ends depends on its events, never on when a serve asked (a client that
    resumes elsewhere gets the same stretch): the request says the judge reviews it first."""
    shown = AgUiRun("t", "r", "r")
    shown.started(-1)
    asked = {"call_id": "call_1", "tool": "cancel_order", "arguments": "{}"}
    events = [("approval_requested", "judge"), *after]
    for offset, (kind, outcome) in enumerate(events):
        event = AgentEvent.model_validate(
            {"kind": kind, "step": 1, "at": NOW, **asked, "outcome": outcome}
        )
        sent = shown.event(offset, event)
        assert shown.finished == (interrupts and offset == len(events) - 1)
        assert ('"interrupt"' in sent) == shown.finished
    remembered = AgUiRun("t", "r", "r")
    remembered.started(-1)
    request = {"kind": "approval_requested", "step": 1, "at": NOW, **asked}
    remembered.event(0, AgentEvent.model_validate({**request, "outcome": "remembered"}))
    assert not remembered.finished


REFUSAL = "Error: the result of read_note was withheld by guardrail no_secrets: a secret"
CHECKED_CALL = {"call_id": "call_1", "tool": "read_note"}
STARTED = ("tool_call_started", {**CHECKED_CALL, "arguments": "{}"})
FINISHED = ("tool_call_finished", {**CHECKED_CALL, "outcome": "ok", "checks": 2})
PASSED = ("guardrail", {**CHECKED_CALL, "outcome": "passed", "text": "tool_result guardrail a"})
PASSED_LAST = ("guardrail", {**PASSED[1], "result": "note k1: nothing secret"})
TRIPPED = (
    "guardrail",
    {**CHECKED_CALL, "outcome": "tripped", "text": "tool_result guardrail no_secrets: a secret"},
)
TRIPPED_FIRST = ("guardrail", {**TRIPPED[1], "result": REFUSAL})
NOT_CHECKED, PASSED_UNSAID = "NOT_CHECKED", "PASSED"
"""The table's names of ag_ui_events' texts."""


@pytest.mark.parametrize(
    ("stretches", "results"),
    [
        # Both guardrails passed: the result the model read, at the last verdict.
        ([[STARTED, FINISHED, PASSED, PASSED_LAST]], [(3, "note k1: nothing secret")]),
        # One tripped: the refusal the model read, whichever order the verdicts came in.
        ([[STARTED, FINISHED, TRIPPED_FIRST, PASSED]], [(3, REFUSAL)]),
        ([[STARTED, FINISHED, PASSED, TRIPPED_FIRST]], [(3, REFUSAL)]),
        # A verdict that carries no result (none should): never the bare "ok".
        ([[STARTED, FINISHED, PASSED, PASSED]], [(3, PASSED_UNSAID)]),
        (
            [[STARTED, FINISHED, PASSED, TRIPPED]],
            [(3, "Error: the result of read_note was withheld: " + TRIPPED[1]["text"])],
        ),
        # The run failed, or was cancelled, before the verdicts: not checked, said before the end.
        (
            [[STARTED, FINISHED, PASSED, ("failed", {"outcome": "AgentBudgetExceeded"})]],
            [(3, NOT_CHECKED)],
        ),
        ([[STARTED, FINISHED, ("failed", {"outcome": "cancelled"})]], [(2, NOT_CHECKED)]),
        # The stretch ended waiting for a client's tool: the next one, which recalls the call
        # from the events before it, shows the verdict.
        (
            [
                [STARTED, FINISHED, ("callback_requested", {"call_id": "call_2"})],
                [("callback_answered", {"call_id": "call_2"}), PASSED, TRIPPED_FIRST],
            ],
            [(5, REFUSAL)],
        ),
        # A client's tool's call the client answered gets none, checked or not: it has the
        # result, it sent it.
        (
            [
                [
                    STARTED,
                    FINISHED,
                    ("callback_answered", {"call_id": "call_3"}),
                    ("tool_call_finished", {"call_id": "call_3", "outcome": "ok", "checks": 1}),
                    ("callback_requested", {"call_id": "call_2"}),
                ],
                [
                    ("callback_answered", {"call_id": "call_2"}),
                    ("guardrail", {**PASSED_LAST[1], "call_id": "call_3"}),
                    PASSED,
                    TRIPPED_FIRST,
                ],
            ],
            [(8, REFUSAL)],
        ),
        # ... as does a stretch a client resumes after the call's end.
        ([[STARTED, FINISHED], [PASSED, PASSED_LAST]], [(3, "note k1: nothing secret")]),
    ],
)
def test_a_checked_calls_result_shows_what_the_model_read_once_its_guardrails_answered(
    stretches: list[list[tuple[str, dict[str, Any]]]], results: list[tuple[int, str]]
) -> None:
    """A call whose result the run's tool-result guardrails check after its end: its one
    TOOL_CALL_RESULT waits for their verdicts, and never says "ok" nor shows what no guardrail
    passed. A stretch recalls the events before it (serving/ag_ui.py reads them back)."""
    shown: list[tuple[int, str]] = []
    events = [
        AgentEvent.model_validate({"kind": kind, "step": 1, "at": NOW, **fields})
        for stretch in stretches
        for kind, fields in stretch
    ]
    offset = 0
    for stretch in stretches:
        run = AgUiRun("t", "r", "r")
        for earlier in events[:offset]:
            run.recall(earlier)
        run.started(offset - 1)
        for _ in stretch:
            sent = sse_data(run.event(offset, events[offset]))
            shown += [(offset, e["content"]) for e in sent if e["type"] == "TOOL_CALL_RESULT"]
            ends = [i for i, e in enumerate(sent) if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
            assert ends in ([], [len(sent) - 1])  # a result the end gives comes before it
            offset += 1
    texts = {name: getattr(ag_ui_events, name, name) for name in (NOT_CHECKED, PASSED_UNSAID)}
    assert shown == [(offset, texts.get(content, content)) for offset, content in results]


async def test_a_result_a_guardrail_withheld_shows_as_the_refusal_the_model_read(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run with a tool-result guardrail: each worker call's one result comes after its
    verdict, as the model read it (the refusal in a withheld one's place), never "ok"."""
    script = [
        turn(
            call("read_note", id="call_note", key="k1"),
            call("search_orders", id="call_search", email="ada@example.com"),
        ),
        turn(text="The note holds something I may not read."),
    ]
    policy = {"tool_results": ["no_secrets"]}
    path = agent_file(tmp_path, script, tools=["read_note", "search_orders"], guardrails=policy)
    body = run_input(f"thread-{uuid.uuid4().hex[:12]}", user("Read note k1, find my orders."))
    async with served(client, task_queue, path) as http:
        events = [e for _, e in await sse(http, body)]
    assert guards.SECRET not in json.dumps(events)
    assert events[-1]["type"] == "RUN_FINISHED"
    results = [(e["toolCallId"], e["content"]) for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert dict(results) == {
        "call_note": "Error: the result of read_note was withheld by guardrail no_secrets: "
        "the result holds a secret",
        "call_search": json.dumps(demo_tools.search_orders("ada@example.com")),
    }
    assert len(results) == 2
    # Each after its call's verdict.
    for call_id, _ in results:
        verdict = next(
            i
            for i, e in enumerate(events)
            if e["type"] == "CUSTOM" and e["value"].get("call_id") == call_id
        )
        shown = next(
            i
            for i, e in enumerate(events)
            if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == call_id
        )
        assert verdict < shown


def sse_data(chunk: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in chunk.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize(
    ("content", "read"),
    [
        ('{"city": "Paris", "km": 1.5}', {"city": "Paris", "km": 1.5}),
        ("[1, 2]", [1, 2]),
        ("Paris", "Paris"),
        # No JSON (RFC 8259), though Python reads them as floats, which reached the run as null.
        ("NaN", "NaN"),
        ('{"km": Infinity}', '{"km": Infinity}'),
        ("1e400", "1e400"),
    ],
)
def test_a_client_tools_result_is_read_as_json_only_where_it_is_json(
    content: str, read: Any
) -> None:
    message = ToolMessage(id="m1", role="tool", content=content, tool_call_id="call_1")
    assert ag_ui._result(message) == read


async def test_a_thread_whose_id_is_another_kind_of_workflow_is_refused_at_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`ag-ui-<threadId>` taken by a workflow that is no agent's: its status query waited 30 s
    for a 502, and a resume's update without end."""
    thread_id = f"taken-{uuid.uuid4().hex[:8]}"
    other = await client.start_workflow(
        "SomeoneElsesWorkflow", id=f"ag-ui-{thread_id}", task_queue=f"none-{uuid.uuid4()}"
    )
    path = agent_file(tmp_path, [turn(text="never said")])
    try:
        async with served(client, task_queue, path) as http:
            resume = [{"interruptId": "plan", "status": "resolved", "payload": {"approve": True}}]
            for body in (run_input(thread_id, user("hi")), run_input(thread_id, resume=resume)):
                refused = await http.post("/ag-ui", json=body, timeout=10)
                assert refused.status_code == 409, refused.text
                assert "another kind" in refused.text
    finally:
        await other.terminate()
