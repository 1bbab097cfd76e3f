"""The HTTP API as its users meet it: `durable-agent serve` in a subprocess, on a real dev
server, asked over HTTP (serving/http_api.py, docs/http-api.md)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any
from urllib.parse import quote

import httpx2 as httpx
from temporalio.client import Client

from durable_agent.activities.pricing import DEMO_PRICE
from durable_agent.client.contract import example_input
from durable_agent.demo import script as demo
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import AgentInput, Limits, ModelSettings, ToolApprovalPolicy
from tests.helpers import TEST_WORKER_OPTIONS, call, scripted_input, turn
from tests.serve_process import TOKEN, serving

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

    approved = await api.post(
        f"/api/runs/{workflow_id}/decisions",
        json={"kind": "plan", "approve": True, "version": version},
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved"
    done = (await sse(api, workflow_id))[-1]
    assert json.loads(done["data"])["status"] == "completed"


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
    wrong = await api.post(path, json={"call_id": pending["call_id"], "result": {"txt": 1}})
    assert wrong.status_code == 409 and "does not match" in wrong.json()["detail"]
    right = await api.post(path, json={"call_id": pending["call_id"], "result": {"text": "hi"}})
    assert right.status_code == 200 and right.json()["call_id"] == pending["call_id"]
    events = await sse(api, workflow_id)
    assert "callback_requested" in [e.get("event") for e in events]
    assert json.loads(events[-1]["data"])["result"]["answer"] == "It says hi."


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
