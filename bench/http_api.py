"""What the HTTP API adds: a start through `durable-agent serve` against `AgentClient` direct,
and how late a run's events reach an SSE client against `AgentRun.events()`; and what the agent
protocols add to a start through the HTTP API (docs/agent-protocols.md).

    python bench/http_api.py [--starts 100] [--runs 10] [--steps 10] [--json FILE]

An embedded dev server and an in-process worker; `durable-agent serve --address` in a process
of its own, as it is deployed. Starts alternate between the two ways (so that the server's
warming and any drift fall on both alike), over one kept-alive HTTP connection; each start is
timed from the call to its answer. Event lag is the time from an event's `at` (the workflow's
time when it published it) to its arrival, for every event of `--runs` runs of `--steps`
steps followed by SSE, and as many followed by `AgentRun.events()` (`--together`: two SSE
clients follow each run at once, sharing serve's one follower of it).

What the agent protocols add: `--starts` conversations started each way in turn through one
`serve --agent` process, on the queue no worker serves, as the plain starts are: by the HTTP
API (`POST /api/runs`), by A2A (`SendMessage` with `returnImmediately`, answered `submitted`)
and by AG-UI (a `RunAgentInput`, timed to its stream's RUN_STARTED event).

What the event streams cost the dev server: `--streams` SSE clients of one run, for
`--seconds` while it waits for a person and as long while it waits for a model call that does
not stream, counted by the dev server itself (its `service_requests` metric, each way of asking
on its own: describes, queries, all requests of the namespace).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import sys
import sysconfig
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tests.tools_for_tests  # noqa: F401  (registers `blob`)
from durable_agent.client.agent_client import AgentClient, AgentRun, percentile
from durable_agent.serving.command_line import Command, exit_now, parse
from durable_agent.serving.dev_server import embedded_dev_server, free_port
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from tests.server_requests import served

CLI = str(Path(sysconfig.get_path("scripts")) / "durable-agent")
LISTENING = re.compile(r"HTTP API on (http://\S+)/api")


def run_input(steps: int) -> AgentInput:
    """A run of `steps` steps: a tool call each, then the answer."""
    turns = [
        ScriptedTurn(text=f"step {i}", calls=[ScriptedCall(name="blob", arguments={"size": 200})])
        for i in range(steps - 1)
    ]
    return AgentInput(
        prompt="Read every part.",
        tools=["blob"],
        model=ModelSettings(script=[*turns, ScriptedTurn(text="done")]),
        limits=Limits(max_steps=steps),
    )


async def serve(address: str, task_queue: str, token: str, *words: str) -> tuple[Any, str]:
    env = {**os.environ, "AGENT_API_TOKEN": token}
    server = await asyncio.create_subprocess_exec(
        CLI, "serve", "--address", address, "--task-queue", task_queue, "--port", "0", *words,
        env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert server.stderr is not None
    said = ""
    while not (found := LISTENING.search(said)):
        line = await server.stderr.readline()
        if not line:
            raise RuntimeError(f"serve did not start: {said}")
        said += line.decode()
    return server, found.group(1)


async def starts(agents: AgentClient, http: httpx.AsyncClient, count: int) -> dict[str, Any]:
    agent_input = AgentInput(prompt="Only started.", model=ModelSettings(script=[]))
    body = agent_input.model_dump(mode="json", exclude_defaults=True)
    direct: list[float] = []
    through: list[float] = []
    for _ in range(count):
        begun = time.perf_counter()
        await agents.start(agent_input)
        direct.append(time.perf_counter() - begun)
        begun = time.perf_counter()
        answer = await http.post("/api/runs", json=body)
        through.append(time.perf_counter() - begun)
        assert answer.status_code == 201, answer.text
    return {
        "starts": count,
        "direct_median_ms": round(statistics.median(direct) * 1000, 2),
        "http_median_ms": round(statistics.median(through) * 1000, 2),
        "added_median_ms": round(
            (statistics.median(through) - statistics.median(direct)) * 1000, 2
        ),
        "direct_p95_ms": round(percentile(direct, 95) * 1000, 2),
        "http_p95_ms": round(percentile(through, 95) * 1000, 2),
    }


WAITING_AGENT = AgentInput(prompt="-", model=ModelSettings(script=[]))
"""The agent the protocols' starts start (on a queue no worker serves: nothing runs)."""


