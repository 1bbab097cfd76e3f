"""The HTTP API as its users meet it: `durable-agent serve` in a subprocess, on a real dev
server, asked over HTTP (serving/http_api.py, docs/http-api.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import httpx2 as httpx
import pytest
from temporalio.client import Client

from durable_agent.activities.pricing import DEMO_PRICE
from durable_agent.client.agent_client import AgentClient
from durable_agent.client.contract import example_input
from durable_agent.demo import script as demo
from durable_agent.serving import http_api
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.input_limits import MAX_MESSAGE_CHARS
from durable_agent.workflows.inputs import AgentInput, Limits, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings, ScriptedTurn
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, scripted_input, turn
from tests.serve_process import TOKEN, serving
from tests.server_requests import served

JSON_BODY = {"content-type": "application/json"}


async def sse(http: httpx.AsyncClient, workflow_id: str, last: int | None = None) -> list[dict]:
    """The run's events as the stream sends them, to its `done`."""
    headers = {} if last is None else {"Last-Event-ID": str(last)}
    events: list[dict[str, Any]] = []
    async with http.stream(
        "GET", f"/api/runs/{workflow_id}/events", headers=headers, timeout=60
    ) as stream:
        assert stream.status_code == 200, await stream.aread()
        assert stream.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, Any] = {}
        async for line in stream.aiter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields:
                events.append(fields)
                fields = {}
    return events


def plan_input() -> dict[str, Any]:
    model = ModelSettings(provider="scripted", script=demo.demo_plan_script(), price=DEMO_PRICE)
    agent_input = AgentInput(prompt="Where is my order?", plan=True, model=model)
    return agent_input.model_dump(mode="json", exclude_defaults=True)


async def test_every_request_needs_the_token(api: httpx.AsyncClient) -> None:
    for path in ("/api/runs", "/openapi.json", "/api/runs/x/events"):
        for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
            refused = await api.get(path, headers=headers)
            assert refused.status_code == 401, (path, refused.text)
            assert refused.headers["www-authenticate"] == "Bearer"
    schema = (await api.get("/openapi.json")).json()
    assert {"/api/runs", "/api/runs/{workflow_id}/decisions"} <= set(schema["paths"])
    # A given token is not printed; the server says where it listens, on 127.0.0.1.
    said = "".join(api.said)  # type: ignore[attr-defined]
    assert TOKEN not in said and "http://127.0.0.1:" in said
    assert f"console: {api.base_url}/#token=<$AGENT_API_TOKEN>" in said


async def test_a_run_started_over_http_streams_its_events_and_resumes_without_gap_or_repeat(
    api: httpx.AsyncClient,
) -> None:
    workflow_id = f"http-{uuid.uuid4()}"
    started = await api.post("/api/runs", json={**example_input(), "workflow_id": workflow_id})
    assert started.status_code == 201, started.text
    assert started.json() == {"workflow_id": workflow_id}
    again = await api.post("/api/runs", json={**example_input(), "workflow_id": workflow_id})
    assert again.status_code == 409 and "exists already" in again.text

    whole = await sse(api, workflow_id)
    *progress, done = whole
    assert done["event"] == "done" and "id" not in done
    outcome = json.loads(done["data"])
    assert outcome["status"] == "completed" and "UPS" in outcome["result"]["answer"]
    ids = [int(event["id"]) for event in progress if "id" in event]
    assert ids == list(range(len(ids))) and len(ids) > 4
    kinds = [event["event"] for event in progress if "id" in event]
    assert kinds[-1] == "completed" and "step_finished" in kinds
    # Reconnecting after event 2, once the run has ended: every later event, once.
    resumed = await sse(api, workflow_id, last=2)
    assert [e for e in resumed if "id" in e] == [e for e in progress if "id" in e][3:]
    assert resumed[-1]["event"] == "done"

    status = (await api.get(f"/api/runs/{workflow_id}")).json()
    assert status["status"] == "completed" and status["step"] == 3
    page = (await api.get(f"/api/runs/{workflow_id}/transcript", params={"max_bytes": 300})).json()
    assert page["total"] > len(page["messages"]) >= 1
    trace = (await api.get(f"/api/runs/{workflow_id}/trace")).json()
    assert len(trace["step_records"]) == 3


