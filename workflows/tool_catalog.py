"""The tools a worker serves, as data: the specs the workflow offers and dispatches on.

`activities.tools.tool` registers each tool's `ToolSpec` here when the tool is defined, so the
workflow reads specs without importing any activity code. The catalog itself is kept in
registry.py, which the sandbox passes through, so the catalog the worker fills is the one a run
reads; this module, like the rest of the loop, is imported afresh for each run. Deterministic:
data, no I/O.
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


def schedules(run_tools: RunTools) -> RunTools:
    """The specs without what only the model reads (description, parameters): what decides
    the run's commands (side effects, approval, timeouts, retries, compensation), which a run
    records when it starts."""

    def bare(spec: ToolSpec) -> ToolSpec:
        return spec.model_copy(update={"description": "", "parameters": {}})

    read_result = run_tools.read_result
    return run_tools.model_copy(
        update={
            "tools": [bare(s) for s in run_tools.tools],
            "read_result": bare(read_result) if read_result else None,
        }
    )


def described(run_tools: RunTools) -> RunTools:
    """Recorded specs with the descriptions and parameters this worker has for them: they shape
    only what the model is told, never the run's commands, so they may come from the registry
    (and improve with a redeploy)."""

    def full(spec: ToolSpec) -> ToolSpec:
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
