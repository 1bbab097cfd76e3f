"""A durable LLM agent loop on Temporal: every model call and every tool call an activity.

The names an application needs, from one import:

    from durable_agent import AgentClient, AgentInput, AgentPlugin, tool

- `AgentPlugin`: the agent in the app's own Temporal client and worker (`plugins=[...]`).
- `AgentClient`, `AgentRun`, `AgentRunFailed`, `AgentUpdateNotDelivered`: start, steer and read
  runs (docs/client.md).
- `tool`, `ToolError`, `current_call`, `register_toolkit`, `Toolkit`: the app's tools
  (docs/tools.md).
- `AgentInput`, `AgentResult`, `Limits`, `ModelSettings`, `ToolApprovalPolicy`, ...: the run's
  data; `AgentWorkflow`, for a workflow that starts runs as children; the `Agent...` errors.

The rooms keep the product's layout: `durable_agent.workflows` (deterministic),
`durable_agent.activities` (all I/O), `durable_agent.cli` (the `durable-agent` command).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_agent.activities.toolkits import Toolkit, register_toolkit
    from durable_agent.activities.tools import ToolError, current_call, tool
    from durable_agent.agent_client import (
        AgentClient,
        AgentRun,
        AgentRunFailed,
        AgentUpdateNotDelivered,
    )
    from durable_agent.plugin import AgentPlugin
    from durable_agent.workflows.agent import AgentWorkflow
    from durable_agent.workflows.errors import (
        AgentApprovalTimeout,
        AgentBudgetExceeded,
        AgentConfigurationError,
        AgentError,
        AgentFatalToolError,
        AgentInputTooLarge,
        AgentProviderError,
        AgentStepLimitExceeded,
    )
    from durable_agent.workflows.models import (
        AgentInput,
        AgentResult,
        Limits,
        ModelSettings,
        ScriptedCall,
        ScriptedTurn,
        ToolApprovalPolicy,
    )

_HOMES = {
    "AgentPlugin": "durable_agent.plugin",
    **dict.fromkeys(
        ["AgentClient", "AgentRun", "AgentRunFailed", "AgentUpdateNotDelivered"],
        "durable_agent.agent_client",
    ),
    **dict.fromkeys(["Toolkit", "register_toolkit"], "durable_agent.activities.toolkits"),
    **dict.fromkeys(["ToolError", "current_call", "tool"], "durable_agent.activities.tools"),
    "AgentWorkflow": "durable_agent.workflows.agent",
    **dict.fromkeys(
        [
            "AgentApprovalTimeout",
            "AgentBudgetExceeded",
            "AgentConfigurationError",
            "AgentError",
            "AgentFatalToolError",
            "AgentInputTooLarge",
            "AgentProviderError",
            "AgentStepLimitExceeded",
        ],
        "durable_agent.workflows.errors",
    ),
    **dict.fromkeys(
        [
            "AgentInput",
            "AgentResult",
            "Limits",
            "ModelSettings",
            "ScriptedCall",
            "ScriptedTurn",
            "ToolApprovalPolicy",
        ],
        "durable_agent.workflows.models",
    ),
}


def __getattr__(name: str) -> Any:
    # Lazy on purpose: the workflow sandbox imports this package afresh for every run (it is the
    # parent of the modules it passes through), and the client must not load the worker's side.
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'durable_agent' has no attribute {name!r}")


__all__ = [
    "AgentApprovalTimeout",
    "AgentBudgetExceeded",
    "AgentClient",
    "AgentConfigurationError",
    "AgentError",
    "AgentFatalToolError",
    "AgentInput",
    "AgentInputTooLarge",
    "AgentPlugin",
    "AgentProviderError",
    "AgentResult",
    "AgentRun",
    "AgentRunFailed",
    "AgentStepLimitExceeded",
    "AgentUpdateNotDelivered",
    "AgentWorkflow",
    "Limits",
    "ModelSettings",
    "ScriptedCall",
    "ScriptedTurn",
    "ToolApprovalPolicy",
    "ToolError",
    "Toolkit",
    "current_call",
    "register_toolkit",
    "tool",
]
