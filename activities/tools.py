"""Tools: plain Python functions, registered with `@tool`, each run as its own activity type.

The JSON schema the model sees is generated from the function's signature by pydantic and its
description is the docstring, so a tool is documented once, where it is written. The
docstring is a prompt; say when to use the tool, what comes back and how much of it.

Failures likewise: what the model can fix goes back to it as text. A `ToolError`, and
by default a `ValueError` or `TypeError`, fails the call with its message as the result, on the
first attempt; any other exception is retried under the tool's policy and reaches the model as
its type only (the traceback goes to the worker's log). In a side-effecting tool only a
`ToolError` (or arguments that fail validation, before the body runs) says that nothing changed:
any other exception leaves the call's outcome unknown, and the run logs it for compensation.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..workflows import tool_catalog
from ..workflows.activity_io import ToolActivityInput, ToolActivityResult
from ..workflows.builtin_tools import (
    READ_RESULT,
    RESERVED_TOOL_NAMES,
)
from ..workflows.effect_log import MAX_KEPT_RESULT_CHARS
from ..workflows.errors import AgentError
from ..workflows.history import CONTENT_MIN_CHARS, content_ref
from ..workflows.outcomes import MAY_HAVE_TAKEN_EFFECT, bounded
from ..workflows.specs import DEFAULT_MAX_RESULT_CHARS, RetrySettings, ToolSpec
from ..workflows.state import CompensationInput, RunTools, ToolSelection
from . import progress, telemetry
from ._calling import call_app_function
from ._heartbeat import heartbeating
from .message_store import message_store
from .result_store import result_store, worker_local

logger = logging.getLogger(__name__)

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""What OpenAI and Anthropic accept as a tool's name."""
DEFAULT_ERRORS_TO_MODEL: tuple[type[Exception], ...] = (ValueError, TypeError)
"""Exceptions whose message the model gets by default (bad arguments, which the model
is good at fixing), besides `ToolError`, which it always gets."""
MAX_ERROR_MESSAGE_CHARS = 2_000
"""A failing tool's message is quoted to the model up to this length."""


class ToolError(Exception):
    """Raise it in a tool to fail the call with a message for the model: `raise ToolError("No
    user has the email a@b.com")`. The call is not retried, it is recorded as an error, and the
    model reads `Error: <tool> failed: <message>`. Raising it says that the call changed nothing:
    a side-effecting call that fails this way is not entered in the compensation log. It is the
    only exception that says so (raise it before the effect, or after undoing it): any other, a
    ValueError included, leaves a side-effecting call's outcome unknown, to be undone."""


@dataclass(frozen=True)
class RegisteredTool:
    spec: ToolSpec
    function: Callable[..., Any]
    arguments_model: type[BaseModel]
    activity: Callable[[ToolActivityInput], Any] | None
    """None for a callback tool, whose body runs on a client (`callback_tool`)."""
    compensation_activity: Callable[[CompensationInput], Any] | None = None
    compensation_function: Callable[[CompensationInput], Any] | None = None
    """What `compensation_activity` calls: tools that share one share its activity."""
    errors_to_model: tuple[type[Exception], ...] = DEFAULT_ERRORS_TO_MODEL
    origin: str = ""
    """The module that made it (the one being loaded when a toolkit registered it): what
    `--tools MODULE` and `AgentPlugin(tools=["MODULE"])` select."""


