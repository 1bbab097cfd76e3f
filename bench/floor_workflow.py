"""The floor: a plain Temporal workflow doing what an agent run of K steps must do, and no more.

K+1 "model" activities and K "tool" activities, each a no-op that returns what the scripted model
and the benchmark's tool return in an agent run, and every model call carries the whole
transcript so far (as a plain workflow does: no references, no stores). No budget, no trace, no
search attributes, no transcript checks: whatever the agent costs beyond this is its overhead.

Deterministic imports only: the worker's sandbox re-imports this module.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from durable_agent.workflows.transcript import (
        AssistantMessage,
        Message,
        ToolCall,
        ToolResult,
        UserMessage,
    )

RESULT_CHARS = 200
"""What the benchmark's tool returns per call, in the agent's runs and the floor's."""


def tool_result_text(item: int) -> str:
    head = f"item {item}: in stock, ships from warehouse {item % 7}. "
    return (head + "x" * RESULT_CHARS)[:RESULT_CHARS]


class FloorInput(BaseModel):
    prompt: str
    steps: int
    """Tool-calling turns; the run makes steps + 1 model calls and `steps` tool calls."""
    delay_seconds: float = 0.0
    """How long each model call takes, as the scripted model's `delay_seconds`."""


class FloorModelInput(BaseModel):
    messages: list[Message]
    step: int
    steps: int
    delay_seconds: float = 0.0


class FloorToolInput(BaseModel):
    call: ToolCall


@activity.defn
async def floor_model(request: FloorModelInput) -> AssistantMessage:
    if request.delay_seconds:
        await asyncio.sleep(request.delay_seconds)
    if request.step > request.steps:
        return AssistantMessage(content="done")
    call = ToolCall(
        id=f"call_{request.step}_1", name="lookup", arguments=f'{{"item":{request.step}}}'
    )
    return AssistantMessage(tool_calls=(call,))


@activity.defn
async def floor_tool(request: FloorToolInput) -> str:
    return tool_result_text(int(request.call.arguments.split(":")[1].rstrip("}")))


@workflow.defn
class FloorWorkflow:
    @workflow.run
    async def run(self, floor_input: FloorInput) -> str:
        messages: list[Message] = [UserMessage(content=floor_input.prompt)]
        for step in range(1, floor_input.steps + 2):
            reply = await workflow.execute_activity(
                floor_model,
                FloorModelInput(
                    messages=messages,
                    step=step,
                    steps=floor_input.steps,
                    delay_seconds=floor_input.delay_seconds,
                ),
                start_to_close_timeout=timedelta(seconds=60),
            )
            messages.append(reply)
            if not reply.tool_calls:
                return reply.content or ""
            for call in reply.tool_calls:
                content = await workflow.execute_activity(
                    floor_tool,
                    FloorToolInput(call=call),
                    start_to_close_timeout=timedelta(seconds=60),
                )
                messages.append(
                    ToolResult(tool_call_id=call.id, tool_name=call.name, content=content)
                )
        raise AssertionError("unreachable: the last model call answers")
