"""What a run says of itself: the `status` query's answer, a sub-agent's report of its waiting
calls, and the search attributes a run keeps up to date for the Web UI's lists."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from .decisions import PendingCallback, PlanState, ToolApproval
from .inputs import Limits
from .state import EarlierSteps, QueuedMessage, StepRecord, TurnRecord
from .usage import Usage

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
"""running, awaiting_approval, compensating, completed or failed: find runs waiting on a person
with `temporal workflow list --query "AgentStatus='awaiting_approval'"`."""


AGENT_STEP = SearchAttributeKey.for_int("AgentStep")
"""Model calls made so far: exact whenever the run waits or has ended; while it runs, it moves
with the status and at least every 10 steps (workflows/reporting.py)."""


AGENT_COST_USD = SearchAttributeKey.for_float("AgentCostUsd")
"""US dollars spent so far, on the same schedule as AgentStep, a sub-agent's cost included
once it ended; unset while a model call of the run has no price. `AgentCostUsd > 1`."""


AGENT_ERROR = SearchAttributeKey.for_keyword("AgentError")
"""The error type a failed run ended with (AgentStepLimitExceeded, AgentBudgetExceeded, ...)."""


SEARCH_ATTRIBUTES = (AGENT_STATUS, AGENT_STEP, AGENT_COST_USD, AGENT_ERROR)


def starting_search_attributes(
    given: TypedSearchAttributes | None = None,
) -> TypedSearchAttributes:
    """What a run's start sets beside `given`: AgentStatus running, AgentStep 0 and AgentCostUsd
    0, which the run would otherwise upsert as its first act (an event of its history, and a
    Temporal Cloud action, saved: versioning.ONE_MARKER)."""
    pairs: list[SearchAttributePair[Any]] = list(given or ())
    keys = {pair.key.name for pair in pairs}
    starting: list[SearchAttributePair[Any]] = [
        SearchAttributePair(AGENT_STATUS, "running"),
        SearchAttributePair(AGENT_STEP, 0),
        SearchAttributePair(AGENT_COST_USD, 0.0),
    ]
    return TypedSearchAttributes([*pairs, *(p for p in starting if p.key.name not in keys)])


AgentStatus = Literal["running", "awaiting_approval", "compensating", "completed", "failed"]


STATUS_STEP_RECORDS = 20
"""The newest step records the `status` query answers with; `trace_page` pages through all."""


SUB_AGENT_APPROVALS_SIGNAL = "sub_agent_approvals"
"""The signal a sub-agent sends its parent when its calls start or stop waiting for a person."""


class SubAgentApproval(ToolApproval):
    """A tool call that a sub-agent waits on (or waited on), as its parent shows it.

    `call_id` is qualified by the parent's `delegate` call: `call_1_1/call_2_1` is the call
    `call_2_1` of the sub-agent that `call_1_1` started, and the parent's `decide_tool_call`
    takes it so."""

    workflow_id: str
    """The sub-agent run that asked (`<parent workflow id>/<delegate call id>`); its own
    `decide_tool_call` takes the last part of `call_id`."""


class SubAgentReport(BaseModel):
    """Input of the `sub_agent_approvals` signal: the calls of a sub-agent that started waiting
    for a person, and those that stopped (decided, timed out or withdrawn) since its last
    report. Call ids are the sender's own, or qualified for its own sub-agents' calls."""

    workflow_id: str
    """The sub-agent that reports: `<parent workflow id>/<delegate call id>`."""
    approvals: list[SubAgentApproval]


class ConversationStatus(BaseModel):
    """A conversation's part of the `status` query."""

    turn: int
    """The newest turn (working, or finished when the conversation waits)."""
    working: bool
    """A turn is under way; False while the conversation waits for a message."""
    queued: list[QueuedMessage]
    """Messages waiting for the next safe point of the working turn."""
    turns: list[TurnRecord]
    """The newest STATUS_TURNS turns."""
    ended: str | None = None


STATUS_TURNS = 20


class RunStatus(BaseModel):
    """Answer of the `status` query: plain JSON, so `temporal workflow query` prints it."""

    status: AgentStatus
    details: str
    """What the run is doing or waiting for, in a line (also its current details in the UI)."""
    step: int
    usage: Usage
    limits: Limits
    step_records: list[StepRecord]
    """The newest STATUS_STEP_RECORDS steps' records (all kept ones: the `trace_page` query)."""
    earlier_steps: EarlierSteps | None = None
    pending_tool_calls: list[str]
    plan: PlanState | None = None
    approvals: list[ToolApproval] = []
    """Tool calls waiting for a person's decision (status awaiting_approval)."""
    sub_agent_approvals: list[SubAgentApproval] = []
    """Tool calls the run's sub-agent waits on, with call ids qualified by the delegate call:
    decide them here, with the same `decide_tool_call`."""
    pending_callbacks: list[PendingCallback] = []
    """Callback tools' calls that wait for a client's answer (`answer_callback`)."""
    tool_notices: list[str] = []
    """What the run goes without (`RunTools.notices`): an optional MCP server that was down."""
    conversation: ConversationStatus | None = None
    """A conversation's turns and queued messages; None for a run that is not one."""