async def protocol_starts(http: httpx.AsyncClient, count: int) -> dict[str, Any]:
    """`count` conversations started each way in turn through serve: by the HTTP API, by A2A
    and by AG-UI (serve runs WAITING_AGENT with --agent)."""
    body = {**WAITING_AGENT.model_dump(mode="json", exclude_defaults=True), "conversation": True}

    async def by_http(text: str) -> None:
        answer = await http.post("/api/runs", json={**body, "prompt": text})
        assert answer.status_code == 201, answer.text

    async def by_a2a(text: str) -> None:
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
        params = {"message": message, "configuration": {"returnImmediately": True}}
        request = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        answer = await http.post("/a2a", json=request, headers={"A2A-Version": "1.0"})
        assert "result" in answer.json(), answer.text

    async def by_ag_ui(text: str) -> None:
        run_input = {
            "threadId": uuid.uuid4().hex,
            "runId": uuid.uuid4().hex,
            "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
            "tools": [],
            "context": [],
            "state": None,
            "forwardedProps": None,
        }
        async with http.stream("POST", "/ag-ui", json=run_input, timeout=60) as stream:
            assert stream.status_code == 200, await stream.aread()
            async for line in stream.aiter_lines():
                if line.startswith("data: ") and '"RUN_STARTED"' in line:
                    return
        raise AssertionError("the AG-UI stream ended before RUN_STARTED")

    ways = {"http": by_http, "a2a": by_a2a, "ag_ui": by_ag_ui}
    timed: dict[str, list[float]] = {name: [] for name in ways}
    for index in range(count):
        for name, start in ways.items():
            begun = time.perf_counter()
            await start(f"Start {index}.")
            timed[name].append(time.perf_counter() - begun)
    medians = {name: statistics.median(times) for name, times in timed.items()}
    measured: dict[str, Any] = {"starts": count}
    for name, times in timed.items():
        measured[f"{name}_median_ms"] = round(medians[name] * 1000, 2)
        measured[f"{name}_p95_ms"] = round(percentile(times, 95) * 1000, 2)
    for name in ("a2a", "ag_ui"):
        added = (medians[name] - medians["http"]) * 1000
        measured[f"{name}_added_median_ms"] = round(added, 2)
    return measured


async def sse_lags(http: httpx.AsyncClient, workflow_id: str) -> list[float]:
    lags: list[float] = []
    async with http.stream("GET", f"/api/runs/{workflow_id}/events", timeout=120) as stream:
        name = ""
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: ") and name not in ("done", "delta"):
                at = datetime.fromisoformat(json.loads(line.removeprefix("data: "))["at"])
                lags.append((datetime.now(UTC) - at).total_seconds())
    return lags


async def direct_lags(agent_run: AgentRun) -> list[float]:
    return [(datetime.now(UTC) - item.data.at).total_seconds() async for item in agent_run.events()]


async def event_lags(
    agents: AgentClient, http: httpx.AsyncClient, runs: int, steps: int, together: bool = False
) -> dict[str, Any]:
    """One follower a run, each way in turn; `together`: two SSE clients follow each run at
    once (serve shares one follower between them), then the client alone."""
    by_sse: list[float] = []
    by_client: list[float] = []

    async def started() -> AgentRun:
        return await agents.start(run_input(steps), workflow_id=f"bench-{uuid.uuid4()}")

    for _ in range(runs):
        if together:
            workflow_id = (await started()).id
            first, second = await asyncio.gather(
                sse_lags(http, workflow_id), sse_lags(http, workflow_id)
            )
            sse, direct = first + second, await direct_lags(await started())
        else:
            sse = await sse_lags(http, (await started()).id)
            direct = await direct_lags(await started())
        by_sse += sse
        by_client += direct
    return {
        "runs": runs,
        "events": len(by_sse),
        "together": together,
        "sse_median_ms": round(statistics.median(by_sse) * 1000, 1),
        "sse_p95_ms": round(percentile(by_sse, 95) * 1000, 1),
        "client_median_ms": round(statistics.median(by_client) * 1000, 1),
        "client_p95_ms": round(percentile(by_client, 95) * 1000, 1),
    }


