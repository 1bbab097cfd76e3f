"""The tools a worker serves, as data: the specs the workflow offers and dispatches on.

`activities.tools.tool` registers each tool's `ToolSpec` here when the tool is defined, so the
workflow reads specs without importing any activity code. The workflow imports this module
passed through the sandbox (by its full name), so the catalog the worker fills is the one it
reads. Deterministic: a dict of data, no I/O.
"""

from __future__ import annotations

from workflows.builtin_tools import READ_RESULT
from workflows.models import ToolSpec

_specs: dict[str, ToolSpec] = {}


def register(spec: ToolSpec) -> None:
    _specs[spec.name] = spec


def specs(names: list[str] | None = None) -> list[ToolSpec]:
    """Specs of the named tools (every registered tool when None, by name), in a stable order.

    Raises KeyError naming the tools that are not registered.
    """
    if names is None:
        return [_specs[n] for n in sorted(_specs)]
    unknown = [n for n in names if n not in _specs]
    if unknown:
        raise KeyError(f"not registered on this worker: {', '.join(unknown)}")
    return [_specs[n] for n in names]


def get(name: str) -> ToolSpec | None:
    return _specs.get(name)


def for_run(names: list[str] | None) -> tuple[dict[str, ToolSpec], ToolSpec | None]:
    """The run's tools by name, and read_result when the run did not ask for it (it is then
    offered only once a result was externalised). Raises KeyError as `specs` does."""
    tools = {spec.name: spec for spec in specs(names)}
    if names is not None and READ_RESULT in names:
        return tools, None
    tools.pop(READ_RESULT, None)
    return tools, get(READ_RESULT)
