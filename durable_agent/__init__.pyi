"""The public names of durable_agent, each from its one home (see __init__.py)."""

from .activities.admission import Admission as Admission, ProviderLimits as ProviderLimits
from .activities.guardrails import GuardrailContext as GuardrailContext, guardrail as guardrail
from .activities.mcp_config import McpConfig as McpConfig
from .activities.message_store import (
    MessageStore as MessageStore,
    SqliteMessageStore as SqliteMessageStore,
    use_message_store as use_message_store,
)
from .activities.pg_store import PostgresMessageStore as PostgresMessageStore
from .activities.result_store import (
    PostgresResultStore as PostgresResultStore,
    ResultStore as ResultStore,
    SqliteResultStore as SqliteResultStore,
    use_result_store as use_result_store,
)
from .activities.store_check import StoreNotWritable as StoreNotWritable
from .activities.toolkits import Toolkit as Toolkit, register_toolkit as register_toolkit
from .activities.tools import (
    ToolCallContext as ToolCallContext,
    ToolError as ToolError,
    ToolRegistry as ToolRegistry,
    callback_tool as callback_tool,
    current_call as current_call,
    make_tool as make_tool,
    tool as tool,
)
from .client.agent_client import (
    AgentClient as AgentClient,
    AgentRun as AgentRun,
    AgentRunFailed as AgentRunFailed,
    AgentUpdateNotDelivered as AgentUpdateNotDelivered,
    SearchAttributesNotRegistered as SearchAttributesNotRegistered,
)
from .client.evaluation import (
    EvalRow as EvalRow,
    eval_totals as eval_totals,
    evaluate as evaluate,
    recent_completed as recent_completed,
)
from .client.forking import ForkError as ForkError, ForkStepOutOfRange as ForkStepOutOfRange
from .client.overview import (
    LabelStats as LabelStats,
    WaitingRun as WaitingRun,
    label_stats as label_stats,
    waiting_runs as waiting_runs,
)
from .encryption.payload_codec import PayloadKeyError as PayloadKeyError
from .serving.plugin import AgentPlugin as AgentPlugin, Stores as Stores
from .workflows.agent import AgentWorkflow as AgentWorkflow
from .workflows.approval import approval_predicate as approval_predicate
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
    AgentGuardrailTripped as AgentGuardrailTripped,
    AgentInputInvalid as AgentInputInvalid,
    AgentInputTooLarge as AgentInputTooLarge,
    AgentProviderError as AgentProviderError,
    AgentStepLimitExceeded as AgentStepLimitExceeded,
)
from .workflows.guardrail_data import (
    GuardrailJudge as GuardrailJudge,
    GuardrailPolicy as GuardrailPolicy,
    GuardrailRecord as GuardrailRecord,
    GuardrailRef as GuardrailRef,
    GuardrailVerdict as GuardrailVerdict,
)
from .workflows.inputs import (
    AgentInput as AgentInput,
    AgentResult as AgentResult,
    AutoMode as AutoMode,
    CallbackTool as CallbackTool,
    CodeMode as CodeMode,
    Limits as Limits,
    ToolApprovalPolicy as ToolApprovalPolicy,
)
from .workflows.model_settings import (
    ModelSettings as ModelSettings,
    ScriptedCall as ScriptedCall,
    ScriptedTurn as ScriptedTurn,
)
from .workflows.specs import RetrySettings as RetrySettings
from .workflows.state import CompensationInput as CompensationInput
