"""Tools: plain Python functions, registered with `@tool`, each run as its own activity type.

The JSON schema the model sees is generated from the function's signature by pydantic and its
description is the docstring, so a tool is documented once, where it is written. Seed 003: the
docstring is a prompt; say when to use the tool, what comes back and how much of it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from temporalio import activity

from workflows.errors import AgentError
from workflows.models import (
    DEFAULT_MAX_RESULT_CHARS,
    RetrySettings,
    ToolActivityInput,
    ToolActivityResult,
    ToolSpec,
)

logger = logging.getLogger(__name__)

RESERVED_TOOL_NAMES = frozenset({"finish"})


@dataclass(frozen=True)
class RegisteredTool:
    spec: ToolSpec
    function: Callable[..., Any]
    arguments_model: type[BaseModel]
    activity: Callable[[ToolActivityInput], Any]


_registry: dict[str, RegisteredTool] = {}


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    side_effects: bool = False,
    timeout_seconds: float = 30.0,
    retry: RetrySettings | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> Any:
    """Register a function as a tool: bare (`@tool`) or with options (`@tool(side_effects=True)`).

    `side_effects` makes the call run alone, in the model's order; `timeout_seconds` bounds one
    attempt; `retry` is the tool's own retry policy; `max_result_chars` bounds what the model sees.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        tool_name = name or fn.__name__
        if tool_name in RESERVED_TOOL_NAMES:
            raise ValueError(f"{tool_name!r} is a built-in tool name")
        if tool_name in _registry and _registry[tool_name].function is not fn:
            raise ValueError(f"a tool named {tool_name!r} is already registered")
        arguments_model = _arguments_model(tool_name, fn)
        spec = ToolSpec(
            name=tool_name,
            description=inspect.cleandoc(fn.__doc__ or "").strip() or tool_name,
            parameters=_without_titles(arguments_model.model_json_schema()),
            side_effects=side_effects,
            timeout_seconds=timeout_seconds,
            retry=retry or RetrySettings(),
            max_result_chars=max_result_chars,
        )
        _registry[tool_name] = RegisteredTool(
            spec=spec,
            function=fn,
            arguments_model=arguments_model,
            activity=_tool_activity(tool_name, fn, arguments_model),
        )
        return fn

    return register(function) if function is not None else register


def registered_tools() -> dict[str, RegisteredTool]:
    return dict(_registry)


def tool_specs(names: list[str] | None = None) -> list[ToolSpec]:
    """Specs of the named tools (all registered tools when None), in a stable order.

    Raises KeyError naming the tools that are not registered.
    """
    if names is None:
        return [_registry[n].spec for n in sorted(_registry)]
    unknown = [n for n in names if n not in _registry]
    if unknown:
        raise KeyError(f"not registered on this worker: {', '.join(unknown)}")
    return [_registry[n].spec for n in names]


def tool_activities() -> list[Callable[..., Any]]:
    return [registered.activity for registered in _registry.values()]


def truncate_middle(text: str, limit: int) -> tuple[str, int]:
    """Bound a text, keeping both ends: the start has the structure, the end the newest rows.

    Returns the bounded text and how many characters were omitted from its middle.
    """
    if len(text) <= limit:
        return text, 0
    marker_room = 64
    keep = max(limit - marker_room, 0)
    head, tail = keep - keep // 2, keep // 2
    omitted = len(text) - head - tail
    marker = f"\n\n... [{omitted} characters omitted] ...\n\n"
    return text[:head] + marker + (text[len(text) - tail :] if tail else ""), omitted


def render_result(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, ensure_ascii=False, default=str)


def describe_validation_error(tool_name: str, error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        field = ".".join(str(part) for part in item["loc"]) or "(arguments)"
        got = (
            "" if item["type"] == "missing" else f" (got {json.dumps(item['input'], default=str)})"
        )
        problems.append(f"{field}: {item['msg']}{got}")
    return (
        f"Error: invalid arguments for {tool_name}: "
        + "; ".join(problems)
        + ". The tool did not run; fix the arguments and call it again."
    )


def _arguments_model(tool_name: str, fn: Callable[..., Any]) -> type[BaseModel]:
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args and **kwargs cannot be described to a model")
        if parameter.name not in hints:
            raise TypeError(f"tool {tool_name}: parameter {parameter.name!r} needs a type hint")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints[parameter.name], default)
    return create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _without_titles(schema: Any) -> Any:
    """Drop pydantic's generated titles: tokens on every call that tell the model nothing."""
    if isinstance(schema, dict):
        cleaned = {}
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
                cleaned[key] = {k: _without_titles(v) for k, v in value.items()}
            else:
                cleaned[key] = _without_titles(value)
        return cleaned
    if isinstance(schema, list):
        return [_without_titles(item) for item in schema]
    return schema


def _tool_activity(
    tool_name: str, fn: Callable[..., Any], arguments_model: type[BaseModel]
) -> Callable[[ToolActivityInput], Any]:
    is_async = inspect.iscoroutinefunction(fn)

    @activity.defn(name=tool_name)
    async def run_tool(call: ToolActivityInput) -> ToolActivityResult:
        try:
            arguments = arguments_model.model_validate(call.arguments)
        except ValidationError as error:
            # The model can fix this: it becomes the call's result, and nothing is retried.
            return ToolActivityResult(
                content=describe_validation_error(tool_name, error), is_error=True
            )
        kwargs = {field: getattr(arguments, field) for field in arguments_model.model_fields}
        try:
            if is_async:
                value = await fn(**kwargs)
            else:
                value = await asyncio.to_thread(fn, **kwargs)
        except AgentError:
            raise
        except Exception:
            # The traceback is for the operator; the model only learns the exception's type.
            info = activity.info()
            activity.logger.exception(
                "tool %s failed (call %s, attempt %d)", tool_name, call.tool_call_id, info.attempt
            )
            raise
        content, omitted = truncate_middle(render_result(value), call.max_result_chars)
        return ToolActivityResult(content=content, omitted_chars=omitted)

    return run_tool