async def test_a_plan_waits_first_in_the_list_and_a_refused_decision_is_409_with_the_reason(
    api: httpx.AsyncClient,
) -> None:
    workflow_id = (await api.post("/api/runs", json=plan_input())).json()["workflow_id"]
    await api.post("/api/runs", json={**example_input(), "workflow_id": f"other-{uuid.uuid4()}"})

    async def listed() -> list[dict[str, Any]]:
        while True:
            runs = (await api.get("/api/runs")).json()
            if runs and runs[0]["workflow_id"] == workflow_id:
                return runs
            await asyncio.sleep(0.2)

    runs = await asyncio.wait_for(listed(), 30)
    waiting = runs[0]["waiting"]
    assert runs[0]["status"] == "awaiting_approval" and waiting["plan"]["steps"]
    version = waiting["plan"]["version"]

    wrong = await api.post(
        f"/api/runs/{workflow_id}/decisions",
        json={"kind": "plan", "approve": True, "version": version + 1},
    )
    assert wrong.status_code == 409
    assert f"v{version}" in wrong.json()["detail"] or str(version) in wrong.json()["detail"]
    no_reason = await api.post(
        f"/api/runs/{workflow_id}/decisions", json={"kind": "plan", "approve": False}
    )
    assert no_reason.status_code == 422 and "reason" in no_reason.text
    # JSON's true alone approves: "yes", 1 and "on" were read as true.
    for loose in ("yes", 1, "on", "true"):
        sloppy = await api.post(
            f"/api/runs/{workflow_id}/decisions", json={"kind": "plan", "approve": loose}
        )
        assert sloppy.status_code == 422 and "approve" in sloppy.text, (loose, sloppy.text)

    approved = await api.post(
        f"/api/runs/{workflow_id}/decisions",
        json={"kind": "plan", "approve": True, "version": version},
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved"
    done = (await sse(api, workflow_id))[-1]
    assert json.loads(done["data"])["status"] == "completed"
    # The run has ended: Temporal's NOT_FOUND for an update, which said "no such run" (404).
    late = await api.post(
        f"/api/runs/{workflow_id}/decisions", json={"kind": "plan", "approve": True}
    )
    assert late.status_code == 409 and late.json()["detail"] == "the run has ended", late.text


async def test_bad_input_is_a_4xx_that_names_the_field_and_starts_nothing(
    api: httpx.AsyncClient, client: Client
) -> None:
    bad = [f"bad-{uuid.uuid4()}" for _ in range(2)]
    missing = await api.post("/api/runs", json={"plan": True, "workflow_id": bad[0]})
    assert missing.status_code == 422
    assert any(error["loc"][-1] == "prompt" for error in missing.json()["detail"])
    wrong_type = await api.post(
        "/api/runs", json={"prompt": "x", "limits": {"max_steps": 0}, "workflow_id": bad[1]}
    )
    assert wrong_type.status_code == 422 and "max_steps" in wrong_type.text
    for workflow_id in bad:
        assert [w async for w in client.list_workflows(f"WorkflowId='{workflow_id}'")] == []

    # A body far over any input is refused before it is read.
    over = await api.post("/api/runs", content=b" " * 5_000_000, headers=JSON_BODY)
    assert over.status_code == 413 and "at most 4,000,000" in over.text

    huge = await api.post("/api/runs", json={"prompt": "x" * 1_900_000, "workflow_id": bad[0]})
    assert huge.status_code == 413 and "1,800,000" in huge.text, huge.text[:300]
    assert [w async for w in client.list_workflows(f"WorkflowId='{bad[0]}'")] == []

    assert (await api.get("/api/runs/no-such-run")).status_code == 404
    assert (await api.get("/api/runs/no-such-run/events")).status_code == 404
    assert (await api.post("/api/runs/no-such-run/interrupt")).status_code == 404
    bad_id = await api.get("/api/runs/x/events", headers={"Last-Event-ID": "seven"})
    assert bad_id.status_code == 422
    # A page's start past any count (2**63) failed the query's own bound, a 500.
    far = await api.get("/api/runs/no-such-run/transcript", params={"start": 2**63})
    assert far.status_code == 422 and "start" in far.text
    # JSON's NaN and Infinity parse: a 422 that quoted one failed as it was written, a 500.
    for number in ("NaN", "-Infinity", "1e400"):
        sent = f'{{"prompt": "x", "model": {{"temperature": {number}}}, "workflow_id": "{bad[0]}"}}'
        not_finite = await api.post("/api/runs", content=sent, headers=JSON_BODY)
        assert not_finite.status_code == 422 and "temperature" in not_finite.text, sent
    # Nested past what pydantic writes: no payload could carry it, a 500.
    nested = json.loads('{"properties": {"a": ' * 400 + "{}" + "}}" * 400)
    deep = await api.post("/api/runs", json={"prompt": "x", "output_schema": nested})
    assert deep.status_code == 422 and deep.json()["type"] == "AgentInputInvalid", deep.text


async def test_a_text_with_a_lone_surrogate_is_a_422_on_every_route_that_takes_one(
    api: httpx.AsyncClient, client: Client
) -> None:
    """JSON's "\\ud800" parses into a str nothing can send to a run: each was a 500 (a run's
    input, a message, a decision's reason, a callback's result), from another language too."""
    surrogate = "\\ud800"  # as the JSON text has it: json= would refuse to write it
    refused_start = f"run-{uuid.uuid4()}"
    bodies = {
        "/api/runs": f'{{"prompt": "hi {surrogate}", "workflow_id": "{refused_start}"}}',
    }
    script = [{"text": "One."}, {"text": "Two."}]
    body = {
        "prompt": "hi",
        "conversation": True,
        "model": {"provider": "scripted", "script": script},
    }
    workflow_id = (await api.post("/api/runs", json=body)).json()["workflow_id"]
    at = f"/api/runs/{workflow_id}"

    async def waits_for_a_message() -> bool:
        status = await api.get(at)
        talk = status.json().get("conversation") if status.status_code == 200 else None
        return talk is not None and not talk["working"]

    await eventually(waits_for_a_message, what="the first turn to end")
    bodies[f"{at}/messages"] = f'{{"text": "more {surrogate}"}}'
    bodies[f"{at}/decisions"] = (
        f'{{"kind": "tool_call", "approve": false, "call_id": "c1", "reason": "{surrogate}"}}'
    )
    bodies[f"{at}/callbacks"] = f'{{"call_id": "c1", "result": "{surrogate}"}}'
    for route, sent in bodies.items():
        answered = await api.post(route, content=sent, headers=JSON_BODY)
        assert answered.status_code == 422, (route, answered.text)
        assert "lone surrogate" in answered.text, answered.text
    assert [w async for w in client.list_workflows(f"WorkflowId='{refused_start}'")] == []
    # A message over its bound is 413, as a run's input over its own is (it was 409).
    long = await api.post(f"{at}/messages", json={"text": "x" * (MAX_MESSAGE_CHARS + 1)})
    assert long.status_code == 413 and "MAX_MESSAGE_CHARS" in long.text, long.text
    # The conversation took none of it, and takes a message as before.
    assert (await api.post(f"{at}/messages", json={"text": "more"})).json() == {"turn": 2}


async def test_a_workflow_of_another_kind_is_no_run_on_any_route(
    api: httpx.AsyncClient, client: Client
) -> None:
    """A workflow id of the namespace that is no agent's run: its queries waited 30 s for a
    502, its updates and its stream with no end, and `cancel` cancelled it."""
    other = await client.start_workflow(
        "SomeoneElsesWorkflow", id=f"other-{uuid.uuid4()}", task_queue=f"none-{uuid.uuid4()}"
    )
    at = f"/api/runs/{other.id}"
    for path in (at, f"{at}/transcript", f"{at}/trace", f"{at}/events"):
        answered = await api.get(path)
        assert answered.status_code == 404 and "not an agent's run" in answered.text, path
    bodies = {
        "messages": {"text": "hi"},
        "decisions": {"kind": "plan", "approve": True},
        "callbacks": {"call_id": "c", "result": 1},
        "auto-mode": {"off": True},
        "interrupt": None,
        "cancel": None,
    }
    for route, body in bodies.items():
        answered = await api.post(f"{at}/{route}", json=body)
        assert answered.status_code == 404 and "not an agent's run" in answered.text, route
    assert not (await other.describe()).raw_description.workflow_extended_info.cancel_requested
    await other.terminate()
    # No id at all (`/api/runs//events`) was Temporal's "WorkflowId is not set", a 502.
    for path in ("/api/runs//events", "/api/runs//trace"):
        assert (await api.get(path)).status_code == 404, path
    assert (await api.post("/api/runs//cancel")).status_code == 404


async def test_serve_without_an_address_is_a_working_api_offline() -> None:
    async with serving(token=None) as http:
        said = "".join(http.said)  # type: ignore[attr-defined]
        made = re.search(r"printed once; set AGENT_API_TOKEN to choose one\): (\S+)", said)
        assert made is not None, said
        # The console's link carries the made token, ready to open.
        assert f"console: {http.base_url}/#token={made.group(1)}\n" in said
        assert (await http.get("/api/runs")).status_code == 401
        http.headers["Authorization"] = f"Bearer {made.group(1)}"
        started = await http.post("/api/runs", json=example_input())
        assert started.status_code == 201, started.text
        done = (await sse(http, started.json()["workflow_id"]))[-1]
        assert "UPS" in json.loads(done["data"])["result"]["answer"]


async def test_a_run_whose_id_holds_a_slash_is_reached_as_any_other(
    api: httpx.AsyncClient,
) -> None:
    # A sub-agent's id is `<parent>/<call id>`: each route takes it percent-encoded.
    workflow_id = f"http-{uuid.uuid4()}/call_1_1"
    started = await api.post("/api/runs", json={**example_input(), "workflow_id": workflow_id})
    assert started.status_code == 201, started.text
    path = quote(workflow_id, safe="")
    assert json.loads((await sse(api, path))[-1]["data"])["status"] == "completed"
    status = await api.get(f"/api/runs/{path}")
    assert status.status_code == 200 and status.json()["status"] == "completed"
    page = await api.get(f"/api/runs/{path}/transcript")
    assert page.status_code == 200 and page.json()["messages"][0]["role"] == "user"
    # The console's page of that run is the console (its script reads the id from the path).
    console = await api.get(f"/runs/{path}", headers={"Authorization": ""})
    assert console.status_code == 200 and '<main id="app">' in console.text


async def test_serve_stops_at_once_while_a_client_follows_a_waiting_run(
    client: Client, task_queue: str
) -> None:
    address = client.service_client.config.target_host
    worker = build_worker(client, task_queue, **TEST_WORKER_OPTIONS)
    async with worker, serving("--address", address, "--task-queue", task_queue) as http:
        workflow_id = (await http.post("/api/runs", json=plan_input())).json()["workflow_id"]
        path = f"/api/runs/{workflow_id}/events"
        async with http.stream("GET", path, timeout=60) as stream:
            lines = stream.aiter_lines()
            while await anext(lines) != "event: plan_submitted":
                pass
            # The run waits for a person, and its stream with it: a deploy stops serve now.
            server = http.process  # type: ignore[attr-defined]
            server.terminate()
            rest = [line async for line in lines]
            # Before uvicorn's own backstop (serve's STOP_SECONDS, 10 s) would cancel it.
            assert await asyncio.wait_for(server.wait(), 8) == 0
    # The stream ended without `done` (the run goes on): its client resumes elsewhere.
    assert "event: done" not in rest


async def test_streams_of_one_run_share_its_events_from_wherever_each_resumes(
    api: httpx.AsyncClient,
) -> None:
    """serve gives the streams of one run one follower (serving/streams.py): each stream still
    gets every event after its own Last-Event-ID once, in order, to `done`, whether it joins the
    shared follower (resuming from after where it began) or needs its own (from before)."""
    workflow_id = (await api.post("/api/runs", json=plan_input())).json()["workflow_id"]

    async def follow(last: int | None, caught_up: asyncio.Event) -> list[dict[str, Any]]:
        headers = {} if last is None else {"Last-Event-ID": str(last)}
        events: list[dict[str, Any]] = []
        path = f"/api/runs/{workflow_id}/events"
        async with api.stream("GET", path, headers=headers, timeout=60) as stream:
            fields: dict[str, Any] = {}
            async for line in stream.aiter_lines():
                if line:
                    name, _, value = line.partition(": ")
                    fields[name] = value
                    continue
                events.append(fields)
                if fields.get("event") == "plan_submitted":
                    caught_up.set()
                fields = {}
        return events

    # The first stream begins the run's follower at offset 1 (after event 0); the second joins
    # it from offset 2; the third reads from 0, before it, with a follower of its own.
    caught_up = [asyncio.Event() for _ in range(3)]
    first = asyncio.create_task(follow(0, caught_up[0]))
    await asyncio.wait_for(caught_up[0].wait(), 30)
    others = [
        asyncio.create_task(follow(1, caught_up[1])),
        asyncio.create_task(follow(None, caught_up[2])),
    ]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in caught_up[1:])), 30)
    decided = await api.post(
        f"/api/runs/{workflow_id}/decisions", json={"kind": "plan", "approve": True}
    )
    assert decided.status_code == 200, decided.text
    streams = await asyncio.wait_for(asyncio.gather(first, *others), 60)

    whole = [e for e in streams[2] if "id" in e]
    assert [int(e["id"]) for e in whole] == list(range(len(whole)))
    assert whole[-1]["event"] == "completed"
    for resumed_after, stream in zip((0, 1), streams[:2], strict=True):
        assert [e for e in stream if "id" in e] == whole[resumed_after + 1 :]
    for stream in streams:
        assert stream[-1]["event"] == "done"
        assert json.loads(stream[-1]["data"])["status"] == "completed"


