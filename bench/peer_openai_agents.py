"""The K-step workload on Temporal's OpenAI Agents integration, with its own scripted model.

A `Model` that plays the script (K calls of `lookup`, then "done"; K is in the prompt) behind
`OpenAIAgentsPlugin`, so each model call is an activity; the tool is an activity too
(`activity_as_tool`), as in this project's agent.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from agents import Agent, Model, ModelProvider, ModelResponse, Runner, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from temporalio import activity, workflow
from temporalio.openai_agents.workflow import activity_as_tool

from bench.floor_workflow import tool_result_text


@activity.defn
async def openai_agents_lookup(item: int) -> str:
    """Look up one item: its stock and warehouse (about 200 characters)."""
    return tool_result_text(item)


class ScriptedModel(Model):
    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any):
        items = [input] if isinstance(input, str) else list(input)
        prompt = next(
            str(i["content"]) for i in items if isinstance(i, dict) and i.get("role") == "user"
        )
        done = sum(
            1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        )
        if done >= int(prompt.rsplit("steps=", 1)[1]):
            output: Any = ResponseOutputMessage(
                id="msg",
                content=[ResponseOutputText(text="done", annotations=[], type="output_text")],
                role="assistant",
                status="completed",
                type="message",
            )
        else:
            step = done + 1
            output = ResponseFunctionToolCall(
                arguments=json.dumps({"item": step}),
                call_id=f"call_{step}_1",
                name="openai_agents_lookup",
                type="function_call",
                id=f"fc_{step}",
                status="completed",
            )
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class ScriptedProvider(ModelProvider):
    def get_model(self, model_name: str | None) -> Model:
        return ScriptedModel()


@workflow.defn
class OpenAIAgentsBenchWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        agent = Agent(
            name="bench",
            instructions="Check every item.",
            tools=[
                activity_as_tool(openai_agents_lookup, start_to_close_timeout=timedelta(seconds=60))
            ],
        )
        result = await Runner.run(agent, prompt, max_turns=1000)
        return str(result.final_output)