class ToolRegistry:
    """Tools a worker serves, by name: their specs, their activities and their compensations'.

    `DEFAULT_TOOLS`, which `@tool` and `register_toolkit` fill as the app's modules are imported,
    is there for convenience; `AgentPlugin(tools=[...])` builds a registry of its own with
    exactly what it is given, so two plugins in one process share no tool. The workflow never
    reads a registry: a run's specs come from its worker's `resolve_tools` activity, recorded."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}

    def add(self, registered: RegisteredTool) -> None:
        """Serve `registered`; a name already served by another function is refused."""
        name = registered.spec.name
        # == and not `is`: a bound method is a new object each time it is read.
        if name in self._tools and self._tools[name].function != registered.function:
            raise ValueError(
                f"a tool named {name!r} is already registered: give one of them another "
                "name (@tool(name=...), or register_toolkit's name_prefix)"
            )
        compensation = registered.spec.compensation
        if compensation is not None and compensation in self._tools:
            raise ValueError(f"compensation {compensation!r} has a tool's name")
        # One compensation may undo several tools; two functions of one name cannot both be it.
        for other in self._tools.values():
            if (
                compensation is not None
                and other.spec.compensation == compensation
                and other.compensation_function != registered.compensation_function
            ):
                raise ValueError(
                    f"two compensations are named {compensation!r} (of {other.spec.name!r} and "
                    f"{name!r}): a compensation runs as an activity of its name, so rename one"
                )
        self._tools[name] = registered

    def tools(self) -> dict[str, RegisteredTool]:
        return dict(self._tools)

    def from_module(self, module: str) -> list[RegisteredTool]:
        """The tools a module made, in the order it made them."""
        return [r for r in self._tools.values() if r.origin == module]

    def specs(self, names: list[str] | None = None) -> list[ToolSpec]:
        """Specs of the named tools (every tool when None, by name), in a stable order.
        Raises KeyError naming the tools that are not registered."""
        if names is None:
            return [self._tools[n].spec for n in sorted(self._tools)]
        unknown = [n for n in names if n not in self._tools]
        if unknown:
            raise KeyError(f"not registered on this worker: {', '.join(unknown)}")
        return [self._tools[n].spec for n in names]

    def for_run(self, names: list[str] | None) -> RunTools:
        """A run's tools, and read_result when the run did not ask for it (offered only once a
        result was externalised). Raises KeyError as `specs` does."""
        tools = self.specs(names)
        if names is not None and READ_RESULT in names:
            return RunTools(tools=tools)
        tools = [spec for spec in tools if spec.name != READ_RESULT]
        read_result = self._tools.get(READ_RESULT)
        return RunTools(tools=tools, read_result=read_result.spec if read_result else None)

    def activities(self) -> list[Callable[..., Any]]:
        """Every tool's activity and every compensation's, for the worker to register."""
        activities: list[Callable[..., Any]] = []
        compensations: set[str] = set()
        for registered in self._tools.values():
            if registered.activity is not None:
                activities.append(registered.activity)
            undo = registered.spec.compensation
            if registered.compensation_activity is not None and undo not in compensations:
                # Tools that share a compensation share its activity: a worker refuses two
                # activities of one name.
                compensations.add(undo or "")
                activities.append(registered.compensation_activity)
        return activities

    def resolver(self) -> Callable[[ToolSelection], Any]:
        """The `resolve_tools` activity over this registry."""

        @activity.defn(name=tool_catalog.RESOLVE_TOOLS)
        async def resolve_tools(selection: ToolSelection) -> RunTools:
            """The specs of a run's tools, read from this worker's registry when the run starts
            (a local activity: the workflow records the answer and replays from it, so a tool
            redeployed with other specs cannot change what a run in flight replays)."""
            try:
                return self.for_run(selection.names)
            except KeyError as error:
                raise ApplicationError(
                    f"the run asks for tools {error.args[0]}",
                    type="AgentConfigurationError",
                    non_retryable=True,
                ) from None

        return resolve_tools


DEFAULT_TOOLS = ToolRegistry()
"""What `@tool` and `register_toolkit` fill: what a worker serves when it is given no tools."""
modules_loading: list[str] = []
"""The modules being loaded by name (activities/toolkits.py): a toolkit registered while one
is loading is that module's."""


@dataclass(frozen=True)
class ToolCallContext:
    """What a running tool knows about its call, from `current_call()`."""

    tool_call_id: str
    idempotency_key: str
    """The same on every retry of this call and different for every other call: store it with
    the effect (a unique column, say) and a retried call changes nothing twice."""
    workflow_id: str
    """The run's workflow id: key a run's own data by it (a per-run copy of a toolkit's
    database, say), so that two runs never see each other's effects."""
    attempt: int
    """1 for the first attempt of this call, 2 for its first retry, and so on."""


_current_call: ContextVar[ToolCallContext | None] = ContextVar("current_call", default=None)


def current_call() -> ToolCallContext:
    """The call being run, inside a tool (sync tools too): `current_call().idempotency_key`.
    Raises RuntimeError outside one, as Temporal's `activity.info()` does outside an activity."""
    call = _current_call.get()
    if call is None:
        raise RuntimeError("current_call() is only known inside a tool, while a call runs it")
    return call


Function = TypeVar("Function", bound=Callable[..., Any])
"""A decorated function's own type, which `@tool` and `@callback_tool` hand back unchanged: the
function is registered, and its callers (an app's own tests, say) still see its signature."""