async def test_a_callback_is_published_and_answered_over_http(api: httpx.AsyncClient) -> None:
    tool = {
        "name": "read_local_file",
        "description": "Read a file on the user's laptop.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        "result": {"type": "object", "required": ["text"]},
    }
    script = [
        {"calls": [{"name": "read_local_file", "arguments": {"path": "a.txt"}}]},
        {"text": "It says {last_tool_result.text}."},
    ]
    body = {
        "prompt": "read a.txt",
        "tools": [],
        "callback_tools": [tool],
        "model": {"provider": "scripted", "script": script},
    }
    workflow_id = (await api.post("/api/runs", json=body)).json()["workflow_id"]

    async def published() -> dict[str, Any]:
        while not (
            waiting := (await api.get(f"/api/runs/{workflow_id}")).json()["pending_callbacks"]
        ):
            await asyncio.sleep(0.1)
        return dict(waiting[0])

    pending = await asyncio.wait_for(published(), 30)
    assert pending["arguments"] == {"path": "a.txt"}
    path = f"/api/runs/{workflow_id}/callbacks"
    # Over Temporal's 2 MB the run's refusal could not be sent back: its workflow task failed
    # at each try, and the request waited with no answer.
    huge = {"call_id": pending["call_id"], "result": {"text": "x" * 2_500_000}}
    refused = await api.post(path, json=huge)
    assert refused.status_code == 413 and "MAX_INPUT_BYTES" in refused.json()["detail"]
    wrong = await api.post(path, json={"call_id": pending["call_id"], "result": {"txt": 1}})
    assert wrong.status_code == 409 and "does not match" in wrong.json()["detail"]
    right = await api.post(path, json={"call_id": pending["call_id"], "result": {"text": "hi"}})
    assert right.status_code == 200 and right.json()["call_id"] == pending["call_id"]
    events = await sse(api, workflow_id)
    assert "callback_requested" in [e.get("event") for e in events]
    assert json.loads(events[-1]["data"])["result"]["answer"] == "It says hi."


