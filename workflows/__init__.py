"""The deterministic side: the workflow, its rooms, and the data the loop passes around.

The workflow itself is `workflows.agent.AgentWorkflow` (imported from there, so that the
activities can import this package's data without importing the workflow). Each other module is
one concern (docs/architecture.md); a module's docstring states its rule."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_agent.workflows.errors import (
        AgentApprovalTimeout,
        AgentBudgetExceeded,
        AgentConfigurationError,
        AgentError,
        AgentFatalToolError,
        AgentProviderError,
        AgentStepLimitExceeded,
    )
    from durable_agent.workflows.models import (
        AgentInput,
        AgentResult,
        Limits,
        ModelSettings,
        RetrySettings,
        ScriptedCall,
        ScriptedTurn,
        ToolSpec,
        Usage,
    )
    from durable_agent.workflows.transcript import (
        AssistantMessage,
        Message,
        ToolCall,
        ToolResult,
        Transcript,
        TranscriptError,
        UserMessage,
    )

_HOMES = {
    **dict.fromkeys(
        [
            "AgentApprovalTimeout",
            "AgentBudgetExceeded",
            "AgentConfigurationError",
            "AgentError",
            "AgentFatalToolError",
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
            "RetrySettings",
            "ScriptedCall",
            "ScriptedTurn",
            "ToolSpec",
            "Usage",
        ],
        "durable_agent.workflows.models",
    ),
    **dict.fromkeys(
        [
            "AssistantMessage",
            "Message",
            "ToolCall",
            "ToolResult",
            "Transcript",
            "TranscriptError",
            "UserMessage",
        ],
        "durable_agent.workflows.transcript",
    ),
}


def __getattr__(name: str) -> Any:
    # Lazy on purpose: the SDK's sandbox imports this package afresh for every run, and should
    # import only the modules the run uses.
    if name in _HOMES:
        home = importlib.import_module(_HOMES[name])  # deterministic: only this package's modules
        return getattr(home, name)
    raise AttributeError(f"module 'durable_agent.workflows' has no attribute {name!r}")


__all__ = [
    "AgentApprovalTimeout",
    "AgentBudgetExceeded",
    "AgentConfigurationError",
    "AgentError",
    "AgentFatalToolError",
    "AgentInput",
    "AgentProviderError",
    "AgentResult",
    "AgentStepLimitExceeded",
    "AssistantMessage",
    "Limits",
    "Message",
    "ModelSettings",
    "RetrySettings",
    "ScriptedCall",
    "ScriptedTurn",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Transcript",
    "TranscriptError",
    "Usage",
    "UserMessage",
]
