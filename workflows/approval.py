"""Which tool calls wait for a person: the run's approval policy, applied in the workflow.

Approval predicates are plain functions of a call's tool name and arguments, registered by name
with `@approval_predicate` and named in a run's `ToolApprovalPolicy.predicates`. They run inside
the workflow, so they must be deterministic: no clock, no I/O, only the arguments. They are
kept in registry.py, which the sandbox passes through, so the registry the worker fills is the
one a run reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from temporalio import workflow

from .inputs import ToolApprovalPolicy
from .specs import ToolSpec

with workflow.unsafe.imports_passed_through():
    from .registry import approval_predicates as _predicates

ApprovalPredicate = Callable[[str, dict[str, Any]], bool]
"""(tool name, arguments) -> True to run the call without asking."""
Predicate = TypeVar("Predicate", bound=ApprovalPredicate)
"""A predicate's own type, handed back by `@approval_predicate` unchanged."""


@overload
def approval_predicate(function: Predicate) -> Predicate: ...


@overload
def approval_predicate(
    function: None = None, *, name: str | None = None
) -> Callable[[Predicate], Predicate]: ...


def approval_predicate(
    function: ApprovalPredicate | None = None, *, name: str | None = None
) -> Callable[..., Any]:
    """Register a predicate that approves calls without asking: `@approval_predicate` or
    `@approval_predicate(name="small_refunds")`. Name it in a run's policy to use it."""

    def register(fn: Predicate) -> Predicate:
        key = name or fn.__name__
        if key in _predicates and _predicates[key] is not fn:
            raise ValueError(f"an approval predicate named {key!r} is already registered")
        _predicates[key] = fn
        return fn

    return register(function) if function is not None else register


def unknown_predicates(policy: ToolApprovalPolicy) -> list[str]:
    return [name for name in policy.predicates if name not in _predicates]


def needs_approval(spec: ToolSpec, *, plan_approved: bool) -> bool:
    """Whether the tool asks at all. By default side-effecting tools do; in plan mode the
    approved plan was that question, unless the tool insists (`needs_approval=True`)."""
    if spec.needs_approval is not None:
        return spec.needs_approval
    return spec.side_effects and not plan_approved


def approved_by_policy(policy: ToolApprovalPolicy, tool: str, arguments: dict[str, Any]) -> bool:
    """True when the run's policy lets this call run without asking a person."""
    if policy.approve_all or tool in policy.allow:
        return True
    # A predicate that raises approves nothing: the call falls back to asking a person.
    for name in policy.predicates:
        try:
            if _predicates[name](tool, arguments):
                return True
        except Exception:
            continue
    return False
