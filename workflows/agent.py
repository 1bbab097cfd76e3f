"""AgentWorkflow: the ReAct loop, one activity per model call and per tool call.

This file holds the run and its step loop; the handlers (queries, signals, updates) are
handlers.py's, which AgentWorkflow inherits. Each concern the loop touches has a module of its
own (docs/architecture.md): the run's state (state.py), the model (model_gateway.py), what each
call means (dispatch.py), people (plan_gate.py, tool_call_gate.py), running calls
(tool_runner.py), undoing (saga.py), the context window (context_window.py), continue-as-new
(continuation.py), a conversation's turns (conversation.py), progress (reporting.py) and
history versions (versioning.py).

Each step of the loop ends in a typed next step (`NextStep`, next_step.py: run again, a turn
ended, wait for the next turn, hand on, finished), and `_loop` dispatches them in one place; a
failure is an `AgentError` raised. The run's first state and the checks of its input are
run_setup.py's. Deterministic code only: no clock but `workflow.now()`, no I/O. The transcript
lives in the run's state, and every append goes through the pairing rule.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

from . import continuation, dispatch, fork, run_setup, versioning
from .auto_mode_forwarding import AutoModeForwarding
from .budget import Budget
from .builtin_tools import finish_answer
from .call_ids import CallIds
from .callbacks import CallbackGate
from .context import RunContext
from .context_window import ContextWindow
from .conversation import Conversation
from .elapsed import ms_since
from .errors import AgentApprovalTimeout, AgentError, AgentFatalToolError
from .guardrails import Guardrails
from .handlers import AgentHandlers
from .inputs import AgentInput, AgentResult
from .judge import Judge
from .loop_detection import LoopDetector
from .model_gateway import ModelGateway
from .next_step import Finished, HandOn, NextStep, RunAgain, TurnEnded, WaitForTurn
from .outcomes import Outcome
from .plan_gate import PlanGate, decision_text
from .reporting import CANCELLED, Reporter
from .saga import Saga
from .state import StepRecord, TurnOutcome
from .tool_call_gate import ToolCallGate
from .tool_runner import ToolRunner, not_run_because
from .toolbox import Toolbox
from .trace import Trace
from .transcript import ToolCall, ToolResult, Transcript, UserMessage
from .unknown_signals import UnknownSignals

EMPTY_REPLY_NUDGE = (
    "Your reply was empty. Call a tool, or answer in text (or with finish) if you are done."
)
SCHEMA_NUDGE = (
    "This run needs its final answer as a call to finish, with arguments matching its schema; "
    "plain text does not end it."
)


@workflow.defn
class AgentWorkflow(AgentHandlers):
    @workflow.init
    def __init__(self, agent_input: AgentInput) -> None:
        self._input = agent_input
        self._state = state = run_setup.initial_state(agent_input)
        # What the handlers use is built here; the loop's parts once the run has decided its
        # behaviours (context.py says why then).
        self._ctx = ctx = RunContext(agent_input, state)
        # The transcript checks what it is given, then shares the state's list of messages.
        self._transcript = Transcript(messages=state.messages)
        state.messages = self._transcript.messages
        self._trace = Trace(state)
        # The progress stream: publishing is workflow state only (no commands), so runs recorded
        # before it existed replay unchanged. Its log goes along on continue-as-new.
        self._stream = WorkflowStream(prior_state=state.stream)
        state.stream = None
        self._budget = Budget(agent_input.limits, state, fork.inherited_steps(agent_input))
        self._reporter = Reporter(ctx, self._stream)
        signals = UnknownSignals()
        self._plan_gate = PlanGate(ctx, self._reporter, self._budget, signals)
        self._tool_gate = ToolCallGate(ctx, self._reporter, self._budget, signals)
        self._auto_mode = AutoModeForwarding(self._tool_gate)
        self._callbacks = CallbackGate(self._state, self._reporter)
        self._saga = Saga(ctx, self._reporter)
        self._guardrails = guard = Guardrails(ctx, self._reporter, self._budget)
        self._conversation = Conversation(ctx, self._reporter, self._budget, signals, guard)
        self._toolbox = Toolbox(ctx, self._reporter, self._plan_gate)
        self._telling_parent: asyncio.Task[None] | None = None
        self._first_step_of_run = state.steps
        self._sent_until = len(state.messages) if agent_input.carried else 0
        """messages[:_sent_until] were in the previous model request."""

    # --- the run -------------------------------------------------------------------------------

    @workflow.run
    async def run(self, agent_input: AgentInput) -> AgentResult:
        """Run the loop; a run that ends without an answer undoes its side effects, then fails."""
        # The run's first act (context.py says why not in __init__): the order of the patches
        # is part of the history, and versioning.decide asks them in it.
        behaviours = self._ctx.behaviours = versioning.decide(
            agent_input.model.provider,
            agent_input.conversation,
            output_schema=agent_input.output_schema is not None,
        )
        self._build_the_loop()
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
            kept = kept if kept and versioning.keeps_answered_effects() else 0
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

    def _build_the_loop(self) -> None:
        """The loop's parts, which no handler uses, built knowing the run's behaviours."""
        ctx, state = self._ctx, self._state
        bounded = ctx.behaviours.bounded_state
        self._call_ids = CallIds(state, bounded=bounded)
        self._loops = LoopDetector(state.loop_counts, bounded=bounded)
        self._gateway = ModelGateway(ctx, self._budget)
        self._tool_gate.use_judge(Judge(ctx, self._gateway, self._budget))
        self._guardrails.use_gateway(self._gateway)
        self._window = ContextWindow(ctx, self._budget, self._gateway, self._reporter)
        talk = self._conversation
        self._runner = ToolRunner(
            ctx,
            self._budget,
            self._tool_gate,
            self._auto_mode,
            self._callbacks,
            self._gateway,
            self._saga,
            self._reporter,
            self._toolbox.tools,
            talk.interruption if talk.on else None,
        )
        self._runner.use_code_mode(self._toolbox.facts, self._loops)

    async def _end_cancelled(self) -> AgentResult:
        self._reporter.set_status("failed", CANCELLED)
        self._reporter.publish(
            "failed", usage=self._state.usage, outcome="cancelled", text="cancelled"
        )
        await self._close_stream()
        raise asyncio.CancelledError("the run was cancelled")

    async def _loop(self) -> AgentResult:
        """Where each step leaves the run, in one place."""
        next_step: NextStep = await self._start()
        while True:
            match next_step:
                case RunAgain():
                    next_step = await self._step()
                case TurnEnded(outcome, answered):
                    next_step = await self._turn_ended(outcome, answered)
                case WaitForTurn():
                    next_step = await self._wait_for_turn()
                case HandOn():
                    await continuation.hand_on(
                        self._input, self._state, self._stream, self._reporter, self._budget
                    )
                case Finished(result):
                    return result

    async def _start(self) -> NextStep:
        agent_input = self._input
        if agent_input.carried is None:
            run_setup.check_input_size(agent_input, self._budget)
        talk = self._conversation
        talk.settle_before_waiting()  # before the tools' local activity: conversation.py
        await self._toolbox.resolve(self._tool_notices())
        if agent_input.carried is None and agent_input.fork is None:
            self._transcript.append(UserMessage(content=agent_input.prompt))
            self._guardrails.take_input(agent_input.prompt)
            talk.first_turn(agent_input.prompt)
        # A conversation handed on while it waited between turns waits on.
        return WaitForTurn() if talk.waiting else RunAgain()

    async def _step(self) -> NextStep:
        """One model call and the calls of its reply."""
        agent_input, state, talk = self._input, self._state, self._conversation
        self._trace.keep_bounded()
        if self._hand_on_due():
            return HandOn()
        if talk.out_of_steps():  # messages queued meanwhile start the next turn
            return TurnEnded("step_limit")
        talk.deliver(self._transcript)  # steering, at a safe point
        offered = self._toolbox.offered()
        step = state.steps + 1
        context = await self._window.fit(offered, self._sent_until, step)
        self._budget.check_before_model_call(workflow.now(), context)
        guarding = await self._guardrails.start_input_checks(step)  # blocking ones first
        started = workflow.now()
        model = agent_input.model.model
        self._reporter.set_status("running", f"step {step}: waiting for {model}")
        self._reporter.publish("step_started", step=step, model=model)
        sent = self._window.view()
        previous_input = state.step_records[-1].usage.input_tokens if state.step_records else 0
        if (given := await fork.given_reply(agent_input, state.steps)) is not None:
            response = given  # a fork inside a script: the original's reply, not asked again
        elif talk.on:
            reply = await talk.interruption.model_call(self._gateway.reply(offered, step, sent))
            if reply is None:  # interrupted: the turn ends without this call's reply
                return TurnEnded("interrupted")
            response = reply
        else:
            response = await self._gateway.reply(offered, step, sent)
        self._sent_until = len(state.messages)
        self._budget.record_model_call(response.usage)
        self._window.account_cache_loss(response, previous_input)
        record = StepRecord(
            step=step,
            provider=agent_input.model.provider,
            model=response.model,
            messages_sent=len(sent),
            model_latency_ms=ms_since(started),
            model_attempts=response.attempt,
            usage=response.usage,
            finish_reason=response.finish_reason,
            turn=talk.turn if talk.on else None,
            reasoning_left_out=response.reasoning_left_out,
        )
        state.step_records.append(record)
        self._reporter.step_finished(response, record)
        # The reply is read only once the input guardrails pass: a trip discards it, no call
        # of it runs; a conversation that refuses the message answers with why.
        if refused := await self._guardrails.inputs_checked(guarding, record):
            self._sent_until = len(state.messages)
            return TurnEnded("refused", self._result(f"Refused: {refused.reason}", None))

        # Append BEFORE executing: if the worker dies mid-tool, the intent is on record.
        checks = dispatch.check_reply(response.message.tool_calls)
        message = dispatch.with_unique_call_ids(
            response.message,
            step,
            self._call_ids,
            bounded_ids=checks.long_call_ids and versioning.renames_long_call_ids(),
            unqualified_ids=checks.slashed_call_ids and versioning.renames_slashed_call_ids(),
        )
        self._call_ids.add([call.id for call in message.tool_calls])
        self._transcript.append(message)
        # A budget this reply overran stops the run before its answer or its tools count.
        self._budget.check_spend(workflow.now())
        if not message.tool_calls:
            if agent_input.output_schema is None and (message.content or "").strip():
                return TurnEnded("answered", self._result(message.content or "", None))
            nudge = EMPTY_REPLY_NUDGE if agent_input.output_schema is None else SCHEMA_NUDGE
            self._transcript.append(UserMessage(content=nudge))
            return RunAgain()
        answer = await self._run_reply(message.tool_calls, record, checks)
        if answer is None:
            return TurnEnded("interrupted") if talk.interrupted else RunAgain()
        return TurnEnded("answered", answer)

    async def _turn_ended(self, outcome: TurnOutcome, answered: AgentResult | None) -> NextStep:
        """A run ends with its answer; a conversation records the turn and waits for the next
        message, unless a message queued meanwhile crossed the answer: the turn goes on. An
        answer an output guardrail stopped goes back to the model to revise."""
        talk = self._conversation
        if outcome == "answered" and talk.on and talk.has_queued:
            return RunAgain()
        if outcome == "answered" and answered is not None:
            revise = await self._guardrails.answer_checked(answered.answer, answered.output)
            if revise is not None:
                self._transcript.append(UserMessage(content=revise))
                return RunAgain()
        if not talk.on:
            assert answered is not None, "only an answer ends a turn outside a conversation"
            return Finished(answered)
        talk.finish_turn(outcome, answered.answer if answered else None)
        return WaitForTurn()

    async def _wait_for_turn(self) -> NextStep:
        match await self._conversation.next_turn(self._hand_on_due, self._transcript):
            case "turn":
                return RunAgain()
            case "ended":
                return Finished(await self._end_conversation())
            case "continue_as_new":
                return HandOn()

    def _hand_on_due(self) -> bool:
        steps_this_run = self._state.steps - self._first_step_of_run
        return continuation.is_due(self._input, self._state, steps_this_run)

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
        facts = self._toolbox.facts()
        if checks.too_many_calls and versioning.caps_calls_per_reply():
            facts = dataclasses.replace(facts, max_calls=dispatch.MAX_CALLS_PER_REPLY)
        if checks.duplicate_keys and versioning.refuses_duplicate_keys():
            facts = dataclasses.replace(facts, refuses_duplicate_keys=True)
        planned = dispatch.plan_reply(calls, facts, self._loops)
        self._tool_gate.open(planned, self._state.steps)
        reply = await self._runner.run(planned)
        await self._tool_gate.judges_done()
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
                    await self._append_results(calls, reply.outcomes, record)
                    raise
                text = decision_text(decision, self._state.plan)
                reply.outcomes[plan_call.id] = Outcome.ok(plan_call, text)
                feedback = None if decision.approve else decision.comment
        await self._append_results(calls, reply.outcomes, record)
        self._tool_gate.withdraw()
        if reason := reply.fatal:
            raise AgentFatalToolError(reason, self._budget.details())
        if feedback is not None:
            self._transcript.append(UserMessage(content=feedback))
        if reply.answer is None:
            return None
        return self._result(finish_answer(reply.answer, self._input.output_schema), reply.answer)

    async def _append_results(
        self, calls: tuple[ToolCall, ...], outcomes: dict[str, Outcome], record: StepRecord
    ) -> None:
        """One result per call, in call order (each that a guardrail withheld, refused), and
        the calls' trace records."""
        withheld = await self._guardrails.results_checked([outcomes[c.id] for c in calls], record)
        for call in calls:
            outcome = withheld.get(call.id) or outcomes[call.id]
            self._transcript.append(outcome.result)
            verdict = self._tool_gate.verdict_of(call.id)
            # The judge's verdict goes with the call's record (one that came late, too).
            record.tool_calls.append(
                outcome.record
                if verdict is None
                else outcome.record.model_copy(update={"verdict": verdict})
            )
            self._reporter.call_finished(outcome)
        self._reporter.reply_done()

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
