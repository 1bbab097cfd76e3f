"""The tool runner: the only place that starts tool activities, and sub-agents (sub_agents.py).

It carries out a reply's dispatch plan. Read-only calls run concurrently; a side-effecting call
runs alone, after everything the model asked for before it and before everything after it.
That ordering is the only difference between them: every call goes through one path, with the
same approval wait, error, timeout and cancellation handling. One failure never cancels the
others; a fatal one leaves the calls after it not run. One activity per call, named after the
tool, with the tool's own timeout and retries and what is left of the run's wall time as its
deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from . import versioning
from .activity_io import ToolActivityInput, ToolActivityResult
from .auto_mode_forwarding import AutoModeForwarding
from .budget import Budget
from .builtin_tools import DELEGATE, READ_RESULT
from .callbacks import CallbackGate
from .code_mode import CodeRunner
from .context import RunContext
from .dispatch import (
    AFTER_FINISH,
    Finish,
    PlannedCall,
    Refuse,
    Run,
    RunFacts,
    SubmitPlan,
)
from .elapsed import ms_since
from .errors import (
    FATAL_ERROR_TYPES,
    activity_failure_cause,
    failure_type,
)
from .interruption import NOT_RUN, Interruption, cancelled_text
from .loop_detection import LoopDetector
from .model_gateway import ModelGateway
from .outcomes import MAY_HAVE_TAKEN_EFFECT, Outcome
from .reporting import Reporter
from .saga import Saga
from .script_tools import RUN_CODE
from .specs import ToolSpec
from .state import AppliedEffect, CompensationInput, ToolCallRecord
from .sub_agents import SubAgents
from .tool_call_gate import ToolCallGate
from .transcript import ToolCall

ANSWER_RECORDED = "Answer recorded; the run ends here."
AFTER_A_REFUSED_FINISH = (
    "Not run: it came after finish, which was not taken (see its result). Call it again if you "
    "still need it."
)
MAX_CALLS_IN_FLIGHT = 32
"""A reply's calls that run at once; the rest start as these finish, in call order. Temporal
refuses a workflow task that would leave a run with more than 2,000 activities pending, and a
worker runs 100 activities at a time by default: a reply's fan-out stays well under both, and
leaves room for the other runs on the worker."""
SUMMARY_CHARS = 120
"""An activity's summary in the Web UI: the tool and its arguments, cut to this."""


@dataclass
class ReplyOutcome:
    """What came of one reply's calls, before the transcript gets their results."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    answer: dict[str, Any] | None = None
    """finish's arguments, when it was accepted."""
    plan: tuple[ToolCall, list[str]] | None = None
    """The submit_plan call and its steps, for the plan gate."""

    @property
    def fatal(self) -> str | None:
        return next((o.fatal for o in self.outcomes.values() if o.fatal), None)


def not_run_because(call: ToolCall, reason: str) -> Outcome:
    return Outcome.not_run(call, f"Not run: the run is ending because {reason}")


