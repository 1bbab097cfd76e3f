"""The public names of durable_agent, each from its one home (see __init__.py)."""

from .activities.toolkits import Toolkit as Toolkit, register_toolkit as register_toolkit
from .activities.tools import (
    ToolError as ToolError,
    callback_tool as callback_tool,
    current_call as current_call,
    tool as tool,
)
from .client.agent_client import (
    AgentClient as AgentClient,
    AgentRun as AgentRun,
    AgentRunFailed as AgentRunFailed,
    AgentUpdateNotDelivered as AgentUpdateNotDelivered,
)
from .serving.plugin import AgentPlugin as AgentPlugin
from .workflows.agent import AgentWorkflow as AgentWorkflow
from .workflows.decisions import (
    ApprovalCriteria as ApprovalCriteria,
    AutoModeChange as AutoModeChange,
    AutoRules as AutoRules,
)
from .workflows.errors import (
    AgentApprovalTimeout as AgentApprovalTimeout,
    AgentBudgetExceeded as AgentBudgetExceeded,
    AgentConfigurationError as AgentConfigurationError,
    AgentError as AgentError,
    AgentFatalToolError as AgentFatalToolError,
    AgentInputInvalid as AgentInputInvalid,
    AgentInputTooLarge as AgentInputTooLarge,
    AgentProviderError as AgentProviderError,
    AgentStepLimitExceeded as AgentStepLimitExceeded,
)
from .workflows.inputs import (
    AgentInput as AgentInput,
    AgentResult as AgentResult,
    AutoMode as AutoMode,
    CallbackTool as CallbackTool,
    Limits as Limits,
    ModelSettings as ModelSettings,
    ScriptedCall as ScriptedCall,
    ScriptedTurn as ScriptedTurn,
    ToolApprovalPolicy as ToolApprovalPolicy,
)