@overload
def tool(function: Function) -> Function: ...


@overload
def tool(
    function: None = None,
    *,
    name: str | None = None,
    side_effects: bool = False,
    timeout_seconds: float = 30.0,
    retry: RetrySettings | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    compensation: Callable[[CompensationInput], Any] | None = None,
    compensation_timeout_seconds: float = 30.0,
    compensation_retry: RetrySettings | None = None,
    needs_approval: bool | None = None,
    errors_to_model: tuple[type[Exception], ...] = DEFAULT_ERRORS_TO_MODEL,
    local: bool = False,
) -> Callable[[Function], Function]: ...


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    side_effects: bool = False,
    timeout_seconds: float = 30.0,
    retry: RetrySettings | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    compensation: Callable[[CompensationInput], Any] | None = None,
    compensation_timeout_seconds: float = 30.0,
    compensation_retry: RetrySettings | None = None,
    needs_approval: bool | None = None,
    errors_to_model: tuple[type[Exception], ...] = DEFAULT_ERRORS_TO_MODEL,
    local: bool = False,
) -> Callable[..., Any]:
    """Register a function as a tool: bare (`@tool`) or with options (`@tool(side_effects=True)`).

    `name` is the tool's name for the model and its activity type (default: the function's
    name); two tools cannot share one, so rename one of two toolkits' `search`, say.

    `side_effects` makes the call run alone, in the model's order; `timeout_seconds` bounds one
    attempt; `retry` is the tool's own retry policy; `max_result_chars` bounds what the model sees.

    `compensation` (side-effecting tools) is a function that undoes one call's effect: it gets a
    `CompensationInput` (the call's arguments, its return value and idempotency key) and runs as
    its own activity, named after the function, when a run ends without an answer. Keep it
    idempotent too. A side-effecting tool without one is reported as not undone.

    `needs_approval`: whether a call waits for a person unless the run's `ToolApprovalPolicy`
    approves it; by default side-effecting tools wait and read-only ones do not.

    `errors_to_model`: the exception types whose message fails the call at once, as the model's
    result (`ToolError` always does). `()` keeps every message from the model: a ValueError is
    then retried and reported by its type, as any unexpected exception is. In a side-effecting
    tool only `ToolError` means the call changed nothing: any other exception, these included,
    may have come after the effect, and the model is told to check before calling it again.

    `local`: run a read-only tool's calls as local activities, in the worker that runs the
    workflow, recorded as one marker each (docs/tools.md#local-tools): for fast calls, since a
    local activity does not heartbeat.
    """
    _check_options(compensation=compensation, side_effects=side_effects, local=local)

    def register(fn: Function) -> Function:
        DEFAULT_TOOLS.add(
            make_tool(
                fn,
                name=name,
                side_effects=side_effects,
                timeout_seconds=timeout_seconds,
                retry=retry,
                max_result_chars=max_result_chars,
                compensation=compensation,
                compensation_timeout_seconds=compensation_timeout_seconds,
                compensation_retry=compensation_retry,
                needs_approval=needs_approval,
                errors_to_model=errors_to_model,
                local=local,
            )
        )
        return fn

    return register(function) if function is not None else register


@overload
def callback_tool(function: Function) -> Function: ...