class ToolRunner:
    def __init__(
        self,
        ctx: RunContext,
        budget: Budget,
        gate: ToolCallGate,
        auto_mode: AutoModeForwarding,
        callbacks: CallbackGate,
        gateway: ModelGateway,
        saga: Saga,
        reporter: Reporter,
        tools: Mapping[str, ToolSpec],
        interruption: Interruption | None,
    ) -> None:
        self._ctx = ctx
        self._input = ctx.input
        self._state = ctx.state
        self._behaviours = ctx.behaviours
        self._budget = budget
        self._gate = gate
        self._callbacks = callbacks
        self._gateway = gateway
        self._saga = saga
        self._reporter = reporter
        self.tools = tools
        """The run's own tools, by name (filled when the run resolves them, before any call)."""
        self._sub_agents = SubAgents(ctx, budget, gate, auto_mode, saga, tools)
        self.interruption = interruption
        """A conversation's: an interrupt stops the calls that may stop (interruption.py)."""
        self.code: CodeRunner | None = None
        """Code mode's: runs a run_code call's script, whose calls come back here as batches."""

    def use_code_mode(self, facts: Callable[[], RunFacts], loops: LoopDetector) -> None:
        """In code mode: run_code's scripts, planned against `facts` as a reply is."""
        if self._ctx.input.code_mode is not None:
            self.code = CodeRunner(
                self._ctx, self._budget, self._gate, self._reporter, self.tools, facts, loops
            )
            self.code.run_batch = self.run
            self.code.interrupted = self._interrupted

    def _interrupted(self) -> bool:
        return self.interruption is not None and self.interruption.requested

    async def run(self, planned: list[PlannedCall]) -> ReplyOutcome:
        """Carry out a reply's plan, in its order; every call gets an outcome."""
        reply = ReplyOutcome()
        batch: list[tuple[ToolCall, Run]] = []

        async def run_batch() -> None:
            slots = None
            if len(batch) > MAX_CALLS_IN_FLIGHT and versioning.bounds_calls_in_flight():
                slots = asyncio.Semaphore(MAX_CALLS_IN_FLIGHT)
            if self.interruption is not None:
                done = await self.interruption.run_calls(
                    [
                        (call, self._run_one(call, run, slots), run.spec.side_effects)
                        for call, run in batch
                    ]
                )
            else:
                done = await asyncio.gather(
                    *(self._run_one(call, run, slots) for call, run in batch)
                )
            reply.outcomes.update({c.id: o for (c, _), o in zip(batch, done, strict=True)})
            batch.clear()

        finish_refused = False

        for entry in planned:
            call = entry.call
            if self._interrupted():
                reply.outcomes[call.id] = Outcome.not_run(call, NOT_RUN)
                continue
            if reason := reply.fatal:
                reply.outcomes[call.id] = not_run_because(call, reason)
                continue
            match entry.action:
                case Refuse(outcome):
                    if finish_refused and outcome.result.content == AFTER_FINISH:
                        outcome = Outcome.not_run(call, AFTER_A_REFUSED_FINISH)
                    reply.outcomes[call.id] = outcome
                case Finish(arguments):
                    await run_batch()  # what came before the answer has its outcome first
                    failed = [o.record for o in reply.outcomes.values() if o.record.outcome != "ok"]
                    if failed and versioning.refuses_finish_after_a_failure():
                        finish_refused = True
                        reply.outcomes[call.id] = Outcome.error(call, _finish_refused(failed))
                    else:
                        reply.answer = arguments
                        reply.outcomes[call.id] = Outcome.ok(call, ANSWER_RECORDED)
                case SubmitPlan(steps):
                    reply.plan = (call, steps)
                case Run(spec) as run if spec.side_effects:
                    await run_batch()
                    if reason := reply.fatal:
                        reply.outcomes[call.id] = not_run_because(call, reason)
                        continue
                    if self._interrupted():
                        reply.outcomes[call.id] = Outcome.not_run(call, NOT_RUN)
                        continue
                    if self._behaviours.cancels_end_the_run:
                        batch.append((call, run))
                        await run_batch()
                    else:
                        # Older runs awaited it alone, taking a cancel as its failure.
                        reply.outcomes[call.id] = await self._run_one(call, run)
                case Run() as run:
                    batch.append((call, run))
        await run_batch()
        return reply

    async def _run_one(
        self, call: ToolCall, run: Run, slots: asyncio.Semaphore | None = None
    ) -> Outcome:
        """One call: its approval (when it asked one), then its activity (once one of `slots`
        is free, when the batch has them), reported as it goes."""
        if self._gate.asked(call.id):
            denial = await self._gate.wait(call)
            if denial is not None:
                return Outcome.denied(call, denial)
        async with slots or contextlib.nullcontext():
            if self.interruption is not None:
                self.interruption.started(call.id)
            self._reporter.publish(
                "tool_call_started",
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments[:1000],
            )
            if run.spec.name == DELEGATE:
                outcome = await self._sub_agents.delegate(call, run.arguments)
            elif run.spec.name == RUN_CODE and self.code is not None:
                outcome = await self.code.run(call, run.arguments)
            elif run.spec.callback:
                outcome = await self._answered(call, run)
            else:
                outcome = await self._execute(call, run)
        # Before the reply's results are checked (agent.py `_append_results`).
        self._reporter.call_finished(outcome, checks_follow=True)
        return outcome

    async def _answered(self, call: ToolCall, run: Run) -> Outcome:
        """A callback tool's call, answered by a client (callbacks.py); a side-effecting one's
        answer is logged for its compensation, as an activity's result is."""
        outcome, answer = await self._callbacks.wait(call, run.spec, run.arguments)
        if run.spec.side_effects and outcome.record.outcome == "ok":
            self._log_effect(call, run, _idempotency_key(call), result=answer)
        return outcome

    async def _execute(self, call: ToolCall, run: Run) -> Outcome:
        spec = run.spec
        behaviours = self._behaviours
        if (
            spec.side_effects
            and (full := self._saga.full())
            and versioning.refuses_past_a_full_log()
        ):
            return Outcome.error(
                call,
                f"Error: {spec.name} was not run: {full}. Finish with what is done, and say "
                "what is left to do.",
            )
        started = workflow.now()
        idempotency_key = _idempotency_key(call)
        tool_input = ToolActivityInput(
            tool_call_id=call.id,
            arguments=run.arguments,
            idempotency_key=idempotency_key,
            max_result_chars=spec.max_result_chars,
            externalise=self._input.externalise_results and spec.name != READ_RESULT,
            store_content=self._input.linear_history,
            step=self._state.steps,
        )
        try:
            if spec.local and not spec.side_effects and behaviours.local_tools:
                output = await workflow.execute_local_activity(
                    spec.name,
                    tool_input,
                    result_type=ToolActivityResult,
                    start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
                    schedule_to_close_timeout=self._budget.deadline(workflow.now()),
                    retry_policy=spec.retry.to_policy(FATAL_ERROR_TYPES),
                    summary=_call_summary(call, self._reporter.scripts.get(call.id)),
                )
            else:
                output = await workflow.execute_activity(
                    spec.name,
                    tool_input,
                    result_type=ToolActivityResult,
                    start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
                    schedule_to_close_timeout=self._budget.deadline(workflow.now()),
                    retry_policy=spec.retry.to_policy(FATAL_ERROR_TYPES),
                    heartbeat_timeout=self._input.heartbeat_timeout,
                    summary=_call_summary(call, self._reporter.scripts.get(call.id)),
                    # A call that changes data is never abandoned: on a cancel the run waits for
                    # it to finish or to acknowledge the cancel, so its outcome is known (or
                    # known to be unknown) before anything is undone.
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                    if spec.side_effects and behaviours.cancels_end_the_run
                    else workflow.ActivityCancellationType.TRY_CANCEL,
                )
        except asyncio.CancelledError:
            # A cancel that arrives in the same workflow task as the call's completion: the SDK
            # raises the cancel and drops the result. The effect may be in place: log it as
            # outcome unknown, so the undo finds it by its key.
            if spec.side_effects and behaviours.records_unknown_outcomes:
                self._log_effect(call, run, idempotency_key, unknown=True)
            raise
        except (ActivityError, ApplicationError) as error:
            cause = activity_failure_cause(error)
            latency = ms_since(started)
            attempts = _attempts_made(error, spec)
            content = self._failure_text(spec, cause)
            if spec.side_effects and behaviours.records_unknown_outcomes:
                # Cancelled, timed out or failed after it started: it may have taken effect.
                self._log_effect(call, run, idempotency_key, unknown=True)
                content = content.rstrip(".") + f". {MAY_HAVE_TAKEN_EFFECT}"
            fatal = None
            if isinstance(cause, ApplicationError) and cause.type in FATAL_ERROR_TYPES:
                fatal = f"{spec.name} failed fatally: {cause.message}"
            return Outcome.error(call, content, latency_ms=latency, attempts=attempts, fatal=fatal)
        self._state.externalised = self._state.externalised or output.externalised_ref is not None
        if output.content_ref is not None:
            self._gateway.keep_reference(output.content_ref)
        if spec.side_effects and not output.is_error:
            self._log_effect(
                call, run, idempotency_key, result=output.value, result_kept=output.value_kept
            )
        elif (
            spec.side_effects
            and output.outcome_unknown
            and behaviours.records_unknown_outcomes
            and versioning.undoes_errors_after_effects()
        ):
            # It failed after it started, with no ToolError's promise that nothing changed:
            # the effect may be in place, so the undo looks for it by its key.
            self._log_effect(call, run, idempotency_key, unknown=True)
        make = Outcome.error if output.is_error else Outcome.ok
        return make(
            call,
            output.content,
            latency_ms=ms_since(started),
            attempts=output.attempt,
            truncated=output.omitted_chars > 0,
            externalised=output.externalised_ref is not None,
        )

    def _log_effect(
        self,
        call: ToolCall,
        run: Run,
        idempotency_key: str,
        *,
        result: Any = None,
        result_kept: bool = True,
        unknown: bool = False,
    ) -> None:
        """Enter a side effect in the saga's log: one that succeeded, with its result, or one
        whose outcome is unknown (`unknown`, no result), which the undo finds by its key."""
        self._saga.record(
            AppliedEffect(
                call=CompensationInput(
                    tool=run.spec.name,
                    tool_call_id=call.id,
                    arguments=run.arguments,
                    result=result,
                    idempotency_key=idempotency_key,
                    outcome_unknown=unknown,
                    result_kept=result_kept,
                ),
                compensation=run.spec.compensation,
                outcome_unknown=unknown,
            )
        )

    def _failure_text(self, spec: ToolSpec, cause: BaseException | None) -> str:
        """What the model is told of a failed call: the truth, without the error's message."""
        if isinstance(cause, ApplicationError) and cause.type in FATAL_ERROR_TYPES:
            return f"Error: {spec.name} failed: {cause.type}"
        if isinstance(cause, TimeoutError):
            limit = self._input.limits.max_wall_seconds
            if cause.type == TimeoutType.SCHEDULE_TO_CLOSE and limit is not None:
                return (
                    f"Error: {spec.name} was stopped: the run's time budget "
                    f"(max_wall_seconds={limit:g}) ran out while it ran."
                )
            return f"Error: {spec.name} timed out (limit {spec.timeout_seconds:g} s a try)."
        if isinstance(cause, CancelledError):
            if self._interrupted():
                return cancelled_text(spec.name)
            return f"Error: {spec.name} was cancelled: the run was cancelled while it ran."
        return f"Error: {spec.name} failed: {failure_type(cause)}"


