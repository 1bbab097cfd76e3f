"""The wire contract: what a Temporal client in any language needs to start, steer and read an
agent run, as JSON Schemas. It is read from the workflow class itself (the SDK's definition of
its run, signals, queries and updates) and from the pydantic models those take and answer, so
there is no second list to keep: a handler added to the workflow is in the contract.

    print(json.dumps(contract()))        # what `durable-agent contract` prints
    print(json.dumps(example_input()))   # a minimal input that runs the scripted demo

docs/contract.md shows it used from the `temporal` CLI, TypeScript and Go.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import TypeAdapter
from temporalio import workflow

from ..demo import script as demo
from ..workflows.agent import AgentWorkflow
from ..workflows.inputs import DEFAULT_TASK_QUEUE, AgentInput

Schema = dict[str, Any]
EXAMPLE_PROMPT = "Where is my latest order? My email is a@b.com."


def contract(task_queue: str = DEFAULT_TASK_QUEUE) -> dict[str, Any]:
    """The workflow's type, queue, input and result, and each update, signal and query by
    name: its description, its input's schema (None when it takes none) and its result's
    (updates and queries). Inputs are schemas of what the workflow accepts; results, of what
    it sends."""
    definition = workflow._Definition.must_from_class(AgentWorkflow)
    updates = {
        name: {**_about(handler.fn, handler.description, handler.arg_types)}
        | {"result": _schema(handler.ret_type, "serialization")}
        for name, handler in _named(definition.updates)
    }
    signals = {
        name: _about(handler.fn, handler.description, handler.arg_types)
        for name, handler in _named(definition.signals)
    }
    for name, signal in signals.items():
        if not signal["description"] and name in updates:
            # The signal twin of an update (for the Web UI and `temporal workflow signal`).
            signal["description"] = (
                f"{updates[name]['description']} As a signal: nothing is answered, and one "
                "the update would refuse is logged and ignored."
            )
    queries = {
        name: {**_about(handler.fn, handler.description, handler.arg_types)}
        | {"result": _schema(handler.ret_type, "serialization")}
        for name, handler in _named(definition.queries)
    }
    return {
        "workflow": {
            "type": definition.name,
            "task_queue": task_queue,
            "input": _input_schema(definition.arg_types or []),
            "result": _schema(definition.ret_type, "serialization"),
        },
        "updates": updates,
        "signals": signals,
        "queries": queries,
    }


def example_input() -> dict[str, Any]:
    """A minimal valid workflow input that runs the scripted demo (no key, no network): the
    support conversation over the demo's SQLite tools, as `durable-agent` runs it by default.
    Only the fields that differ from their defaults are given."""
    agent_input = AgentInput(
        prompt=EXAMPLE_PROMPT,
        system=demo.SUPPORT_DEMO_SYSTEM,
        model=demo.demo_model(),
    )
    return agent_input.model_dump(mode="json", exclude_defaults=True)


def _named(handlers: Any) -> list[tuple[str, Any]]:
    """The handlers with a name, by name (a dynamic handler, which takes any name, is not a
    part of the contract)."""
    return sorted((name, handler) for name, handler in handlers.items() if name)


def _about(fn: Callable[..., Any], description: str | None, args: Sequence[Any] | None) -> Schema:
    return {"description": description or _first_paragraph(fn), "input": _input_schema(args)}


def _first_paragraph(fn: Callable[..., Any]) -> str:
    text = inspect.getdoc(fn) or ""
    return " ".join(text.split("\n\n")[0].split())


def _input_schema(args: Sequence[Any] | None) -> Schema | None:
    """The schema of a handler's one argument; None when it takes none."""
    if not args:
        return None
    if len(args) > 1:  # none of the workflow's handlers takes more than one argument
        raise TypeError(f"a handler of {len(args)} arguments has no one input schema")
    return _schema(args[0], "validation")


def _schema(annotation: Any, mode: Literal["validation", "serialization"]) -> Schema:
    if annotation is None or annotation is type(None):
        return {"type": "null"}
    return TypeAdapter(annotation).json_schema(mode=mode)