BODY_CHUNK = b"x" * 1_000_000
HUGE_BODY = 150_000_000
"""The body of the request that once grew serve by twice its size."""


def peak_memory(pid: int) -> int:
    """A process's peak resident memory (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE).group(1)) * 1024  # type: ignore[union-attr]


async def answer_head(reader: asyncio.StreamReader) -> int:
    """The status of the answer on a raw connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1])


async def end(api: httpx.AsyncClient, *workflow_ids: str) -> None:
    """Cancel the runs and wait for their ends, so that no later listing finds them waiting."""
    for workflow_id in workflow_ids:
        assert (await api.post(f"/api/runs/{workflow_id}/cancel")).status_code == 202

    async def ended() -> bool:
        statuses = [(await api.get(f"/api/runs/{w}")).json()["status"] for w in workflow_ids]
        return all(status in ("completed", "failed") for status in statuses)

    await eventually(ended, timeout=30, what="the runs cancelled")


async def test_the_token_is_checked_before_any_body_is_read_on_every_route(
    api: httpx.AsyncClient,
) -> None:
    """Every route (the OpenAPI document's), asked without the token with a body declared and
    not sent, is answered 401 at once: nothing of the body is waited for, read or parsed."""
    schema = (await api.get("/openapi.json")).json()
    routes = [
        (method.upper(), path.replace("{workflow_id}", "x"))
        for path, methods in schema["paths"].items()
        for method in methods
    ]
    routes += [("GET", "/openapi.json"), ("POST", "/")]
    assert ("POST", "/api/runs") in routes and ("POST", "/api/runs/x/decisions") in routes
    for method, path in routes:
        reader, writer = await asyncio.open_connection(api.base_url.host, api.base_url.port)
        try:
            writer.write(
                f"{method} {path} HTTP/1.1\r\nHost: serve\r\nContent-Type: application/json\r\n"
                f"Content-Length: 3000000\r\n\r\n".encode()
            )
            await writer.drain()
            # Before any byte of the body: a server that waited for it would never answer.
            status = await asyncio.wait_for(answer_head(reader), 10)
        finally:
            writer.close()
        assert status == 401, (method, path)
    # With a body the route cannot parse, the answer is still 401, not 422.
    unparsed = await api.post(
        "/api/runs", content=b"{" * 3_000_000, headers={**JSON_BODY, "Authorization": ""}
    )
    assert unparsed.status_code == 401, unparsed.text


