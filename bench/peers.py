"""The peers, on the same dev server as the floor and the agent: Pydantic AI's Temporal agent and
Temporal's OpenAI Agents integration, each with its own scripted model, interleaved run by run.

Optional: `pip install ".[bench-peers]"`. Without it each peer's row says it was skipped, and why.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker

from bench import workload

INSTALL = 'pip install ".[bench-peers]"'
Runner = Callable[[int], Awaitable[tuple[float, str]]]
"""Runs the K-step workload once: (seconds, workflow id)."""


async def _timed(client: Client, workflow: Any, prompt: str, queue: str) -> tuple[float, str]:
    workflow_id = f"bench-peer-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    answer = await client.execute_workflow(workflow, prompt, id=workflow_id, task_queue=queue)
    elapsed = time.perf_counter() - started
    assert answer == "done", answer
    return elapsed, workflow_id


@contextlib.asynccontextmanager
async def pydantic_ai(client: Client) -> AsyncIterator[tuple[Client, Runner]]:
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin

    from bench.peer_pydantic_ai import PydanticAIBenchWorkflow

    config = client.config()
    config["plugins"] = [PydanticAIPlugin()]
    config["interceptors"] = []
    config["data_converter"] = DataConverter.default
    peer = Client(**config)
    queue = f"bench-pydantic-ai-{uuid.uuid4()}"
    async with Worker(peer, task_queue=queue, workflows=[PydanticAIBenchWorkflow]):
        yield peer, lambda k: _timed(peer, PydanticAIBenchWorkflow.run, f"steps={k}", queue)


@contextlib.asynccontextmanager
async def openai_agents(client: Client) -> AsyncIterator[tuple[Client, Runner]]:
    from agents import set_tracing_disabled
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin

    from bench.peer_openai_agents import (
        OpenAIAgentsBenchWorkflow,
        ScriptedProvider,
        openai_agents_lookup,
    )

    set_tracing_disabled(True)  # it would export traces to OpenAI
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=_minute()),
        model_provider=ScriptedProvider(),
    )
    config = client.config()
    config["plugins"] = [plugin]
    config["interceptors"] = []
    config["data_converter"] = DataConverter.default
    peer = Client(**config)
    queue = f"bench-openai-agents-{uuid.uuid4()}"
    async with Worker(
        peer,
        task_queue=queue,
        workflows=[OpenAIAgentsBenchWorkflow],
        activities=[openai_agents_lookup],
    ):
        yield peer, lambda k: _timed(peer, OpenAIAgentsBenchWorkflow.run, f"steps={k}", queue)


def _minute() -> Any:
    from datetime import timedelta

    return timedelta(seconds=60)


PEERS = {
    "Pydantic AI (TemporalDurability)": pydantic_ai,
    "temporalio openai_agents": openai_agents,
}


async def run(report: Any, w: Any, steps_list: list[int], runs: int) -> dict[str, Any]:
    """Floor, agent and each peer that installs, interleaved run by run; ratios to the floor."""
    from bench.suite import history_of

    figures: dict[str, Any] = {}
    runners: dict[str, tuple[Client, Runner]] = {
        "floor": (w.client, lambda k: workload.run_floor(w.client, w.floor_queue, k)),
        "this project's agent": (
            w.client,
            lambda k: workload.run_agent(w.client, w.agent_queue, k),
        ),
    }
    async with contextlib.AsyncExitStack() as stack:
        for name, start in PEERS.items():
            try:
                runners[name] = await stack.enter_async_context(start(w.client))
                await runners[name][1](1)  # warm-up
            except ImportError as missing:
                reason = f"skipped: {missing.name or missing} is not installed ({INSTALL})"
                figures[name] = {"skipped": reason}
                report.add("peers", name, reason)
        if len(runners) == 2:
            return figures  # no peer: the overhead rows already compare the agent and the floor
        for steps in steps_list:
            samples: dict[str, list[tuple[float, str]]] = {name: [] for name in runners}
            for _ in range(runs):
                for name, (_, runner) in runners.items():
                    samples[name].append(await runner(steps))
            floor = statistics.median(s for s, _ in samples["floor"])
            for name, (peer_client, _) in runners.items():
                taken = samples[name]
                seconds = statistics.median(s for s, _ in taken)
                events = await history_of(peer_client, taken[0][1])
                figures.setdefault(name, {})[str(steps)] = {
                    "seconds": [s for s, _ in taken],
                    "median": seconds,
                    "ratio": seconds / floor,
                    **events,
                }
                report.add(
                    "peers",
                    f"K={steps}: {name}",
                    f"{seconds:.3f} s = {seconds / floor:.2f}x floor; {events['events']} events, "
                    f"{events['bytes']:,} B",
                )
    if len(steps_list) > 1:
        first, last = str(steps_list[0]), str(steps_list[-1])
        for name in runners:
            a, b = figures[name][first], figures[name][last]
            span = steps_list[-1] - steps_list[0]
            per_step = (b["events"] - a["events"]) / span
            figures[name]["events_per_step"] = per_step
            report.add(
                "peers",
                f"{name}: each step adds",
                f"{per_step:.1f} events; bytes: {b['bytes'] / a['bytes']:.1f}x "
                f"for {steps_list[-1] / steps_list[0]:.0f}x the steps",
            )
        ours = figures["this project's agent"]["events_per_step"]
        theirs = {name: figures[name]["events_per_step"] for name in runners if name in PEERS}
        report.add(
            "peers",
            "events a step: this project's agent against each peer",
            f"{ours:.1f} against "
            + ", ".join(f"{value:.1f} ({name})" for name, value in theirs.items()),
            "fewer than each peer",
            all(ours < value for value in theirs.values()),
        )
    return figures