@overload
def callback_tool(
    function: None = None,
    *,
    timeout_seconds: float = 300.0,
    name: str | None = None,
    side_effects: bool = False,
    needs_approval: bool | None = None,
    compensation: Callable[[CompensationInput], Any] | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> Callable[[Function], Function]: ...


def callback_tool(
    function: Callable[..., Any] | None = None,
    *,
    timeout_seconds: float = 300.0,
    name: str | None = None,
    side_effects: bool = False,
    needs_approval: bool | None = None,
    compensation: Callable[[CompensationInput], Any] | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> Callable[..., Any]:
    """Declare a tool whose body runs on a client, not on a worker (docs/tools.md#callback-
    tools): a typed signature, a docstring, and a body that only raises.

        @callback_tool(timeout_seconds=120)
        def user_location() -> Location:
            '''Where the user's browser is.'''
            raise NotImplementedError("the user's browser answers it")

    The model is told it as any tool (its docstring's Args too). At a call the run waits,
    spending nothing, until a client answers it with `AgentRun.answer_callback(call_id,
    result)`, at most `timeout_seconds`; the return annotation is the result's schema, and an
    answer that does not match it is refused to its sender. Unanswered in time, the model is told
    it timed out. `side_effects`, `needs_approval`, `compensation` (run on a worker, with the
    answer as the call's result) and `max_result_chars` are `@tool`'s."""
    _check_options(compensation=compensation, side_effects=side_effects, local=False)

    def register(fn: Function) -> Function:
        DEFAULT_TOOLS.add(
            make_callback_tool(
                fn,
                name=name,
                timeout_seconds=timeout_seconds,
                side_effects=side_effects,
                needs_approval=needs_approval,
                compensation=compensation,
                max_result_chars=max_result_chars,
            )
        )
        return fn

    return register(function) if function is not None else register


def make_callback_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    timeout_seconds: float = 300.0,
    side_effects: bool = False,
    needs_approval: bool | None = None,
    compensation: Callable[[CompensationInput], Any] | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> RegisteredTool:
    """A function's signature as a callback tool, registered nowhere (`callback_tool`'s
    options), for a registry of one's own."""
    if timeout_seconds <= 0:
        raise ValueError("a callback tool's timeout_seconds must be over 0")
    made = make_tool(
        fn,
        name=name,
        side_effects=side_effects,
        timeout_seconds=timeout_seconds,
        max_result_chars=max_result_chars,
        compensation=compensation,
        needs_approval=needs_approval,
    )
    spec = made.spec.model_copy(update={"callback": True, "result": _result_schema(fn)})
    tool_catalog.register(spec)
    return dataclasses.replace(made, spec=spec, activity=None)


def _result_schema(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The JSON Schema of `fn`'s return annotation; None when it has none (or says Any)."""
    returns = get_type_hints(fn).get("return", Any)
    if returns is Any:
        return None
    return _without_titles(TypeAdapter(returns).json_schema())


def _check_options(*, compensation: Any, side_effects: bool, local: bool) -> None:
    if compensation is not None and not side_effects:
        raise ValueError("only a tool with side_effects=True has an effect to compensate")
    if local and side_effects:
        raise ValueError(
            "local=True is for read-only tools: a call that changes data runs as an activity, "
            "which the run can wait for on a cancel"
        )


def make_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    side_effects: bool = False,
    timeout_seconds: float = 30.0,
    retry: RetrySettings | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    compensation: Callable[[CompensationInput], Any] | None = None,
    compensation_timeout_seconds: float = 30.0,
    compensation_retry: RetrySettings | None = None,
    needs_approval: bool | None = None,
    errors_to_model: tuple[type[Exception], ...] = DEFAULT_ERRORS_TO_MODEL,
    local: bool = False,
) -> RegisteredTool:
    """A function as a tool, registered nowhere: `@tool`'s options (which it documents), for a
    registry of one's own (`ToolRegistry.add`)."""
    _check_options(compensation=compensation, side_effects=side_effects, local=local)
    tool_name = name or fn.__name__
    if tool_name in RESERVED_TOOL_NAMES:
        raise ValueError(f"{tool_name!r} is a built-in tool name")
    if not TOOL_NAME.fullmatch(tool_name):
        raise ValueError(
            f"tool name {tool_name!r}: the providers take 1 to 64 letters, digits, _ and -"
        )
    arguments_model = _arguments_model(tool_name, fn)
    description, parameter_descriptions = describe(fn.__doc__)
    spec = ToolSpec(
        name=tool_name,
        description=description or tool_name,
        parameters=_described(
            _without_titles(arguments_model.model_json_schema()), parameter_descriptions
        ),
        side_effects=side_effects,
        timeout_seconds=timeout_seconds,
        retry=retry or RetrySettings(),
        max_result_chars=max_result_chars,
        compensation=compensation.__name__ if compensation is not None else None,
        compensation_timeout_seconds=compensation_timeout_seconds,
        compensation_retry=compensation_retry or RetrySettings(maximum_attempts=5),
        needs_approval=needs_approval,
        local=local,
    )
    # The catalog the workflow reads a recorded spec's description from, for runs that recorded
    # none (before 0.3.0: workflows/tool_catalog.py).
    tool_catalog.register(spec)
    return RegisteredTool(
        spec=spec,
        function=fn,
        arguments_model=arguments_model,
        activity=_tool_activity(
            tool_name,
            fn,
            arguments_model,
            keep_value=bool(compensation),
            errors_to_model=tuple(errors_to_model),
            side_effects=side_effects,
        ),
        compensation_activity=_compensation_activity(compensation) if compensation else None,
        compensation_function=compensation,
        errors_to_model=tuple(errors_to_model),
        origin=modules_loading[-1] if modules_loading else getattr(fn, "__module__", "") or "",
    )


def registered_tools() -> dict[str, RegisteredTool]:
    """The default registry's tools (`DEFAULT_TOOLS`)."""
    return DEFAULT_TOOLS.tools()


def tool_specs(names: list[str] | None = None) -> list[ToolSpec]:
    """Specs of the default registry's named tools (all when None), in a stable order. Raises
    KeyError naming the tools that are not registered."""
    return DEFAULT_TOOLS.specs(names)


def tool_activities() -> list[Callable[..., Any]]:
    """The default registry's activities (`ToolRegistry.activities`)."""
    return DEFAULT_TOOLS.activities()


resolve_tools = DEFAULT_TOOLS.resolver()
"""The default registry's `resolve_tools` activity."""


def truncate_middle(text: str, limit: int, read_more: str = "") -> tuple[str, int]:
    """Bound a text, keeping both ends: the start has the structure, the end the newest rows.

    Returns the bounded text and how many characters were omitted from its middle; `read_more`
    goes into the marker (how to get the rest).
    """
    if len(text) <= limit:
        return text, 0
    # The marker's own length depends on the count it shows; size it for the largest count.
    room = len(f"\n\n... [{len(text)} characters omitted{read_more}] ...\n\n")
    keep = max(limit - room, 0)
    head, tail = keep - keep // 2, keep // 2
    omitted = len(text) - head - tail
    marker = f"\n\n... [{omitted} characters omitted{read_more}] ...\n\n"
    return text[:head] + marker + (text[len(text) - tail :] if tail else ""), omitted


def externalised_note(total: int, ref: str, this_worker_only: bool) -> str:
    """What the omission marker of an externalised result adds: the size, and how to read the
    rest. A worker's own store cannot serve a run that moved to another worker: the note says
    what to do then, so that the model is not promised what it may not get."""
    if not this_worker_only:
        return (
            f" of {total}; the whole result is stored: "
            f'{READ_RESULT}(ref="{ref}", offset, length) reads any part'
        )
    return (
        f" of {total}; stored on this worker: "
        f'{READ_RESULT}(ref="{ref}", offset, length) reads any part; if not found, call the tool '
        "again"
    )


def _jsonable(value: Any) -> Any:
    """json.dumps' fallback for what JSON has no type for: pydantic models, dataclasses,
    datetimes, UUIDs, sets and so on, anywhere in the value, as pydantic serialises them; str()
    for anything else."""
    return to_jsonable_python(value, fallback=str)


def _json_data(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return json.loads(json.dumps(value, default=_jsonable))


MAX_KEPT_VALUE_CHARS = MAX_KEPT_RESULT_CHARS
"""A compensable tool's return value is kept for its compensation up to this size (as JSON).
Larger, it would grow the run's compensation log (workflows/effect_log.py) and, in a big
enough value, push the activity's result past Temporal's 2 MB payload limit, failing every
attempt after the effect was applied; the compensation then gets result=None (and
result_kept=False) and finds the effect by its idempotency key."""


def _kept_value(value: Any, tool_name: str) -> Any:
    data = _json_data(value)
    size = len(json.dumps(data))
    if size <= MAX_KEPT_VALUE_CHARS:
        return data
    logger.warning(
        "tool %s returned %d characters: too large to keep for its compensation", tool_name, size
    )
    return None


def render_result(value: Any) -> str:
    """What the model reads of a tool's return value: a str as it is, anything else as JSON
    (a pydantic model, a dataclass, a list of them, a dict, a number)."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, ensure_ascii=False, default=_jsonable)


MAX_PROBLEMS_SHOWN = 10
"""Validation problems quoted back to the model; the rest are counted."""


def describe_validation_error(tool_name: str, error: ValidationError) -> str:
    """What is wrong with the arguments, bounded however large or numerous they are."""
    problems = []
    items = error.errors(include_url=False)
    for item in items[:MAX_PROBLEMS_SHOWN]:
        field = bounded(".".join(str(part) for part in item["loc"])) or "(arguments)"
        got = "" if item["type"] == "missing" else f" (got {bounded(_json_text(item['input']))})"
        problems.append(f"{field}: {item['msg']}{got}")
    if len(items) > MAX_PROBLEMS_SHOWN:
        problems.append(f"and {len(items) - MAX_PROBLEMS_SHOWN} more problems")
    return (
        f"Error: invalid arguments for {tool_name}: "
        + "; ".join(problems)
        + ". The tool did not run; fix the arguments and call it again."
    )


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"


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


_PARAMETER_KINDS = frozenset({"param", "parameter", "arg", "argument", "key", "keyword"})
_GOOGLE_SECTION = re.compile(
    r"(?P<indent>[ \t]*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|"
    r"Other Parameters):[ \t]*"
)
_NUMPY_SECTION = re.compile(r"[ \t]*(Parameters|Other Parameters|Keyword Arguments)[ \t]*")
_NUMPY_RULE = re.compile(r"[ \t]*-{3,}[ \t]*")
_REST_FIELD = re.compile(r"(?P<indent>[ \t]*):(param|parameter|arg|argument|key|keyword|type)\b")


def describe(docstring: str | None) -> tuple[str, dict[str, str]]:
    """A tool's description and its parameters' descriptions, from its docstring: the
    parameters section (Google `Args:`, NumPy `Parameters`, reST `:param x:`) goes into the
    schema, one description per parameter, and the description is the rest of the docstring
    (what it says it returns and raises included: say what comes back)."""
    text = inspect.cleandoc(docstring or "").strip()
    if not text:
        return "", {}
    try:
        parsed = docstring_parser.parse(text)
    except docstring_parser.ParseError:
        return text, {}
    parameters = {
        p.arg_name: " ".join(p.description.split())
        for p in parsed.params
        if p.args and p.args[0] in _PARAMETER_KINDS and p.description
    }
    if not parameters:
        return text, {}
    return _without_parameter_section(text), parameters


def _without_parameter_section(text: str) -> str:
    lines = text.splitlines()
    kept: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        google = _GOOGLE_SECTION.fullmatch(line)
        numpy = (
            _NUMPY_SECTION.fullmatch(line)
            and index + 1 < len(lines)
            and _NUMPY_RULE.fullmatch(lines[index + 1])
        )
        rest = _REST_FIELD.match(line)
        if google or rest:
            # The section (or field) runs while the lines are blank or indented deeper.
            indent = len((google or rest).group("indent"))  # type: ignore[union-attr]
            index += 1
            while index < len(lines) and (
                not lines[index].strip() or _indent(lines[index]) > indent
            ):
                index += 1
            continue
        if numpy:
            # Up to the next section: a line followed by a rule of dashes.
            index += 2
            while index < len(lines) and not (
                index + 1 < len(lines) and _NUMPY_RULE.fullmatch(lines[index + 1])
            ):
                index += 1
            continue
        kept.append(line)
        index += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _described(schema: dict[str, Any], descriptions: dict[str, str]) -> dict[str, Any]:
    """The docstring's description of each parameter, where the signature gave none (a
    `Field(description=...)` wins)."""
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, description in descriptions.items():
            prop = properties.get(name)
            if isinstance(prop, dict) and "description" not in prop:
                prop["description"] = description
    return schema


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


def _compensation_activity(fn: Callable[[CompensationInput], Any]) -> Callable[..., Any]:
    @activity.defn(name=fn.__name__)
    async def compensate(call: CompensationInput) -> str:
        async with heartbeating():
            value = await call_app_function(fn, call)
        return render_result(value)

    return compensate


def tool_error_text(tool_name: str, error: Exception, *, effect_unknown: bool = False) -> str:
    """What the model reads of a call that failed with a message for it, bounded.
    `effect_unknown`: a side-effecting call that may have applied its effect before it failed
    (a `ToolError` never did)."""
    message = bounded(str(error).strip(), MAX_ERROR_MESSAGE_CHARS)
    if isinstance(error, ToolError):
        return f"Error: {tool_name} failed: {message or 'ToolError'}"
    # Bad arguments, which the model is good at fixing; unless the call may have
    # taken effect, when trying again could apply it twice.
    advice = MAY_HAVE_TAKEN_EFFECT if effect_unknown else "Check the arguments and try again."
    return (
        f"Error: {tool_name} failed: {type(error).__name__}"
        + (f": {message.rstrip('.')}" if message else "")
        + f". {advice}"
    )


def _tool_activity(
    tool_name: str,
    fn: Callable[..., Any],
    arguments_model: type[BaseModel],
    keep_value: bool,
    errors_to_model: tuple[type[Exception], ...],
    side_effects: bool,
) -> Callable[[ToolActivityInput], Any]:
    @activity.defn(name=tool_name)
    async def run_tool(call: ToolActivityInput) -> ToolActivityResult:
        with telemetry.tool_span(tool_name, call) as span:
            result = await execute(call, span)
            span.record(result)
            return result

    for_the_model: tuple[type[Exception], ...] = (ToolError, *errors_to_model)

    async def execute(call: ToolActivityInput, span: telemetry.ToolSpan) -> ToolActivityResult:
        await progress.report_retry(call.step, tool_name, call_id=call.tool_call_id, tool=tool_name)
        try:
            arguments = arguments_model.model_validate(call.arguments)
        except ValidationError as error:
            # The model can fix this: it becomes the call's result, and nothing is retried.
            content = describe_validation_error(tool_name, error)
            span.fail("invalid_arguments", content)
            return ToolActivityResult(
                content=content, is_error=True, attempt=activity.info().attempt
            )
        kwargs = {field: getattr(arguments, field) for field in arguments_model.model_fields}
        info = activity.info()
        token = _current_call.set(
            ToolCallContext(
                tool_call_id=call.tool_call_id,
                idempotency_key=call.idempotency_key,
                workflow_id=info.workflow_id or "",
                attempt=info.attempt,
            )
        )
        try:
            async with heartbeating():
                value = await call_app_function(fn, **kwargs)
        except AgentError:
            raise
        except for_the_model as error:
            # The model can act on the message: it becomes the call's result at once (a retry
            # would fail the same way). The log says what happened, without the message.
            # A side-effecting tool's body had started: only a ToolError promises that nothing
            # changed, and anything else (a charge whose reply did not parse) may have come
            # after the effect. The run logs it as outcome unknown, to be undone by its key.
            # Still one attempt: a retry would repeat the effect unless the tool finds it by
            # its key, and a tool that does would most likely answer, and fail, the same way.
            unknown = side_effects and not isinstance(error, ToolError)
            activity.logger.info(
                "step %d: tool %s failed with a message for the model (%s, call %s, attempt %d)%s",
                call.step,
                tool_name,
                type(error).__name__,
                call.tool_call_id,
                info.attempt,
                ", outcome unknown" if unknown else "",
            )
            text = tool_error_text(tool_name, error, effect_unknown=unknown)
            content, _ = truncate_middle(text, call.max_result_chars)
            span.fail(type(error).__name__, content)
            return ToolActivityResult(
                content=content, is_error=True, attempt=info.attempt, outcome_unknown=unknown
            )
        except Exception:
            # The traceback is for the operator; the model only learns the exception's type.
            activity.logger.exception(
                "step %d: tool %s failed (call %s, attempt %d)",
                call.step,
                tool_name,
                call.tool_call_id,
                info.attempt,
            )
            raise
        finally:
            _current_call.reset(token)
        bounded = bounded_result(call, render_result(value), attempt=info.attempt)
        if keep_value:
            bounded.value = _kept_value(value, tool_name)
            bounded.value_kept = bounded.value is not None or value is None
        return bounded

    return run_tool


def bounded_result(
    call: ToolActivityInput, rendered: str, *, attempt: int, is_error: bool = False
) -> ToolActivityResult:
    """A tool's rendered result as the model reads it: cut to the call's bound, the whole kept
    in the result store when the run externalises, and the content named in the message store
    for the next model call. The same for every kind of tool (MCP tools too)."""
    read_more, ref = "", None
    if call.externalise and len(rendered) > call.max_result_chars:
        store = result_store()
        ref = store.put(rendered)
        read_more = externalised_note(len(rendered), ref, worker_local(store))
    content, omitted = truncate_middle(rendered, call.max_result_chars, read_more)
    stored = None
    if call.store_content and len(content) >= CONTENT_MIN_CHARS:
        stored = content_ref(content)
        message_store().put_blob(stored, content)
    return ToolActivityResult(
        content=content,
        is_error=is_error,
        omitted_chars=omitted,
        externalised_ref=ref,
        content_ref=stored,
        attempt=attempt,
    )
