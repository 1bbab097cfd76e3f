"""The workflow's handlers: what people, apps and sub-agents ask a run, and what they decide.

AgentWorkflow inherits them (the SDK reads a workflow's handlers from its class and its bases).
Each handler is declared once and hands over to the part of the run it concerns: the
transcript, the trace, the saga, the gates, the conversation. A decision has one rule for
whether it is taken (the part's `validate_...`): as an update it is refused with the reason
(`refused`, one line, no stack trace), and as a signal of the same name, for `temporal workflow
signal` and the Web UI's signal dialog, it is logged and ignored (`ignored`): refusals.py.
Deterministic code only.
"""

from __future__ import annotations

from temporalio import workflow

from . import paging
from .auto_mode_forwarding import SET_AUTO_MODE, AutoModeForwarding
from .callbacks import CallbackGate
from .conversation import Conversation
from .decisions import (
    AutoModeChange,
    CallbackAnswer,
    PendingCallback,
    PlanDecision,
    PlanState,
    ToolApproval,
    ToolCallDecision,
)
from .inputs import AgentInput
from .paging import (
    EffectsPage,
    EffectsPageRequest,
    TracePage,
    TracePageRequest,
    TranscriptPage,
    TranscriptPageRequest,
)
from .plan_gate import PlanGate
from .refusals import ignored, refused, validator_refusal
from .reporting import Reporter
from .saga import Saga
from .state import RunState, StepRecord
from .status import STATUS_STEP_RECORDS, SUB_AGENT_APPROVALS_SIGNAL, RunStatus, SubAgentReport
from .tool_call_gate import ToolCallGate
from .trace import Trace
from .transcript import Message, Transcript


