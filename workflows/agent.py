"""AgentWorkflow: the ReAct loop, one activity per model call and per tool call.

This file holds the workflow's handlers (queries, signals, updates) and the step loop only.
Each concern the loop touches has a module of its own (docs/architecture.md): the run's state
(state.py), the model (model_gateway.py), what each call means (dispatch.py), people
(gates.py), running calls (tool_runner.py), undoing (saga.py), the context window
(context_window.py), continue-as-new (continuation.py), progress (reporting.py) and history
versions (versioning.py).

Deterministic code only: no clock but `workflow.now()`, no I/O. The transcript lives in the
run's state, and every append goes through the pairing rule.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

from . import continuation, conversation, dispatch, fork, paging, run_setup, versioning
from .budget import Budget
from .call_ids import CallIds
from .context_window import ContextWindow
from .errors import (
    AgentApprovalTimeout,
    AgentError,
    AgentFatalToolError,
    AgentInputTooLarge,
)
from .gates import (
    PlanGate,
    ToolCallGate,
    ignored_by_signal,
    validator_refusal,
)
from .input_limits import InputTooLarge, check_input, json_bytes
from .inputs import AgentInput, AgentResult
from .loop_detection import LoopDetector
from .model_gateway import ModelGateway
from .outcomes import Outcome
from .paging import (
    EffectsPage,
    EffectsPageRequest,
    TracePage,
    TracePageRequest,
    TranscriptPage,
    TranscriptPageRequest,
)
from .reporting import CANCELLED, Reporter
from .saga import Saga
from .specs import ToolSpec
from .state import PlanDecision, PlanState, RunState, StepRecord, ToolApproval, ToolCallDecision
from .status import STATUS_STEP_RECORDS, SUB_AGENT_APPROVALS_SIGNAL, RunStatus, SubAgentReport
from .tool_runner import ToolRunner, not_run_because
from .trace import Trace
from .transcript import (
    Message,
    ToolCall,
    ToolResult,
    Transcript,
    UserMessage,
)
from .unknown_signals import UnknownSignals

EMPTY_REPLY_NUDGE = (
    "Your reply was empty. Call a tool, or answer in text (or with finish) if you are done."
)
SCHEMA_NUDGE = (
    "This run needs its final answer as a call to finish, with arguments matching its schema; "
    "plain text does not end it."
)


@workflow.defn
class AgentWorkflow:
    @workflow.init
    def __init__(self, agent_input: AgentInput) -> None:
        self._input = agent_input
        if agent_input.carried is not None:
            state = agent_input.carried
        elif agent_input.fork is not None:
            state = fork.seeded_state(agent_input.fork, workflow.now())
        else:
            state = RunState.start(workflow.now())
        if agent_input.carried is None:
            # A sub-agent holds the denials its parent was asked to remember.
            for tool, denial in agent_input.remembered_denials.items():
                state.remembered.setdefault(tool, denial)
        self._state = state
        # The transcript checks what it is given, then shares the state's list of messages.
        self._transcript = Transcript(messages=state.messages)
        state.messages = self._transcript.messages
        self._call_ids = CallIds(state)
        self._trace = Trace(state)
        # The progress stream: publishing is workflow state only (no commands), so runs recorded
        # before it existed replay unchanged. Its log goes along on continue-as-new.
        self._stream = WorkflowStream(prior_state=state.stream)
        state.stream = None
        self._budget = Budget(agent_input.limits, state, fork.inherited_steps(agent_input))
        self._loops = LoopDetector(state.loop_counts)
        self._reporter = Reporter(state, self._stream)
        timeout = agent_input.approval_timeout_seconds
        signals = UnknownSignals()
        self._plan_gate = PlanGate(state, self._reporter, self._budget, timeout, signals)
        self._tool_gate = ToolCallGate(state, self._reporter, self._budget, timeout, signals)
        self._gateway = ModelGateway(agent_input, self._budget)
        self._window = ContextWindow(
            agent_input, state, self._budget, self._gateway, self._reporter
        )
        self._saga = Saga(
            state, self._reporter, agent_input.heartbeat_timeout, agent_input.effect_log_room
        )
        self._runner = ToolRunner(
            agent_input,
            state,
            self._budget,
            self._tool_gate,
            self._gateway,
            self._saga,
            self._reporter,
        )
        self._conversation = conversation.Conversation(
            agent_input, state, self._reporter, self._budget, signals
        )
        if self._conversation.on:
            self._runner.interruption = self._conversation.interruption
        self._tools: dict[str, ToolSpec] = {}
        self._read_result: ToolSpec | None = None
        self._telling_parent: asyncio.Task[None] | None = None
        self._first_step_of_run = state.steps

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
            tool_notices=self._tool_notices(),
            conversation=self._conversation.status(),
        )

    def _tool_notices(self) -> list[str]:
        tools = self._state.tools
        return list(tools.notices) if tools is not None else []

    # --- decisions: plain JSON strings, so `temporal workflow signal --input '"..."'` and the
    # Web UI's signal dialog can decide without any Python ------------------------------------

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
    def _validate_plan_decision(self, decision: PlanDecision) -> None:
        try:
            self._plan_gate.validate(decision)
        except ValueError as refused:
            raise validator_refusal(refused) from None

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
    def _validate_tool_decision(self, decision: ToolCallDecision) -> None:
        try:
            self._tool_gate.validate(decision)
        except ValueError as refused:
            raise validator_refusal(refused) from None

    # The same decision as a signal, for `temporal workflow signal --name decide_tool_call
    # --input '{"call_id": "...", "approve": true}'` and the Web UI's signal dialog.
    @workflow.signal(
        name="decide_tool_call",
        description=(
            "Approve or deny a tool call that waits: the same input as the update of this name, "
            "but no answer comes back (a bad one is ignored, and the run's page says why)."
        ),
    )
    async def decide_tool_call_by_signal(self, decision: ToolCallDecision) -> None:
        await self._tool_gate.decide_by_signal(decision)

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

    # --- a conversation's messages, interrupts and end (workflows/conversation.py); each an
    # update (refused with the reason) and a signal of the same name (logged and ignored when
    # refused), for `temporal workflow update execute` and `temporal workflow signal` alike ----

    @workflow.update
    def send_message(self, text: str) -> int:
        """A person's message to the conversation; answers the turn it belongs to: the working
        turn (it is appended at the next safe point) or, when none works, the next one."""
        return self._conversation.take_message(text)

    @send_message.validator
    def _validate_message(self, text: str) -> None:
        try:
            self._conversation.validate_message(text)
        except InputTooLarge as refused:
            raise validator_refusal(refused) from None

    @workflow.signal(name="send_message")
    def send_message_by_signal(self, text: str) -> None:
        try:
            self._conversation.validate_message(text)
        except ValueError as refused:
            if ignored_by_signal(refused):
                workflow.logger.warning("message ignored: %s", refused)
                return
        self._conversation.take_message(text)

    @workflow.update
    def interrupt(self) -> int:
        """Stop the working turn (workflows/interruption.py says what stops and what finishes);
        answers its number. The conversation then waits for the next message."""
        return self._conversation.interrupt()

    @interrupt.validator
    def _validate_interrupt(self) -> None:
        self._conversation.validate_interrupt()

    @workflow.signal(name="interrupt")
    def interrupt_by_signal(self) -> None:
        try:
            self._conversation.validate_interrupt()
        except ValueError as refused:
            workflow.logger.warning("interrupt ignored: %s", refused)
            return
        self._conversation.interrupt()

    @workflow.update
    def end_conversation(self) -> int:
        """End the conversation (a working turn is interrupted first); answers its number of
        turns. The run completes with every turn in its result."""
        return self._conversation.end()

    @end_conversation.validator
    def _validate_end(self) -> None:
        self._conversation.validate_end()

    @workflow.signal(name="end_conversation")
    def end_conversation_by_signal(self) -> None:
        try:
            self._conversation.validate_end()
        except ValueError as refused:
            workflow.logger.warning("end ignored: %s", refused)
            return
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

    # --- the run -------------------------------------------------------------------------------

    @workflow.run
    async def run(self, agent_input: AgentInput) -> AgentResult:
        """Run the loop; a run that ends without an answer undoes its side effects, then fails."""
        behaviours = versioning.decide(
            agent_input.model.provider,
            agent_input.conversation,
            output_schema=agent_input.output_schema is not None,
        )
        self._reporter.behaviours = self._gateway.behaviours = behaviours
        self._loops.bounded = self._call_ids.bounded = behaviours.bounded_state
        if behaviours.sub_agent_approvals_reach_the_parent and workflow.info().parent:
            # A sub-agent tells its parent what waits here; the task ends with the run.
            self._telling_parent = asyncio.create_task(self._tool_gate.report_to_parent())
        self._reporter.set_status("running", "starting")
        try:
            result = await self._loop()
        except AgentError as error:
            self._close_pending_calls(f"Not run: the run stopped ({error.type}).")
            # A conversation's answered turns keep their effects, as when it ends.
            kept = self._conversation.unanswered_effects() if self._conversation.on else 0
            if kept and not versioning.keeps_answered_effects():
                kept = 0
            if behaviours.cancels_end_the_run:
                if await self._saga.undo_all(kept):
                    if kept:  # cancelling a conversation undoes all of it, as it does a run
                        del self._state.effects[kept:]
                        await self._saga.undo_all()
                    return await self._end_cancelled()
            else:
                await self._saga.compensate()
            self._reporter.set_status("failed", f"failed: {error.type}", error=error.type)
            final = self._saga.explain(error, kept)
            self._reporter.publish(
                "failed", usage=self._state.usage, outcome=error.type, text=final.message
            )
            await self._close_stream()
            raise final from None
        except asyncio.CancelledError:
            # Wherever the cancel landed (a model call, a tool, a person's decision, a
            # sub-agent), the compensations run to the end before the run reports itself
            # cancelled.
            self._close_pending_calls("Not run: the run was cancelled.")
            if behaviours.cancels_end_the_run:
                await self._saga.undo_all()
            else:
                await self._saga.compensate()
            return await self._end_cancelled()
        self._reporter.set_status("completed", f"completed in {result.steps} steps")
        self._reporter.publish("completed", usage=result.usage, text=result.answer)
        await self._close_stream()
        return result

    async def _end_cancelled(self) -> AgentResult:
        self._reporter.set_status("failed", CANCELLED)
        self._reporter.publish(
            "failed", usage=self._state.usage, outcome="cancelled", text="cancelled"
        )
        await self._close_stream()
        raise asyncio.CancelledError("the run was cancelled")

    async def _loop(self) -> AgentResult:
        agent_input, state = self._input, self._state
        if agent_input.carried is None:
            self._check_input_size()
        await self._resolve_tools()
        talk = self._conversation
        if agent_input.carried is None and agent_input.fork is None:
            self._transcript.append(UserMessage(content=agent_input.prompt))
            talk.first_turn(agent_input.prompt)
        # messages[:sent_until] were in the previous model request
        sent_until = len(state.messages) if agent_input.carried else 0
        if talk.waiting and (ended := await self._next_turn()) is not None:
            return ended  # handed on between turns: wait on

        while True:
            self._trace.keep_bounded()
            if self._hand_on_due():
                await continuation.hand_on(
                    agent_input, state, self._stream, self._reporter, self._budget
                )
            if talk.out_of_steps():  # messages queued meanwhile start the next turn
                if (ended := await self._next_turn("step_limit")) is not None:
                    return ended
                continue
            talk.deliver(self._transcript)  # steering, at a safe point
            offered = self._offered()
            step = state.steps + 1
            context = await self._window.fit(offered, sent_until, step)
            self._budget.check_before_model_call(workflow.now(), context)
            started = workflow.now()
            model = agent_input.model.model
            self._reporter.set_status("running", f"step {step}: waiting for {model}")
            self._reporter.publish("step_started", step=step, model=model)
            sent = self._window.view()
            previous_input = state.step_records[-1].usage.input_tokens if state.step_records else 0
            if talk.on:
                reply = await talk.interruption.model_call(self._gateway.reply(offered, step, sent))
                if reply is None:  # interrupted: the turn ends without this call's reply
                    if (ended := await self._next_turn("interrupted")) is not None:
                        return ended
                    continue
                response = reply
            else:
                response = await self._gateway.reply(offered, step, sent)
            sent_until = len(state.messages)
            self._budget.record_model_call(response.usage)
            self._window.account_cache_loss(response, previous_input)
            record = StepRecord(
                step=step,
                provider=agent_input.model.provider,
                model=response.model,
                messages_sent=len(sent),
                model_latency_ms=_ms_since(started),
                model_attempts=response.attempt,
                usage=response.usage,
                finish_reason=response.finish_reason,
                turn=talk.turn if talk.on else None,
                reasoning_left_out=response.reasoning_left_out,
            )
            state.step_records.append(record)
            calls = response.message.tool_calls
            self._reporter.publish(
                "step_finished",
                model=response.model,
                usage=response.usage,
                latency_ms=record.model_latency_ms,
                attempts=response.attempt,
                outcome=response.finish_reason,
                text=", ".join(c.name for c in calls) or None,
            )
            workflow.logger.info(
                "step %d: %s replied (%s) with %d tool calls: %s",
                step,
                response.model,
                response.finish_reason,
                len(calls),
                ", ".join(f"{c.name} {c.id}" for c in calls) or "-",
            )

            # Append BEFORE executing: if the worker dies mid-tool, the intent is on record.
            checks = dispatch.check_reply(response.message.tool_calls)
            message = dispatch.with_unique_call_ids(
                response.message,
                step,
                self._call_ids,
                bounded_ids=checks.long_call_ids and versioning.renames_long_call_ids(),
            )
            new_ids = [call.id for call in message.tool_calls]
            self._call_ids.add(new_ids)
            self._transcript.append(message)
            # A budget this reply overran stops the run before its answer or its tools count.
            self._budget.check_spend(workflow.now())
            if not message.tool_calls:
                if agent_input.output_schema is None and (message.content or "").strip():
                    answered = self._result(message.content or "", None)
                    if (ended := await self._next_turn("answered", answered)) is not None:
                        return ended
                    continue
                nudge = EMPTY_REPLY_NUDGE if agent_input.output_schema is None else SCHEMA_NUDGE
                self._transcript.append(UserMessage(content=nudge))
                continue
            answer = await self._run_reply(message.tool_calls, record, checks)
            if answer is None and not talk.interrupted:
                continue
            outcome: conversation.TurnOutcome = "interrupted" if answer is None else "answered"
            if (ended := await self._next_turn(outcome, answer)) is not None:
                return ended

    def _check_input_size(self) -> None:
        """One rule for the input at the start and at every hand-on (input_limits.py): an input
        that could not be carried fails now, before anything is paid for."""
        try:
            check_input(json_bytes(self._input), len(self._input.prompt))
        except InputTooLarge as refused:
            if versioning.refuses_oversized_input():
                raise AgentInputTooLarge(str(refused), self._budget.details()) from None

    def _hand_on_due(self) -> bool:
        steps_this_run = self._state.steps - self._first_step_of_run
        return continuation.is_due(self._input, self._state, steps_this_run)

    async def _next_turn(
        self, outcome: conversation.TurnOutcome | None = None, answered: AgentResult | None = None
    ) -> AgentResult | None:
        """Where a turn ends. A run that is not a conversation ends with its answer; a
        conversation records the turn, waits for the next message and answers None once the
        next turn has started, or the conversation's result once it has ended. A queued message
        that crossed the answer goes on in the same turn. `outcome` None: the run was handed
        on while it waited."""
        talk = self._conversation
        if not talk.on:
            return answered
        if outcome == "answered" and talk.has_queued:
            return None
        if outcome is not None:
            talk.finish_turn(outcome, answered.answer if answered else None)
        while True:
            match await talk.next_turn(self._hand_on_due, self._transcript):
                case "turn":
                    return None
                case "ended":
                    return await self._end_conversation()
                case "continue_as_new":
                    await continuation.hand_on(
                        self._input, self._state, self._stream, self._reporter, self._budget
                    )

    async def _end_conversation(self) -> AgentResult:
        """The conversation's result, every turn in it. The effects made since the last answer
        (an interrupted turn's) are undone first, as a failed run's are; the answered turns'
        stay."""
        talk, state = self._conversation, self._state
        kept = talk.unanswered_effects()
        if len(state.effects) > kept:
            cancelled = await self._saga.undo_all(kept)
            del state.effects[kept:]
            if cancelled:  # cancelling a conversation undoes all of it, as it does a run
                raise asyncio.CancelledError("the conversation was cancelled while it ended")
        result = self._result(talk.last_answer(), None)
        return result.model_copy(update={"turns": talk.turns(), "ended": talk.ended()})

    async def _run_reply(
        self, calls: tuple[ToolCall, ...], record: StepRecord, checks: dispatch.ReplyChecks
    ) -> AgentResult | None:
        """Plan a reply's calls, ask for the approvals the plan names, run it, and append one
        result per call in call order. Returns the run's result when finish was accepted."""
        facts = self._facts()
        if checks.too_many_calls and versioning.caps_calls_per_reply():
            facts = dataclasses.replace(facts, max_calls=dispatch.MAX_CALLS_PER_REPLY)
        if checks.duplicate_keys and versioning.refuses_duplicate_keys():
            facts = dataclasses.replace(facts, refuses_duplicate_keys=True)
        planned = dispatch.plan_reply(calls, facts, self._loops)
        self._tool_gate.open(planned, self._state.steps)
        reply = await self._runner.run(planned)
        feedback: str | None = None
        if reply.plan is not None:
            plan_call, steps = reply.plan
            if reason := reply.fatal:
                reply.outcomes[plan_call.id] = not_run_because(plan_call, reason)
            else:
                try:
                    decision = await self._plan_gate.wait(steps)
                except AgentApprovalTimeout as timeout:
                    # The calls that ran keep their results and records; only the plan failed.
                    reply.outcomes[plan_call.id] = Outcome.error(plan_call, f"Error: {timeout}")
                    self._append_results(calls, reply.outcomes, record)
                    raise
                text = _decision_text(decision, self._state.plan)
                reply.outcomes[plan_call.id] = Outcome.ok(plan_call, text)
                feedback = None if decision.approve else decision.comment
        self._append_results(calls, reply.outcomes, record)
        self._tool_gate.withdraw()
        if reason := reply.fatal:
            raise AgentFatalToolError(reason, self._budget.details())
        if feedback is not None:
            self._transcript.append(UserMessage(content=feedback))
        if reply.answer is None:
            return None
        return self._result(_answer_text(reply.answer, self._input), reply.answer)

    def _append_results(
        self, calls: tuple[ToolCall, ...], outcomes: dict[str, Outcome], record: StepRecord
    ) -> None:
        """One result per call, in call order, and the calls' trace records."""
        for call in calls:
            outcome = outcomes[call.id]
            self._transcript.append(outcome.result)
            record.tool_calls.append(outcome.record)
            self._reporter.call_finished(outcome)
        self._reporter.reply_done()

    async def _resolve_tools(self) -> None:
        told = set(self._tool_notices())
        run_tools = await run_setup.settle(self._input, self._state, self._reporter.behaviours)
        for notice in run_tools.notices:
            if notice not in told:
                workflow.logger.warning("%s", notice)
                self._reporter.publish("tools_unavailable", text=notice)
        self._tools = {spec.name: spec for spec in run_tools.tools}
        self._read_result = run_tools.read_result
        self._runner.tools = self._tools

    def _offered(self) -> list[ToolSpec]:
        return dispatch.offered_tools(
            self._tools,
            sub_agents=self._input.sub_agents,
            read_result=self._read_result if self._state.externalised else None,
            plan_mode=self._input.plan,
            plan_approved=self._plan_gate.approved,
            output_schema=self._input.output_schema,
        )

    def _facts(self) -> dispatch.RunFacts:
        return dispatch.RunFacts(
            tools=self._tools,
            offered=self._offered(),
            plan_mode=self._input.plan,
            plan_approved=self._plan_gate.approved,
            output_schema=self._input.output_schema,
            policy=self._input.tool_approval,
            remembered=self._state.remembered,
            behaviours=self._reporter.behaviours,
        )

    def _close_pending_calls(self, content: str) -> None:
        """Give every call still waiting a result, so the transcript stays valid to the end."""
        self._tool_gate.withdraw()
        for call in self._transcript.pending_calls():
            self._transcript.append(
                ToolResult(
                    tool_call_id=call.id, tool_name=call.name, content=content, is_error=True
                )
            )

    async def _close_stream(self) -> None:
        """Release subscribers' polls before the run closes; they read what is left of the
        stream from the closed run, by query, and end."""
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    def _result(self, answer: str, output: dict[str, Any] | None) -> AgentResult:
        state = self._state
        return AgentResult(
            answer=answer,
            output=output if self._input.output_schema is not None else None,
            steps=state.steps,
            usage=state.usage,
            step_records=state.step_records,
            earlier_steps=state.earlier_steps,
            compactions=state.compactions,
            side_effects=state.effects,
            tool_notices=self._tool_notices(),
            forked_from=None if self._input.fork is None else self._input.fork.origin,
        )


def _answer_text(arguments: dict[str, Any], agent_input: AgentInput) -> str:
    if agent_input.output_schema is None:
        return str(arguments["answer"])
    return json.dumps(arguments, ensure_ascii=False)


def _decision_text(decision: PlanDecision, plan: PlanState | None) -> str:
    version = plan.version if plan else "?"
    if decision.approve:
        comment = f" Their comment: {decision.comment}" if decision.comment else ""
        return (
            f"A person approved plan v{version}.{comment} Carry it out now; the tools that "
            "change data are available."
        )
    return f"A person rejected plan v{version}; their feedback follows. Plan again."


def _ms_since(started: Any) -> int:
    return int((workflow.now() - started).total_seconds() * 1000)
