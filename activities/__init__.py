"""The side that does I/O: model providers and tools, each called as a Temporal activity.

Nothing is imported until it is asked for: `import activities.telemetry` (the client's tracing)
must not load the provider SDKs, which only `activities.model_call` needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_agent.activities.model_call import call_model
    from durable_agent.activities.toolkits import Toolkit, register_toolkit
    from durable_agent.activities.tools import (
        ToolError,
        current_call,
        registered_tools,
        tool,
        tool_activities,
        tool_specs,
    )

_HOMES = {
    "call_model": "durable_agent.activities.model_call",
    "Toolkit": "durable_agent.activities.toolkits",
    "register_toolkit": "durable_agent.activities.toolkits",
    "ToolError": "durable_agent.activities.tools",
    "current_call": "durable_agent.activities.tools",
    "registered_tools": "durable_agent.activities.tools",
    "tool": "durable_agent.activities.tools",
    "tool_activities": "durable_agent.activities.tools",
    "tool_specs": "durable_agent.activities.tools",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'durable_agent.activities' has no attribute {name!r}")


__all__ = [
    "ToolError",
    "Toolkit",
    "call_model",
    "current_call",
    "register_toolkit",
    "registered_tools",
    "tool",
    "tool_activities",
    "tool_specs",
]
