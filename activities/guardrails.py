"""Guardrails the app writes (docs/guardrails.md): `@guardrail` registers a function that reads
a text and its context and answers `GuardrailVerdict(tripped, reason)`. Each runs as the
activity `guardrail:NAME`, under the retry policy the run sets, so its verdict is in the history
before anything it guards goes ahead, and a crash cannot skip it.

A run names the guardrails it uses (`GuardrailPolicy`); a worker serves every guardrail its
process registered (importing the app's module registers them, as `worker --tools MODULE`
does)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, overload

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..workflows.guardrail_data import (
    GUARDRAIL_ACTIVITY_PREFIX,
    NAME_PATTERN,
    GuardrailCheck,
    GuardrailKind,
    GuardrailVerdict,
)
from ._calling import call_app_function
from ._heartbeat import heartbeating

GUARDRAIL_ERROR = "GuardrailError"
"""A guardrail that answered something other than a verdict: not retried, it has tripped."""


@dataclass(frozen=True)
class GuardrailContext:
    """What a guardrail is told besides the text it guards."""

    kind: GuardrailKind
    """input (the prompt, a conversation's message), output (the final answer) or tool_result."""
    workflow_id: str
    step: int
    """The step the text belongs to (0: before the first model call)."""
    tool: str | None = None
    """tool_result: the tool whose result it is."""
    attempt: int = 1


GuardrailFunction = Callable[
    [str, GuardrailContext], GuardrailVerdict | Awaitable[GuardrailVerdict]
]
Guard = TypeVar("Guard", bound=GuardrailFunction)


class GuardrailRegistry:
    """Guardrails by name, and their activities, for a worker to serve."""

    def __init__(self) -> None:
        self._functions: dict[str, GuardrailFunction] = {}
        self._activities: dict[str, Callable[..., Awaitable[GuardrailVerdict]]] = {}

    def add(self, name: str, function: GuardrailFunction) -> None:
        if not NAME_PATTERN.match(name):
            raise ValueError(
                f"guardrail name {name!r}: 1 to 64 letters, digits, '_', '.' or '-' (it names "
                "an activity, and runs name it in their input)"
            )
        if name in self._functions and self._functions[name] != function:
            raise ValueError(f"a guardrail named {name!r} is already registered")
        self._functions[name] = function
        self._activities[name] = _guardrail_activity(name, function)

    def names(self) -> list[str]:
        return sorted(self._functions)

    def activities(self) -> list[Callable[..., Awaitable[GuardrailVerdict]]]:
        return list(self._activities.values())


DEFAULT_GUARDRAILS = GuardrailRegistry()
"""What `@guardrail` fills, and every agent worker serves."""


@overload
def guardrail(function: Guard) -> Guard: ...


@overload
def guardrail(function: None = None, *, name: str | None = None) -> Callable[[Guard], Guard]: ...


def guardrail(
    function: GuardrailFunction | None = None, *, name: str | None = None
) -> GuardrailFunction | Callable[[Guard], Guard]:
    """Register `function(text, context) -> GuardrailVerdict` (sync or async) as a guardrail
    named `name` (default: the function's name): bare (`@guardrail`) or `@guardrail(name=...)`.

    Return `GuardrailVerdict(tripped=True, reason=...)` to stop what it guards; the reason is
    what the model, the trace and a person read. An exception is retried (3 attempts in all);
    one that lasts, a timeout, or an answer that is not a verdict counts as tripped: a run never
    goes on unguarded because its guard broke."""

    def register(fn: Guard) -> Guard:
        DEFAULT_GUARDRAILS.add(name or fn.__name__, fn)
        return fn

    return register(function) if function is not None else register


def _guardrail_activity(
    name: str, function: GuardrailFunction
) -> Callable[[GuardrailCheck], Awaitable[GuardrailVerdict]]:
    @activity.defn(name=GUARDRAIL_ACTIVITY_PREFIX + name)
    async def check(check: GuardrailCheck) -> GuardrailVerdict:
        context = GuardrailContext(
            kind=check.kind,
            workflow_id=check.workflow_id,
            step=check.step,
            tool=check.tool,
            attempt=activity.info().attempt,
        )
        async with heartbeating():
            verdict = await call_app_function(function, check.text, context)
        if not isinstance(verdict, GuardrailVerdict):
            raise ApplicationError(
                f"guardrail {name} answered {type(verdict).__name__}, not a GuardrailVerdict",
                type=GUARDRAIL_ERROR,
                non_retryable=True,
            )
        return verdict

    return check