async def streams_cost(
    agents: AgentClient,
    http: httpx.AsyncClient,
    metrics_port: int,
    streams: int,
    seconds: float,
) -> dict[str, Any]:
    """The requests a second the dev server serves while `streams` SSE clients follow one run
    that waits for a person (its plan), then one in a model call that does not stream."""
    waiting = AgentInput(
        prompt="Plan it.",
        plan=True,
        model=ModelSettings(script=[ScriptedTurn(calls=[plan_call()])]),
    )
    in_a_call = AgentInput(
        prompt="Think long.",
        model=ModelSettings(script=[ScriptedTurn(text="done", delay_seconds=seconds + 10)]),
    )
    measured: dict[str, Any] = {"streams": streams, "seconds": seconds}
    for name, agent_input, awaited in (
        ("waiting_for_a_person", waiting, "plan_submitted"),
        ("in_a_model_call", in_a_call, "step_started"),
    ):
        run = await agents.start(agent_input, workflow_id=f"bench-{uuid.uuid4()}")
        caught_up = [asyncio.Event() for _ in range(streams)]
        followers = [
            asyncio.create_task(follow_until_cancelled(http, run.id, awaited, c)) for c in caught_up
        ]
        try:
            await asyncio.wait_for(asyncio.gather(*(c.wait() for c in caught_up)), 60)
            await asyncio.sleep(2)  # past the streams' start (each describes the run once)
            before = await served(agents.client, metrics_port)
            begun = time.perf_counter()
            await asyncio.sleep(seconds)
            after = await served(agents.client, metrics_port)
            took = time.perf_counter() - begun
        finally:
            for follower in followers:
                follower.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
            await run.handle.terminate("measured")
        described = after["DescribeWorkflowExecution"] - before["DescribeWorkflowExecution"]
        queried = after["QueryWorkflow"] - before["QueryWorkflow"]
        # The worker's too (its polls and heartbeats), less the count's own marker.
        everything = after.total() - before.total() - 1
        measured[name] = {
            "describes_per_s": round(described / took, 2),
            "queries_per_s": round(queried / took, 2),
            "streams_requests_per_s": round((described + queried) / took, 2),
            "all_requests_per_s": round(everything / took, 2),
        }
    return measured


async def protocol_starts_through(
    address: str, task_queue: str, token: str, args: SimpleNamespace
) -> dict[str, Any]:
    """protocol_starts through a serve of its own, with --agent, on `task_queue`."""
    with tempfile.TemporaryDirectory() as scratch:
        agent = Path(scratch) / "agent.json"
        template = WAITING_AGENT.model_dump(mode="json", exclude_defaults=True)
        agent.write_text(json.dumps({k: v for k, v in template.items() if k != "prompt"}))
        server, url = await serve(address, task_queue, token, "--agent", str(agent))
        headers = {"Authorization": f"Bearer {token}"}
        try:
            async with httpx.AsyncClient(base_url=url, headers=headers) as http:
                await protocol_starts(http, 5)  # each way warm
                return await protocol_starts(http, args.starts)
        finally:
            server.terminate()
            await server.communicate()


def plan_call() -> ScriptedCall:
    return ScriptedCall(name="submit_plan", arguments={"steps": ["Wait for a person."]})


