"""What the HTTP API's routes refuse at their doors, typed, where they once served a wedge or
took a value JSON has not: a stream resumed past the run's last event (serving/streams.py),
numbers in other forms than digits, NaN in a body, a run id with control characters
(serving/http_api.py, docs/http-api.md)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx2 as httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.client.agent_client import AgentClient
from durable_agent.client.contract import example_input
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.errors import AgentInputInvalid
from durable_agent.workflows.inputs import AgentInput
from tests.helpers import TEST_WORKER_OPTIONS, eventually
from tests.serve_process import serving
from tests.test_http_api import JSON_BODY, plan_input, sse

PAGE_NUMBERS = ("start", "max_bytes")


async def events_until(http: httpx.AsyncClient, workflow_id: str, kind: str) -> list[dict]:
    """The run's events from its first to the first of `kind`, the stream then closed."""
    events: list[dict[str, Any]] = []
    async with http.stream("GET", f"/api/runs/{workflow_id}/events", timeout=30) as stream:
        fields: dict[str, Any] = {}
        async for line in stream.aiter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
            elif fields:
                events.append(fields)
                if fields["event"] == kind:
                    return events
                fields = {}
    raise AssertionError(f"the stream ended before {kind}: {events}")


async def test_a_stream_resumed_past_the_runs_last_event_is_refused_and_holds_no_place(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It waited, silent, holding one of the run's places, until the run published that many
    events: for a run that waits for a person, for as long as nobody decides."""
    monkeypatch.setenv("AGENT_API_MAX_RUN_STREAMS", "2")
    address = client.service_client.config.target_host
    worker = build_worker(client, task_queue, **TEST_WORKER_OPTIONS)
    async with worker, serving("--address", address, "--task-queue", task_queue) as http:
        workflow_id = (await http.post("/api/runs", json=plan_input())).json()["workflow_id"]
        last = int((await events_until(http, workflow_id, "plan_submitted"))[-1]["id"])
        path = f"/api/runs/{workflow_id}/events"
        # More refusals than the run has places (the stream above may keep one a moment yet):
        # a refusal that held its place would make the next a 429.
        for past in (last + 2, last + 500, last + 2):
            refused = await http.get(path, headers={"Last-Event-ID": str(past)}, timeout=10)
            assert refused.status_code == 416, refused.text
            assert refused.json()["detail"] == (
                f"Last-Event-ID {past} is past the run's last event ({last}):"
                " resume from an id its stream sent"
            )
        # Resumed after the last event, a stream waits for the next.
        headers = {"Last-Event-ID": str(last)}
        async with http.stream("GET", path, headers=headers, timeout=30) as stream:
            assert stream.status_code == 200
            decided = await http.post(
                f"/api/runs/{workflow_id}/decisions", json={"kind": "plan", "approve": True}
            )
            assert decided.status_code == 200, decided.text
            ids = [int(line[4:]) async for line in stream.aiter_lines() if line[:4] == "id: "]
        assert ids == list(range(last + 1, ids[-1] + 1)) and len(ids) > 2
        # Once the run has ended, too: past its end is refused, at its end is `done` alone.
        end = ids[-1]
        after = await http.get(path, headers={"Last-Event-ID": str(end + 1)}, timeout=10)
        assert after.status_code == 416 and f"last event ({end})" in after.text
        done = await sse(http, workflow_id, last=end)
        assert [e["event"] for e in done] == ["done"]
        assert json.loads(done[0]["data"])["status"] == "completed"


async def test_a_resume_no_worker_can_check_is_served_unchecked(
    client: Client, task_queue: str
) -> None:
    """How many events a run has is a query, which a worker answers: while none does (a deploy
    of the workers), a resumed stream is served as before, not refused for the outage."""
    address = client.service_client.config.target_host
    async with serving("--address", address, "--task-queue", task_queue) as http:
        workflow_id = (await http.post("/api/runs", json=plan_input())).json()["workflow_id"]
        path = f"/api/runs/{workflow_id}/events"
        async with http.stream("GET", path, headers={"Last-Event-ID": "3"}, timeout=30) as stream:
            assert stream.status_code == 200
        await client.get_workflow_handle(workflow_id).terminate()  # no worker would end it


async def test_a_number_is_ascii_digits_alone_in_a_query_and_in_last_event_id(
    api: httpx.AsyncClient,
) -> None:
    """int() and pydantic read "+3", "3_0", " 5" and "3.0" as numbers: a page from "+1"
    was served as the page from 1, and a stream resumed after "3_0" as after 30."""
    started = await api.post("/api/runs", json=example_input())
    at = f"/api/runs/{started.json()['workflow_id']}"
    assert (await api.get(f"{at}/transcript", params={"start": "1"})).status_code == 200
    asked = [(f"{at}/{page}", name) for page in ("transcript", "trace") for name in PAGE_NUMBERS]
    for path, name in [*asked, ("/api/runs", "limit")]:
        for given in ("+1", "1_0", " 1", "1 ", "1.0", "٣", "-0", "0x1"):
            refused = await api.get(path, params={name: given})
            assert refused.status_code == 422, (path, name, given, refused.text)
            [problem] = refused.json()["detail"]
            assert problem["loc"] == ["query", name], problem
            assert problem["msg"] == "Input should be a whole number: ASCII digits", problem
    for given in ("+1", "1_0", "1.0", "-2", "1e1", "9999999999999999"):
        refused = await api.get(f"{at}/events", headers={"Last-Event-ID": given}, timeout=10)
        assert refused.status_code == 422, (given, refused.text)
        assert "ASCII digits" in refused.json()["detail"], refused.text
    # Digits alone are read as ever: a stream resumed after 0 starts at 1.
    assert int((await sse(api, at.removeprefix("/api/runs/"), last=0))[0]["id"]) == 1


async def test_nan_and_infinity_anywhere_in_a_body_are_refused_as_not_json(
    api: httpx.AsyncClient, client: Client
) -> None:
    """Python's parser reads NaN, Infinity and 1e400 as floats: one in a callback's result, or
    in a run's output schema, reached the run as null."""
    tool = {"name": "read_local_file", "description": "Read a file on the user's laptop."}
    script = [{"calls": [{"name": "read_local_file", "arguments": {}}]}, {"text": "Read."}]
    body = {
        "prompt": "read a.txt",
        "callback_tools": [tool],
        "model": {"provider": "scripted", "script": script},
    }
    workflow_id = (await api.post("/api/runs", json=body)).json()["workflow_id"]
    at = f"/api/runs/{workflow_id}"

    async def published() -> bool:
        return bool((await api.get(at)).json()["pending_callbacks"])

    await eventually(published, what="the callback published")
    call_id = (await api.get(at)).json()["pending_callbacks"][0]["call_id"]
    for number, why in (
        ("NaN", "not a JSON number"),
        ("-Infinity", "not a JSON number"),
        ("1e400", "past what a JSON number carries"),
    ):
        sent = f'{{"call_id": "{call_id}", "result": {{"rows": [1, {number}]}}}}'
        refused = await api.post(f"{at}/callbacks", content=sent, headers=JSON_BODY)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == [
            {
                "type": "json_invalid",
                "loc": ["body", "result", "rows", 1],
                "msg": f"not JSON: {number} is {why}",
                "input": number,
            }
        ]
    # The call still waits, and takes a result that is JSON.
    answered = await api.post(f"{at}/callbacks", json={"call_id": call_id, "result": {"rows": []}})
    assert answered.status_code == 200, answered.text
    assert json.loads((await sse(api, workflow_id))[-1]["data"])["status"] == "completed"

    refused_start = f"nan-{uuid.uuid4()}"
    schema = '{"type": "object", "properties": {"n": {"type": "number", "maximum": NaN}}}'
    sent = f'{{"prompt": "x", "output_schema": {schema}, "workflow_id": "{refused_start}"}}'
    refused = await api.post("/api/runs", content=sent, headers=JSON_BODY)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == [
        "body",
        "output_schema",
        "properties",
        "n",
        "maximum",
    ]
    assert [w async for w in client.list_workflows(f"WorkflowId='{refused_start}'")] == []


async def test_a_body_that_cannot_be_read_as_text_is_422_with_the_reason(
    api: httpx.AsyncClient, client: Client
) -> None:
    """FastAPI answered both with a 400, "There was an error parsing the body"."""
    workflow_id = f"unread-{uuid.uuid4()}"
    for sent, why in (
        (f'{{"prompt": "caf\xe9", "workflow_id": "{workflow_id}"}}'.encode("latin-1"), "UTF-8"),
        (b'{"prompt": "x", "output_schema": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deep"),
    ):
        refused = await api.post("/api/runs", content=sent, headers=JSON_BODY)
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        if why == "UTF-8":
            assert detail == "the body is not UTF-8: byte 0xe9 at offset 15"
        else:
            assert detail.startswith("the body is nested too deep")
    assert [w async for w in client.list_workflows(f"WorkflowId='{workflow_id}'")] == []


async def test_a_run_id_with_a_control_character_is_refused_and_starts_nothing(
    api: httpx.AsyncClient, client: Client, task_queue: str
) -> None:
    """Temporal takes a workflow id with "\\n", "\\x00" or "\\x7f": a run started with one broke
    every line that showed its id, in a log, the CLI's tables, the console, a search."""
    agents = AgentClient(client, task_queue)
    for character in ("\n", "\x00", "\x1b", "\x7f", "\x85"):
        workflow_id = f"id-{uuid.uuid4().hex[:8]}{character}x"
        why = (
            f"workflow_id: a control character (U+{ord(character):04X}) at 11:"
            " an id is shown, logged and searched as text"
        )
        refused = await api.post("/api/runs", json={**example_input(), "workflow_id": workflow_id})
        assert refused.status_code == 422, refused.text
        assert refused.json() == {"detail": why, "type": "AgentInputInvalid"}
        with pytest.raises(AgentInputInvalid) as raised:
            await agents.start(AgentInput(prompt="x"), workflow_id=workflow_id)
        assert raised.value.message == why
        with pytest.raises(RPCError) as unknown:
            await client.get_workflow_handle(workflow_id).describe()
        assert unknown.value.status == RPCStatusCode.NOT_FOUND
    with pytest.raises(AgentInputInvalid, match="lone surrogate"):
        await agents.start(AgentInput(prompt="x"), workflow_id="id-\ud800")
    # Any other character is an id's, as before: a sub-agent's slash, a space, a letter of
    # another script.
    started = await api.post(
        "/api/runs", json={**example_input(), "workflow_id": f"id {uuid.uuid4().hex[:8]}/é"}
    )
    assert started.status_code == 201, started.text
