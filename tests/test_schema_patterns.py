"""Patterns in an output schema: matched in linear time, whatever the model writes (issue 37).

The answer's text is the model's, so a prompt injection picks it; the schema's patterns are the
app's. `^(a+)+$` against thirty `a`s and a `!` took Python's `re` minutes inside the workflow,
holding the worker's thread: every run on the worker stopped, and every retry of the task
matched again. These tests hang on that code (the per-test timeout fails them).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

import durable_agent.workflows.json_schema as json_schema
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentResult
from tests.helpers import TEST_WORKER_OPTIONS, call, run_agent, scripted_input, turn

CATASTROPHIC = "^(a+)+$"
HOSTILE_ANSWER = "a" * 30 + "!"
SCHEMA = {
    "type": "object",
    "properties": {"code": {"type": "string", "pattern": CATASTROPHIC}},
    "patternProperties": {CATASTROPHIC: {"type": "integer"}},
    "required": ["code"],
}


@pytest.mark.timeout(30)
def test_a_catastrophic_pattern_is_checked_at_once() -> None:
    problems = json_schema.problems(SCHEMA, {"code": HOSTILE_ANSWER, HOSTILE_ANSWER: "x"})

    assert "code:" in problems and "does not match" in problems
    assert json_schema.problems(SCHEMA, {"code": "aaaa", "aa": 1}) == ""
    assert "is not of type" in json_schema.problems(SCHEMA, {"code": "a", "aa": "x"})


@pytest.mark.timeout(30)
def test_additional_and_unevaluated_properties_match_patterns_in_linear_time_too() -> None:
    schema = {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {}},
        "additionalProperties": False,
        "unevaluatedProperties": False,
    }
    assert "Additional properties" in json_schema.problems(schema, {HOSTILE_ANSWER: 1})
    assert json_schema.problems(schema, {"aaaa": 1}) == ""


def test_a_pattern_the_linear_engine_cannot_match_is_refused_naming_it() -> None:
    for pattern in (r"^(a)\1$", "^(?=a)a$", "(?<!b)a"):
        with pytest.raises(json_schema.SchemaRefused) as refused:
            json_schema.check({"type": "string", "pattern": pattern})
        assert repr(pattern) in str(refused.value)
        assert "linear time" in str(refused.value)
    json_schema.check(SCHEMA)


def test_a_pattern_that_is_no_regular_expression_is_refused_saying_so() -> None:
    """Not blamed on the linear engine (a `[` was said to need backreferences or lookaround)."""
    for pattern, why in (("[", "unterminated character set"), ("a{2,1}", "min repeat")):
        with pytest.raises(json_schema.SchemaRefused) as refused:
            json_schema.check({"type": "string", "pattern": pattern})
        said = str(refused.value)
        assert f"{pattern!r}, which is not a regular expression: {why}" in said, said
        assert "linear time" not in said


@pytest.mark.timeout(60)
async def test_a_hostile_answer_is_refused_to_the_model_and_no_other_run_notices(
    client: Client, task_queue: str
) -> None:
    hostile = scripted_input(
        [
            turn(call("finish", code=HOSTILE_ANSWER)),
            turn(call("finish", code="aaaa"), expect="does not match"),
        ],
        tools=[],
        output_schema=SCHEMA,
    )
    bystander = scripted_input([turn(text="fine")], tools=[])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handles = [
            await client.start_workflow(
                AgentWorkflow.run, agent_input, id=f"pattern-{uuid.uuid4()}", task_queue=task_queue
            )
            for agent_input in (hostile, bystander)
        ]
        answered: list[AgentResult] = await asyncio.gather(*(h.result() for h in handles))
        transcript = await handles[0].query(AgentWorkflow.transcript)

    assert answered[0].output == {"code": "aaaa"}
    assert answered[1].answer == "fine"
    refusal = next(m.content for m in transcript if m.role == "tool")
    assert refusal.startswith("Error: the answer does not match the required schema: code:")


async def test_a_schema_with_a_backtracking_pattern_fails_the_run_before_step_one(
    client: Client, task_queue: str
) -> None:
    run = await run_agent(
        client,
        task_queue,
        scripted_input(
            [turn(call("finish", code="aa"))],
            tools=[],
            output_schema={"type": "object", "properties": {"code": {"pattern": r"(a)\1"}}},
        ),
    )

    assert run.failure.type == "AgentConfigurationError"
    assert r"'(a)\\1'" in run.failure.message and "linear time" in run.failure.message
    assert run.trace == []


async def test_an_invalid_schema_still_fails_typed(client: Client, task_queue: str) -> None:
    with pytest.raises(WorkflowFailureError) as failed:
        async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
            await client.execute_workflow(
                AgentWorkflow.run,
                scripted_input([turn(text="x")], tools=[], output_schema={"type": 12}),
                id=f"pattern-{uuid.uuid4()}",
                task_queue=task_queue,
            )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "AgentConfigurationError"
    assert "output_schema is not a valid JSON schema" in cause.message