async def follow_until_cancelled(
    http: httpx.AsyncClient, workflow_id: str, awaited: str, caught_up: asyncio.Event
) -> None:
    async with http.stream("GET", f"/api/runs/{workflow_id}/events", timeout=None) as stream:
        async for line in stream.aiter_lines():
            if line == f"event: {awaited}":
                caught_up.set()


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--starts", type=int, default=100)
@click.option("--runs", type=int, default=10)
@click.option("--steps", type=int, default=10)
@click.option("--together", is_flag=True, help="two SSE clients a run")
@click.option("--streams", type=int, default=20, help="SSE clients of the run measured")
@click.option("--seconds", type=float, default=10.0, help="how long each is measured")
@click.option("--json", type=Path)
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_MESSAGE_STORE"] = str(Path(scratch) / "messages.db")
        os.environ["AGENT_RESULT_STORE"] = str(Path(scratch) / "results.db")
        metrics_port = free_port()
        async with embedded_dev_server(extra_args=["--metrics-port", str(metrics_port)]) as env:
            # The starts go to a queue no worker serves: they only start, and load nothing.
            idle, task_queue = f"bench-idle-{uuid.uuid4()}", f"bench-{uuid.uuid4()}"
            address = env.client.service_client.config.target_host
            server, url = await serve(address, idle, token)
            headers = {"Authorization": f"Bearer {token}"}
            try:
                async with (
                    build_worker(env.client, task_queue),
                    httpx.AsyncClient(base_url=url, headers=headers) as http,
                ):
                    idle_agents = AgentClient(env.client, idle)
                    await starts(idle_agents, http, 5)  # both ways warm
                    started = await starts(idle_agents, http, args.starts)
                    agents = AgentClient(env.client, task_queue)
                    await event_lags(agents, http, 1, 3)  # the stream's first use, not counted
                    lags = await event_lags(agents, http, args.runs, args.steps, args.together)
                    cost = await streams_cost(
                        agents, http, metrics_port, args.streams, args.seconds
                    )
                    protocols = await protocol_starts_through(address, idle, token, args)
            finally:
                server.terminate()
                await server.communicate()
    print(
        f"start, {started['starts']} each way: AgentClient {started['direct_median_ms']} ms, "
        f"HTTP {started['http_median_ms']} ms median (p95 {started['direct_p95_ms']} / "
        f"{started['http_p95_ms']} ms): serve adds {started['added_median_ms']} ms"
    )
    print(
        f"event lag, {lags['events']} events of {lags['runs']} runs"
        f"{', two SSE clients a run' if lags['together'] else ''}: SSE median "
        f"{lags['sse_median_ms']} ms, p95 {lags['sse_p95_ms']} ms; AgentRun.events() median "
        f"{lags['client_median_ms']} ms, p95 {lags['client_p95_ms']} ms"
    )
    print(
        f"conversation start, {protocols['starts']} each way through serve --agent: HTTP API "
        f"{protocols['http_median_ms']} ms, A2A {protocols['a2a_median_ms']} ms, AG-UI "
        f"{protocols['ag_ui_median_ms']} ms median (p95 {protocols['http_p95_ms']} / "
        f"{protocols['a2a_p95_ms']} / {protocols['ag_ui_p95_ms']} ms): A2A adds "
        f"{protocols['a2a_added_median_ms']} ms, AG-UI {protocols['ag_ui_added_median_ms']} ms"
    )
    for state in ("waiting_for_a_person", "in_a_model_call"):
        rates = cost[state]
        print(
            f"{cost['streams']} SSE clients of one run {state.replace('_', ' ')}: "
            f"{rates['streams_requests_per_s']} requests/s to the dev server "
            f"({rates['describes_per_s']} describes, {rates['queries_per_s']} queries; "
            f"{rates['all_requests_per_s']} with the worker's)"
        )
    if args.json:
        measured = {
            "start": started,
            "event_lag": lags,
            "streams_cost": cost,
            "protocol_start": protocols,
        }
        args.json.write_text(json.dumps(measured, indent=2))
    return 0


if __name__ == "__main__":
    # Without the SDK's teardown, which can abort at exit after a dev server.
    exit_now(asyncio.run(main()))