class AgentHandlers:
    """The handlers of AgentWorkflow, over the parts its __init__ builds."""

    _input: AgentInput
    _state: RunState
    _transcript: Transcript
    _trace: Trace
    _saga: Saga
    _reporter: Reporter
    _plan_gate: PlanGate
    _tool_gate: ToolCallGate
    _auto_mode: AutoModeForwarding
    _callbacks: CallbackGate
    _conversation: Conversation

    # --- queries -------------------------------------------------------------------------------

    @workflow.query(description="The whole transcript as JSON (over 2 MB, use transcript_page).")
    def transcript(self) -> list[Message]:
        """The whole transcript: plain JSON for the CLI; over 2 MB, use transcript_page."""
        return list(self._transcript.messages)

    @workflow.query(
        description='The transcript page by page. Input: {"start": 0, "max_bytes": 1000000}.'
    )
    def transcript_page(self, request: TranscriptPageRequest) -> TranscriptPage:
        """The transcript from `start`, as many messages as fit in `max_bytes` of JSON (one at
        least), so a transcript of any size can be read, page by page."""
        messages = self._transcript.messages
        page = paging.fitting(messages, request.start, request.max_bytes)
        return TranscriptPage(messages=page, start=request.start, total=len(messages))

    @workflow.query(
        description="One record per step kept: the model call and the tool calls it led to."
    )
    def trace(self) -> list[StepRecord]:
        """One record per step kept (a long run adds its oldest up: see trace_page): the model
        call and every tool call it led to."""
        return self._state.step_records

    @workflow.query(
        description=(
            "The compensation log page by page, oldest effect first. "
            'Input: {"start": 0, "max_bytes": 1000000}.'
        )
    )
    def effects_page(self, request: EffectsPageRequest) -> EffectsPage:
        """The side effects from `start`, as many as fit in `max_bytes` of JSON (one at least):
        what the run would undo if it failed now, page by page."""
        return self._saga.page(request)

    @workflow.query(
        description=(
            "The step records page by page, earlier steps added up. "
            'Input: {"start": 0, "max_bytes": 1000000}.'
        )
    )
    def trace_page(self, request: TracePageRequest) -> TracePage:
        """The kept step records from `start`, as many as fit in `max_bytes` of JSON, with the
        earlier steps added up: the trace of a run of any length, page by page."""
        return self._trace.page(request)

    @workflow.query(
        description=(
            "What the run does or waits for: status, step, usage and cost, limits, the plan, "
            "the tool calls that wait."
        )
    )
    def status(self) -> RunStatus:
        state = self._state
        return RunStatus(
            status=self._reporter.status,
            details=self._reporter.details,
            step=state.steps,
            usage=state.usage,
            limits=self._input.limits,
            step_records=state.step_records[-STATUS_STEP_RECORDS:],
            earlier_steps=state.earlier_steps,
            pending_tool_calls=[call.id for call in self._transcript.pending_calls()],
            plan=state.plan,
            approvals=self._tool_gate.awaiting(),
            sub_agent_approvals=self._tool_gate.sub_agent_awaiting(),
            pending_callbacks=self._callbacks.pending(),
            tool_notices=self._tool_notices(),
            conversation=self._conversation.status(),
        )

    def _tool_notices(self) -> list[str]:
        tools = self._state.tools
        return list(tools.notices) if tools is not None else []

    # --- a plan: plain JSON strings by signal, so `temporal workflow signal --input '"..."'` and
    # the Web UI's signal dialog decide without any Python ------------------------------------

    @workflow.signal(
        description=(
            "Approve the plan that waits. Input: an optional comment for the model, as a JSON "
            'string ("go ahead"). No answer comes back: the update decide_plan shows the outcome.'
        )
    )
    def approve_plan(self, comment: str | None = None) -> None:
        """Approve the plan that is waiting; the optional comment is passed on to the model."""
        self._plan_gate.decide_by_signal(PlanDecision(approve=True, comment=comment))

    @workflow.signal(
        description=(
            "Reject the plan that waits. Input: the feedback the model plans again from, as a "
            'JSON string ("refund instead"). No answer: the update decide_plan shows the outcome.'
        )
    )
    def reject_plan(self, feedback: str) -> None:
        """Reject the plan that is waiting; the feedback becomes the person's next message."""
        self._plan_gate.decide_by_signal(PlanDecision(approve=False, comment=feedback))

    @workflow.update(
        description=(
            'Approve or reject the plan that waits, and answer it as decided. Input: {"approve": '
            'true, "version": 1} or {"approve": false, "version": 1, "comment": "what to '
            "change\"}; version may be left out. The run's page shows the one waiting."
        )
    )
    def decide_plan(self, decision: PlanDecision) -> PlanState:
        """Approve or reject the waiting plan in one round trip; answers the plan as decided."""
        return self._plan_gate.decide(decision)

    @decide_plan.validator
    def _check_plan_decision(self, decision: PlanDecision) -> None:
        refused(self._plan_gate.validate, decision)

    # --- a tool call that waits ------------------------------------------------------------

    @workflow.update(
        description=(
            'Approve or deny a tool call that waits, and answer it as decided. Input: {"call_id": '
            '"call_2_1", "approve": true} or {"call_id": "call_2_1", "approve": false, "reason": '
            '"why not"}; add "remember": true for the tool\'s later calls. The run\'s page lists '
            "the calls that wait (a sub-agent's as call_1_1/call_2_1)."
        )
    )
    async def decide_tool_call(self, decision: ToolCallDecision) -> ToolApproval:
        """Approve or deny a tool call that waits, this run's or (by its qualified id,
        `call_1_1/call_2_1`) its sub-agent's; answers the call's approval as decided."""
        return await self._tool_gate.decide_or_forward(decision)

    @decide_tool_call.validator
    def _check_tool_decision(self, decision: ToolCallDecision) -> None:
        refused(self._tool_gate.validate, decision)

    @workflow.signal(
        name="decide_tool_call",
        description=(
            "Approve or deny a tool call that waits: the same input as the update of this name, "
            "but no answer comes back (a bad one is ignored, and the run's page says why)."
        ),
    )
    async def decide_tool_call_by_signal(self, decision: ToolCallDecision) -> None:
        # The gate says why on the run's page, and forwards a sub-agent's call by signal.
        await self._tool_gate.decide_by_signal(decision)

    @workflow.update(
        description=(
            "Answer a callback tool's call that waits (status: pending_callbacks), with the "
            'result the client computed. Input: {"call_id": "call_2_1", "result": ...}. Refused '
            "with the reason when the result does not match the tool's result schema, or the "
            "call does not wait (answered already, timed out)."
        )
    )
    def answer_callback(self, answer: CallbackAnswer) -> PendingCallback:
        """Answer a callback tool's call; answers the call as it was asked."""
        try:
            return self._callbacks.take(answer)
        except ValueError as refusal:  # answered by an update validated beside this one
            raise validator_refusal(refusal) from None

    @answer_callback.validator
    def _check_callback_answer(self, answer: CallbackAnswer) -> None:
        refused(self._callbacks.validate, answer)

    @workflow.update(
        description=(
            "For an operator: turn auto mode's judge off for the rest of the run "
            '({"off": true}), or replace its rules ({"rules": {"criteria": {...}, "tools": '
            '{...}, "default": ...}}), here and in the sub-agents that run. Calls under review '
            "go to a person. Answers what holds now, and which sub-agents it reached."
        )
    )
    async def set_auto_mode(self, change: AutoModeChange) -> str:
        """An operator's change to auto mode, for the rest of the run and its sub-agents (never
        a tool: the model cannot call it)."""
        return await self._auto_mode.change(change)

    @set_auto_mode.validator
    def _check_auto_mode_change(self, change: AutoModeChange) -> None:
        refused(self._tool_gate.validate_auto_mode_change, change)

    @workflow.signal(
        name=SET_AUTO_MODE,
        description=(
            "The update of this name's twin, with the same input: a parent sends it to its "
            "sub-agents that run. No answer comes back (a bad one is ignored and logged)."
        ),
    )
    async def set_auto_mode_by_signal(self, change: AutoModeChange) -> None:
        if ignored("auto mode change", self._tool_gate.validate_auto_mode_change, change) is None:
            await self._auto_mode.take_by_signal(change)

    @workflow.signal(
        name=SUB_AGENT_APPROVALS_SIGNAL,
        description=(
            "Sent by this run's sub-agents, not by people: their tool calls that started or "
            "stopped waiting for a person."
        ),
    )
    def sub_agent_approvals(self, report: SubAgentReport) -> None:
        """From this run's sub-agent: its calls that started or stopped waiting for a person."""
        self._tool_gate.take_report(report)

    # --- a conversation's messages, interrupts and end (workflows/conversation.py) -------------

    @workflow.update
    def send_message(self, text: str) -> int:
        """A person's message to the conversation; answers the turn it belongs to: the working
        turn (it is appended at the next safe point) or, when none works, the next one."""
        return self._conversation.take_message(text)

    @send_message.validator
    def _check_message(self, text: str) -> None:
        refused(self._conversation.validate_message, text)

    @workflow.signal(name="send_message")
    def send_message_by_signal(self, text: str) -> None:
        if ignored("message", self._conversation.validate_message, text) is None:
            self._conversation.take_message(text)

    @workflow.update
    def interrupt(self) -> int:
        """Stop the working turn (workflows/interruption.py says what stops and what finishes);
        answers its number. The conversation then waits for the next message."""
        return self._conversation.interrupt()

    @interrupt.validator
    def _check_interrupt(self) -> None:
        refused(self._conversation.validate_interrupt)

    @workflow.signal(name="interrupt")
    def interrupt_by_signal(self) -> None:
        if ignored("interrupt", self._conversation.validate_interrupt) is None:
            self._conversation.interrupt()

    @workflow.update
    def end_conversation(self) -> int:
        """End the conversation (a working turn is interrupted first); answers its number of
        turns. The run completes with every turn in its result."""
        return self._conversation.end()

    @end_conversation.validator
    def _check_end(self) -> None:
        refused(self._conversation.validate_end)

    @workflow.signal(name="end_conversation")
    def end_conversation_by_signal(self) -> None:
        if ignored("end", self._conversation.validate_end) is None:
            self._conversation.end()

    @workflow.signal(
        description=(
            "Move a conversation that waits between turns to the worker deployment's current "
            "version (it continues as new there), when its own is no longer the target; "
            "ignored otherwise (docs/deployment.md). No input."
        )
    )
    def upgrade(self) -> None:
        if not self._conversation.request_upgrade():
            workflow.logger.info(
                "upgrade ignored: not a conversation, or its version is the target already"
            )
