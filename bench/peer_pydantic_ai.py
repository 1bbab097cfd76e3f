"""The K-step workload on Pydantic AI's Temporal integration, with its own scripted model.

Pydantic AI's `FunctionModel` plays the script (K calls of `lookup`, then "done"; K is in the
prompt); the agent carries `TemporalDurability`, so each model request and each tool call is an
activity, as in this project's agent.
"""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import PydanticAIWorkflow, TemporalDurability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow

from bench.floor_workflow import tool_result_text


def steps_in(messages: list[ModelMessage]) -> int:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return int(part.content.rsplit("steps=", 1)[1])
    raise ValueError("the prompt names no steps=K")


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = sum(
        isinstance(part, ToolReturnPart)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
    )
    if done >= steps_in(messages):
        return ModelResponse(parts=[TextPart("done")])
    step = done + 1
    return ModelResponse(
        parts=[ToolCallPart("lookup", {"item": step}, tool_call_id=f"call_{step}_1")]
    )


agent = Agent(
    FunctionModel(scripted),
    name="bench_pydantic_ai",
    capabilities=[TemporalDurability()],
)


@agent.tool_plain
async def lookup(item: int) -> str:
    """Look up one item: its stock and warehouse (about 200 characters)."""
    return tool_result_text(item)


@workflow.defn
class PydanticAIBenchWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [agent]  # noqa: RUF012  (Pydantic AI's registration protocol)

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await agent.run(prompt)
        return str(result.output)