_FAILED_AS = {
    "error": "failed",
    "denied": "was denied",
    "not_run": "did not run",
    "loop_detected": "was refused as a loop",
    "refused": "was refused",
}


def _finish_refused(failed: list[ToolCallRecord]) -> str:
    outcomes = "; ".join(
        f"{record.name} ({record.id}) {_FAILED_AS.get(record.outcome, record.outcome)}"
        for record in failed[:10]
    )
    more = f"; and {len(failed) - 10} more" if len(failed) > 10 else ""
    return (
        "Error: finish was not taken, because calls before it in this reply did not succeed: "
        f"{outcomes}{more}. Their results say why. Answer again with those outcomes in view; "
        "do not say they succeeded."
    )


def _attempts_made(error: ActivityError | ApplicationError, spec: ToolSpec) -> int:
    """Attempts of a failed activity: all of them when its retries ran out, else at least one."""
    if (
        isinstance(error, ActivityError)
        and error.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED
    ):
        return spec.retry.maximum_attempts
    return 1


def _idempotency_key(call: ToolCall) -> str:
    """The call's key: the same on every retry, never the same for two calls. The first run id
    tells apart two runs that reuse one workflow id; call ids are unique within a run (see
    dispatch.with_unique_call_ids)."""
    info = workflow.info()
    return f"{info.workflow_id}/{info.first_execution_run_id}/{call.id}"


def _call_summary(call: ToolCall, script: str | None = None) -> str:
    # A script's call names its script first (the Web UI lists activities by their summary).
    summary = f"{call.name} {call.arguments}"
    summary = summary if script is None else f"{script}: {summary}"
    return summary if len(summary) <= SUMMARY_CHARS else summary[: SUMMARY_CHARS - 3] + "..."
