"""The tools' specs as the workflow reads them beside what a run recorded.

A run gets its specs from its worker's `resolve_tools` activity (the worker's own registry:
activities/tools.py) and records them. This catalog, which every made tool's spec is copied
into (registry.py keeps it, passed through the sandbox), serves only runs that recorded less:
those recorded before 0.3.0, which recorded no descriptions, and the oldest, which recorded no
specs at all. Deterministic: data, no I/O.
"""

from __future__ import annotations

from temporalio import workflow

from .builtin_tools import READ_RESULT
from .specs import ToolSpec
from .state import RunTools

with workflow.unsafe.imports_passed_through():
    from .registry import tool_specs as _registered

RESOLVE_TOOLS = "resolve_tools"
"""The activity (activities/tools.py) that reads a run's specs from the worker when it starts;
its result is recorded in the history, and replay reads that instead of this catalog."""


def register(spec: ToolSpec) -> None:
    _registered[spec.name] = spec.model_dump()


def _spec(name: str) -> ToolSpec:
    # Validated into this copy's class: under the SDK's sandbox each run has its own.
    return ToolSpec.model_validate(_registered[name])


def specs(names: list[str] | None = None) -> list[ToolSpec]:
    """Specs of the named tools (every registered tool when None, by name), in a stable order.

    Raises KeyError naming the tools that are not registered.
    """
    if names is None:
        return [_spec(n) for n in sorted(_registered)]
    unknown = [n for n in names if n not in _registered]
    if unknown:
        raise KeyError(f"not registered on this worker: {', '.join(unknown)}")
    return [_spec(n) for n in names]


def get(name: str) -> ToolSpec | None:
    return _spec(name) if name in _registered else None


def described(run_tools: RunTools) -> RunTools:
    """Recorded specs with descriptions: a run recorded since 0.3.0 recorded them whole, from
    its worker's own registry; an older run recorded only what decides its commands, and gets
    the descriptions and parameters this worker has (they shape only what the model is told)."""

    def full(spec: ToolSpec) -> ToolSpec:
        if spec.description or spec.parameters:
            return spec  # recorded whole, by its worker's registry (0.3.0 and later)
        known = _registered.get(spec.name)
        if known is None:
            return spec
        return spec.model_copy(
            update={"description": known["description"], "parameters": known["parameters"]}
        )

    read_result = run_tools.read_result
    return run_tools.model_copy(
        update={
            "tools": [full(s) for s in run_tools.tools],
            "read_result": full(read_result) if read_result else None,
        }
    )


def for_run(names: list[str] | None) -> RunTools:
    """The run's tools, and read_result when the run did not ask for it (it is then offered
    only once a result was externalised). Raises KeyError as `specs` does."""
    tools = specs(names)
    if names is not None and READ_RESULT in names:
        return RunTools(tools=tools)
    return RunTools(tools=[s for s in tools if s.name != READ_RESULT], read_result=get(READ_RESULT))