async def test_content_length_with_transfer_encoding_is_refused_and_the_body_not_read(
    api: httpx.AsyncClient,
) -> None:
    """`Content-Length: 5` with `Transfer-Encoding: chunked` once passed the body's limit, and
    the chunked body was read whole: 150 MB grew serve by 300 MB. The pair is refused at once,
    with the token (400) or without (401), the connection closed, and serve does not grow."""
    server = api.process.pid  # type: ignore[attr-defined]
    token = api.headers["Authorization"]
    for authorization, refused_with in ((token, 400), ("Bearer wrong", 401)):
        peak_before = peak_memory(server)
        reader, writer = await asyncio.open_connection(api.base_url.host, api.base_url.port)
        writer.write(
            "POST /api/runs HTTP/1.1\r\nHost: serve\r\nContent-Type: application/json\r\n"
            f"Authorization: {authorization}\r\nContent-Length: 5\r\n"
            "Transfer-Encoding: chunked\r\n\r\n5\r\n[1, 2\r\n".encode()
        )
        await writer.drain()
        try:
            status: int | None = await asyncio.wait_for(answer_head(reader), 10)
        except TimeoutError:
            status = None  # the server reads on: it gets the rest
        sent = 0
        try:
            chunk = f"{len(BODY_CHUNK):x}\r\n".encode() + BODY_CHUNK + b"\r\n"
            while sent < HUGE_BODY:
                writer.write(chunk)
                await writer.drain()
                sent += len(BODY_CHUNK)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            pass  # the server closed the connection: it takes no more
        if status is None:
            status = await asyncio.wait_for(answer_head(reader), 60)
        writer.close()
        grown = peak_memory(server) - peak_before
        assert grown < 50_000_000, f"serve grew by {grown:,} bytes"
        assert sent < HUGE_BODY, "the server read the whole body"
        assert status == refused_with


