"""What the HTTP API adds: a start through `durable-agent serve` against `AgentClient` direct,
and how late a run's events reach an SSE client against `AgentRun.events()`.

    python bench/http_api.py [--starts 100] [--runs 10] [--steps 10] [--json FILE]

An embedded dev server and an in-process worker; `durable-agent serve --address` in a process
of its own, as it is deployed. Starts alternate between the two ways (so that the server's
warming and any drift fall on both alike), over one kept-alive HTTP connection; each start is
timed from the call to its answer. Event lag is the time from an event's `at` (the workflow's
time when it published it) to its arrival, for every event of `--runs` runs of `--steps`
steps followed by SSE, and as many followed by `AgentRun.events()` (`--together`: two SSE
clients follow each run at once, sharing serve's one follower of it).
"""

from __future__ import annotations

import argparse
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
from typing import Any

import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tests.tools_for_tests  # noqa: F401  (registers `blob`)
from durable_agent.cli.plumbing import exit_now
from durable_agent.client.agent_client import AgentClient, AgentRun, percentile
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import (
    AgentInput,
    Limits,
    ModelSettings,
    ScriptedCall,
    ScriptedTurn,
)

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


async def serve(address: str, task_queue: str, token: str) -> tuple[Any, str]:
    env = {**os.environ, "AGENT_API_TOKEN": token}
    server = await asyncio.create_subprocess_exec(
        CLI, "serve", "--address", address, "--task-queue", task_queue, "--port", "0",
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


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--starts", type=int, default=100)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--together", action="store_true", help="two SSE clients a run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_MESSAGE_STORE"] = str(Path(scratch) / "messages.db")
        os.environ["AGENT_RESULT_STORE"] = str(Path(scratch) / "results.db")
        async with embedded_dev_server() as env:
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
    if args.json:
        args.json.write_text(json.dumps({"start": started, "event_lag": lags}, indent=2))
    return 0


if __name__ == "__main__":
    # Without the SDK's teardown, which can abort at exit after a dev server.
    exit_now(asyncio.run(main()))
