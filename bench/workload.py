"""The K-step workload every row of the suite runs: K tool-calling turns, then an answer.

Three ways to run it: as an AgentWorkflow run (the scripted model), as the floor (a plain
workflow, bench/floor_workflow.py), and bare (the same model and tool in a plain loop, no
Temporal at all).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from bench.floor_workflow import (
    FloorInput,
    FloorWorkflow,
    floor_model,
    floor_tool,
    tool_result_text,
)
from durable_agent.activities.providers import scripted
from durable_agent.activities.tools import tool, tool_specs
from durable_agent.serving.sandbox_runner import WORKFLOW_RUNNER, AgentSandboxRunner
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.status import starting_search_attributes
from durable_agent.workflows.transcript import Message, ToolResult, UserMessage

PROMPT = "Check every item of the order and say which ones ship."


@tool(retry=RetrySettings(maximum_attempts=3, initial_interval_seconds=0.05))
async def lookup(item: int) -> str:
    """Look up one item: its stock and warehouse (about 200 characters)."""
    return tool_result_text(item)


@tool(retry=RetrySettings(maximum_attempts=3, initial_interval_seconds=0.05), local=True)
async def lookup_local(item: int) -> str:
    """Look up one item: its stock and warehouse (about 200 characters)."""
    return tool_result_text(item)


def script(steps: int, delay_seconds: float = 0.0, tool_name: str = "lookup") -> list[ScriptedTurn]:
    turns = [
        ScriptedTurn(
            calls=[ScriptedCall(name=tool_name, arguments={"item": i})],
            delay_seconds=delay_seconds,
        )
        for i in range(1, steps + 1)
    ]
    return [*turns, ScriptedTurn(text="done", delay_seconds=delay_seconds)]


def agent_input(steps: int, delay_seconds: float = 0.0, *, local_tool: bool = False) -> AgentInput:
    """The workload; with `local_tool`, its tool is the same lookup declared `local=True`."""
    tool_name = "lookup_local" if local_tool else "lookup"
    return AgentInput(
        prompt=PROMPT,
        tools=[tool_name],
        model=ModelSettings(provider="scripted", script=script(steps, delay_seconds, tool_name)),
        limits=Limits(max_steps=steps + 1),
    )


FLOOR_PASSED_THROUGH = AgentSandboxRunner(
    restrictions=WORKFLOW_RUNNER.restrictions.with_passthrough_modules("bench.floor_workflow")
)
"""The agent's sandbox settings, given to the floor: its module passed through too."""


def floor_worker(client: Client, task_queue: str, **options: Any) -> Worker:
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[FloorWorkflow],
        activities=[floor_model, floor_tool],
        **options,
    )


async def run_agent(
    client: Client,
    task_queue: str,
    steps: int,
    delay_seconds: float = 0.0,
    *,
    linear_history: bool = True,
    local_tool: bool = False,
) -> tuple[float, str]:
    """(seconds from start to result, workflow id)."""
    workflow_id = f"bench-agent-{steps}-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    chosen = agent_input(steps, delay_seconds, local_tool=local_tool)
    result = await client.execute_workflow(
        AgentWorkflow.run,
        chosen.model_copy(update={"linear_history": linear_history}),
        id=workflow_id,
        task_queue=task_queue,
        # As AgentClient.start sets them: the run's first status upsert is then not sent.
        search_attributes=starting_search_attributes(),
    )
    elapsed = time.perf_counter() - started
    assert result.steps == steps + 1, result
    return elapsed, workflow_id


async def run_floor(
    client: Client, task_queue: str, steps: int, delay_seconds: float = 0.0
) -> tuple[float, str]:
    workflow_id = f"bench-floor-{steps}-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    answer = await client.execute_workflow(
        FloorWorkflow.run,
        FloorInput(prompt=PROMPT, steps=steps, delay_seconds=delay_seconds),
        id=workflow_id,
        task_queue=task_queue,
    )
    elapsed = time.perf_counter() - started
    assert answer == "done", answer
    return elapsed, workflow_id


async def run_bare(steps: int) -> float:
    """The same model and tool, called in a plain loop: what the work costs without durability.

    Each model request and tool result goes through the pydantic converter, as an activity's
    input and output would, so that serialisation is not what tells the rows apart."""
    settings = ModelSettings(provider="scripted", script=script(steps))
    specs = tool_specs(["lookup"])
    messages: list[Message] = [UserMessage(content=PROMPT)]
    converter = pydantic_data_converter.payload_converter
    started = time.perf_counter()
    for step in range(1, steps + 2):
        request = ModelRequest(
            settings=settings, system=None, messages=messages, tools=specs, step=step
        )
        (payload,) = converter.to_payloads([request])
        request = converter.from_payloads([payload], [ModelRequest])[0]
        response = await scripted.complete(request)
        messages.append(response.message)
        for call in response.message.tool_calls:
            content = await lookup(**json.loads(call.arguments))
            messages.append(ToolResult(tool_call_id=call.id, tool_name=call.name, content=content))
        if not response.message.tool_calls:
            break
    return time.perf_counter() - started
