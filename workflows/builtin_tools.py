"""The tools the loop itself provides: finish, submit_plan, delegate and read_result.

Specs and names, as data, and the answer an accepted finish gives: the loop offers them
(workflows/dispatch.py decides what a call to one means) and no activity is registered for
finish, submit_plan or delegate. read_result is an ordinary tool activity
(activities/read_result.py) that the loop offers once a result was externalised. Pure.
"""

from __future__ import annotations

import json
from typing import Any

from .specs import ToolSpec

FINISH = "finish"
SUBMIT_PLAN = "submit_plan"
DELEGATE = "delegate"
READ_RESULT = "read_result"
RESERVED_TOOL_NAMES = frozenset({FINISH, SUBMIT_PLAN, DELEGATE})
"""Names no app's tool may take (read_result is the worker's own tool, registered as any)."""
LOOP_TOOLS = (FINISH, SUBMIT_PLAN)
"""Answered by the loop itself, never by an activity."""

DELEGATE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 1, "description": "The subtask, complete."},
        "tools": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tools the sub-agent may use (default: the ones you have).",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}

DELEGATE_SPEC = ToolSpec(
    name=DELEGATE,
    description=(
        "Hand a self-contained subtask to a sub-agent that starts with a fresh context and "
        "returns only its conclusion. Use it for work whose details you do not need to see "
        "(reading many records to answer one question), to keep your own context small. Say "
        "everything the sub-agent needs in the task; it cannot see this conversation. Returns "
        "the sub-agent's answer, or an error saying why it failed. Its cost counts against your "
        "budget."
    ),
    parameters=DELEGATE_PARAMETERS,
    # A sub-agent may change data, so it runs alone and only after approval.
    side_effects=True,
    # The sub-agent asks for its own calls, under this run's policy.
    needs_approval=False,
)

SUBMIT_PLAN_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "description": "The plan's steps, in order.",
        }
    },
    "required": ["steps"],
    "additionalProperties": False,
}

SUBMIT_PLAN_SPEC = ToolSpec(
    name=SUBMIT_PLAN,
    description=(
        "Submit your plan before doing anything that changes data: the steps you will take, in "
        "order, one short sentence each. A person reviews it; the run waits for their decision. "
        "If they approve, the tools that change data become available and you carry the plan "
        "out; if they reject it, their feedback comes back to you and you plan again. Read-only "
        "tools may be used before it to gather what the plan needs."
    ),
    parameters=SUBMIT_PLAN_PARAMETERS,
)

_FINISH_DESCRIPTION = (
    "Give your final answer and end the run. Call it once, when you are done; nothing you call "
    "after it runs. Its arguments are checked, and a mismatch comes back to you as an error."
)
_DEFAULT_ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "The final answer."}},
    "required": ["answer"],
    "additionalProperties": False,
}


def finish_spec(output_schema: dict[str, Any] | None) -> ToolSpec:
    """finish, taking the run's output schema as its arguments (else one `answer` string)."""
    return ToolSpec(
        name=FINISH,
        description=_FINISH_DESCRIPTION,
        parameters=output_schema or _DEFAULT_ANSWER_SCHEMA,
    )


def finish_answer(arguments: dict[str, Any], output_schema: dict[str, Any] | None) -> str:
    """The run's answer, of an accepted finish's arguments: its `answer`, or, with an output
    schema, the arguments themselves as JSON."""
    if output_schema is None:
        return str(arguments["answer"])
    return json.dumps(arguments, ensure_ascii=False)