async def test_a_body_is_never_read_past_the_limit_whatever_its_headers_said() -> None:
    """Behind the checks of the headers, the body's bytes are counted as they come: a body
    longer than it said (which no parser serve runs on lets through) is refused at the limit,
    and what comes after is never asked for."""
    app = http_api.create_app(cast(AgentClient, None), token=TOKEN)
    chunks = [b"[" + b"1," * 999_999] * 10  # 20 MB, said to be 5 bytes
    asked = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return {"type": "http.request", "body": chunks[asked - 1], "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/runs",
        "raw_path": b"/api/runs",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", b"5"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    await app(scope, receive, send)
    assert sent[0]["status"] == 413
    assert (b"connection", b"close") in sent[0]["headers"]
    assert asked == 3  # 4,000,000 bytes pass in the third 2,000,000


def slow_model_input() -> dict[str, Any]:
    """A run whose model call (not streamed) takes a minute."""
    script = [ScriptedTurn(text="done", delay_seconds=60)]
    agent_input = AgentInput(prompt="Think long.", model=ModelSettings(script=script))
    return agent_input.model_dump(mode="json", exclude_defaults=True)


@pytest.mark.parametrize(
    ("waiting_for", "agent_input", "last_event"),
    [
        ("a person", plan_input, "plan_submitted"),
        ("a model call that does not stream", slow_model_input, "step_started"),
    ],
)
async def test_twenty_streams_of_a_quiet_run_cost_the_server_about_one_request_a_second(
    api: httpx.AsyncClient,
    client: Client,
    metrics_port: int,
    waiting_for: str,
    agent_input: Callable[[], dict[str, Any]],
    last_event: str,
) -> None:
    """The streams of one run share its follower and its text reader, which reads only while a
    model call streams: twenty streams of a run that waits (for a person, or for a model call
    that does not stream) once cost the dev server about 185 requests a second (a describe every
    100 ms each); now one follower's query a second, and a describe every few of them, whatever
    the number of streams."""
    workflow_id = (await api.post("/api/runs", json=agent_input())).json()["workflow_id"]
    caught_up = [asyncio.Event() for _ in range(20)]

    async def follow(caught: asyncio.Event) -> None:
        async with api.stream("GET", f"/api/runs/{workflow_id}/events", timeout=60) as stream:
            async for line in stream.aiter_lines():
                if line == f"event: {last_event}":
                    caught.set()

    streams = [asyncio.create_task(follow(caught)) for caught in caught_up]
    try:
        await asyncio.wait_for(asyncio.gather(*(c.wait() for c in caught_up)), 30)
        before = await served(client, metrics_port)

        async def asked() -> int:
            return (await served(client, metrics_port))["QueryWorkflow"] - before["QueryWorkflow"]

        async def five_asks() -> bool:
            return await asked() >= 5

        # Five of the follower's asks, at its quiet pace of one a second.
        await eventually(five_asks, timeout=30, what="five asks of the run's follower")
        after = await served(client, metrics_port)
    finally:
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    described = after["DescribeWorkflowExecution"] - before["DescribeWorkflowExecution"]
    queried = after["QueryWorkflow"] - before["QueryWorkflow"]
    # Its check for a terminated run: at the first ask at its slowest, then at every fifth. On
    # a loaded machine the follower may ask more often than once a second (it slows down from an
    # event's pace step by step), so the bound is by its asks: one stream's describe every 100 ms
    # made hundreds here, whatever the asks.
    bound = 2 + queried // 5
    assert described <= bound, f"waiting for {waiting_for}: {described} describes in {queried} asks"
    await end(api, workflow_id)


async def test_streams_past_a_runs_or_the_servers_bound_are_refused_with_429(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_API_MAX_RUN_STREAMS", "2")
    monkeypatch.setenv("AGENT_API_MAX_STREAMS", "3")
    address = client.service_client.config.target_host
    worker = build_worker(client, task_queue, **TEST_WORKER_OPTIONS)
    async with worker, serving("--address", address, "--task-queue", task_queue) as http:
        runs = [(await http.post("/api/runs", json=plan_input())).json()["workflow_id"]]
        runs += [(await http.post("/api/runs", json=plan_input())).json()["workflow_id"]]
        async with contextlib.AsyncExitStack() as held:

            async def open_stream(workflow_id: str) -> httpx.Response:
                path = f"/api/runs/{workflow_id}/events"
                return await held.enter_async_context(http.stream("GET", path, timeout=60))

            first = [await open_stream(runs[0]) for _ in range(2)]
            assert [s.status_code for s in first] == [200, 200]
            third = await http.get(f"/api/runs/{runs[0]}/events")
            assert third.status_code == 429
            assert "AGENT_API_MAX_RUN_STREAMS" in third.json()["detail"]
            assert (await open_stream(runs[1])).status_code == 200
            over = await http.get(f"/api/runs/{runs[1]}/events")
            assert over.status_code == 429 and "AGENT_API_MAX_STREAMS" in over.json()["detail"]
            # A stream that ends gives its place back.
            await first[0].aclose()

            async def admitted() -> bool:
                again = await held.enter_async_context(
                    http.stream("GET", f"/api/runs/{runs[1]}/events", timeout=60)
                )
                if again.status_code == 429:
                    await again.aclose()
                    return False
                return again.status_code == 200

            await eventually(admitted, what="a place given back")
        await end(http, *runs)


async def test_the_list_asks_at_most_limit_waiting_runs_once_for_all_its_callers(
    api: httpx.AsyncClient, client: Client, metrics_port: int
) -> None:
    """`GET /api/runs?limit=N` asks at most N waiting runs for what they wait on, and callers
    that ask together (console tabs) share one listing: it once asked every waiting run, one
    at a time, on every call."""
    started = [(await api.post("/api/runs", json=plan_input())).json()["workflow_id"]]
    started += [(await api.post("/api/runs", json=plan_input())).json()["workflow_id"]]
    started += [(await api.post("/api/runs", json=plan_input())).json()["workflow_id"]]

    async def all_listed() -> bool:
        runs = (await api.get("/api/runs", timeout=30)).json()
        return set(started) <= {run["workflow_id"] for run in runs if run["waiting"]}

    await eventually(all_listed, timeout=30, what="the three runs listed as waiting")
    before = await served(client, metrics_port)
    lists = await asyncio.gather(
        *(api.get("/api/runs", params={"limit": 2}, timeout=30) for _ in range(10))
    )
    after = await served(client, metrics_port)
    for listed in lists:
        runs = listed.json()
        assert len(runs) == 2 and all(run["waiting"] for run in runs), runs
        assert {run["workflow_id"] for run in runs} <= set(started)
    assert after["QueryWorkflow"] - before["QueryWorkflow"] <= 2
    await end(api, *started)


async def test_the_done_event_names_the_fields_of_each_side_effect_and_each_undo(
    api: httpx.AsyncClient,
) -> None:
    """A completed run's side effects and a failed run's undos, each an object of named fields
    (docs/http-api.md), not the compact arrays the result travels in."""
    cancel = call("cancel_order", order_id=104999, reason="asked")
    kept = scripted_input([turn(cancel), turn(text="Cancelled.")], tools=["cancel_order"])
    undone = scripted_input(
        [turn(cancel), turn(text="never")], tools=["cancel_order"], limits=Limits(max_steps=1)
    )
    answered = (await api.post("/api/runs", json=kept.model_dump(mode="json"))).json()
    done = json.loads((await sse(api, answered["workflow_id"]))[-1]["data"])
    assert done["status"] == "completed"
    (effect,) = done["result"]["side_effects"]
    assert effect["compensation"] == "reinstate_order" and effect["outcome_unknown"] is False
    assert effect["call"]["tool"] == "cancel_order"
    assert effect["call"]["tool_call_id"] == "call_1_1"
    assert effect["call"]["arguments"] == {"order_id": 104999, "reason": "asked"}
    assert effect["call"]["result"]["cancelled"] is True
    assert effect["call"]["idempotency_key"].startswith(f"{answered['workflow_id']}/")

    failing = (await api.post("/api/runs", json=undone.model_dump(mode="json"))).json()
    done = json.loads((await sse(api, failing["workflow_id"]))[-1]["data"])
    assert done["status"] == "failed" and done["error"]["type"] == "AgentStepLimitExceeded"
    assert done["details"]["compensations"] == [
        {
            "tool": "cancel_order",
            "tool_call_id": "call_1_1",
            "status": "completed",
            "compensation": "reinstate_order",
            "error": None,
            "outcome_unknown": False,
        }
    ]


async def test_a_waiting_call_carries_the_arguments_the_tool_gets_as_data(
    api: httpx.AsyncClient,
) -> None:
    cancel = call("cancel_order", id="cancel", order_id=104999, reason="asked")
    waits = scripted_input(
        [turn(cancel), turn(text="Not cancelled.", expect="not today")],
        tools=["cancel_order"],
        tool_approval=ToolApprovalPolicy(),
    )
    workflow_id = (await api.post("/api/runs", json=waits.model_dump(mode="json"))).json()[
        "workflow_id"
    ]

    async def waiting() -> dict[str, Any]:
        while not (approvals := (await api.get(f"/api/runs/{workflow_id}")).json()["approvals"]):
            await asyncio.sleep(0.1)
        return dict(approvals[0])

    approval = await asyncio.wait_for(waiting(), 30)
    assert approval["arguments"] == '{"order_id": 104999, "reason": "asked"}'  # as shown
    assert approval["parsed_arguments"] == {"order_id": 104999, "reason": "asked"}
    denied = await api.post(
        f"/api/runs/{workflow_id}/decisions",
        json={"kind": "tool_call", "call_id": "cancel", "approve": False, "reason": "not today"},
    )
    assert denied.status_code == 200, denied.text
    assert denied.json()["parsed_arguments"] == approval["parsed_arguments"]
    done = json.loads((await sse(api, workflow_id))[-1]["data"])
    assert done["result"]["answer"] == "Not cancelled." and done["result"]["side_effects"] == []


async def test_the_icon_the_console_declares_is_served_without_the_token(
    api: httpx.AsyncClient,
) -> None:
    """A browser asks for the page's icon by itself, without the token: the page names one the
    console serves (a browser asked /favicon.ico, and met a 401, on every page)."""
    page = await api.get("/", headers={"Authorization": ""})
    icon = re.search(r'<link rel="icon" href="([^"]+)"', page.text)
    assert page.status_code == 200 and icon is not None, page.text

    served = await api.get(icon.group(1), headers={"Authorization": ""})

    assert served.status_code == 200, served.text
    assert served.headers["content-type"].startswith("image/svg+xml")
    assert served.text.startswith("<svg")
