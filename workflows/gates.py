"""The tool-call gate: where a run's calls wait for a person (the plan gate is plan_gate.py).

A gate opens the requests, takes decisions from the workflow's handlers (validated first, so an
update is refused with the reason and a signal is logged and ignored), and waits for them
spending nothing: the wait holds no worker slot and the wall-time budget is paused. What needs
a decision comes from the dispatch plan; a gate decides nothing about a call itself.

A sub-agent's calls wait at the sub-agent's own gate. It tells its parent, by signal, which of
its calls started or stopped waiting; the parent's gate shows them (qualified by the delegate
call: `call_1_1/call_2_1`), waits on them as on its own, and forwards a decision on one to the
sub-agent by signal. Sub-agents of sub-agents go up the same way, one level at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

from . import shown_arguments
from .budget import Budget
from .context import RunContext
from .decisions import (
    ApprovalCriteria,
    AutoModeChange,
    DecidedBy,
    JudgeVerdict,
    ToolApproval,
    ToolCallDecision,
)
from .dispatch import PlannedCall, Run
from .errors import AgentError
from .input_limits import (
    check_reason,
    quoted_id,
)
from .judge import Judge, check_change, effective_rules
from .outcomes import count
from .refusals import ignored
from .reporting import (
    Explained,
    Reporter,
    calls_markdown,
    judged_markdown,
    verdict_line,
)
from .status import SUB_AGENT_APPROVALS_SIGNAL, SubAgentApproval, SubAgentReport
from .transcript import ToolCall
from .unknown_signals import UnknownSignals

DETAILS_ARGUMENT_CHARS = 80
"""Each argument's value as the current details (the Web UI's run page) quote it, per waiting
call: every field is shown, each cut on its own (shown_arguments.py)."""
DECIDE_TOOL_CALL = "decide_tool_call"
"""The update and the signal that decide a waiting call; a parent forwards the signal."""
SUB_AGENT_CONFIRM_SECONDS = 60.0
"""How long a decision forwarded to a sub-agent waits for the sub-agent to report it taken
before the update answers that it was sent but not yet taken."""


class ToolCallGate:
    """Per-call approval: the calls the dispatch plan marks wait for their own decision."""

    def __init__(
        self, ctx: RunContext, reporter: Reporter, budget: Budget, signals: UnknownSignals
    ):
        self._ctx = ctx
        self._state = ctx.state
        self._reporter = reporter
        self._budget = budget
        self._timeout = ctx.input.approval_timeout_seconds
        self._signals = signals
        self._by_call = {a.call_id: a for a in ctx.state.approvals}
        """An index of state.approvals (the same objects)."""
        self._waiting_for_people = 0
        self._sub_agents: dict[str, dict[str, SubAgentApproval]] = {}
        """Per delegate call in flight: the calls its sub-agent reported waiting, by qualified
        call id, with what became of them."""
        self._paused_for_sub_agent = False
        self._told_parent: set[str] = set()
        """The calls (qualified ids) this run, a sub-agent, last told its parent are waiting."""
        self._judge: Judge | None = None
        self._judging: dict[str, asyncio.Task[None]] = {}
        """Auto mode: the judge's review of each call it was given, by call id."""

    def use_judge(self, judge: Judge) -> None:
        """Auto mode: calls with criteria are judged before a person is asked (judge.py)."""
        self._judge = judge

    def asked(self, call_id: str) -> bool:
        return call_id in self._by_call

    def awaiting(self) -> list[ToolApproval]:
        return [a for a in self._state.approvals if a.status == "awaiting_approval"]

    def sub_agent_awaiting(self) -> list[SubAgentApproval]:
        """The calls this run's sub-agents wait on, with qualified call ids."""
        return [
            approval
            for calls in self._sub_agents.values()
            for approval in calls.values()
            if approval.status == "awaiting_approval"
        ]

    def open(self, planned: Sequence[PlannedCall], step: int) -> None:
        """Open a request for every call the plan marks, at once, before anything runs."""
        asked = 0
        for entry in planned:
            if entry.ask is None:
                continue
            call, action = entry.call, entry.action
            # Only a call the plan will run asks (dispatch._asks): its arguments are parsed.
            assert isinstance(action, Run)
            fields, left_out = shown_arguments.fields_of(action.arguments)
            request = ToolApproval(
                call_id=call.id,
                tool=call.name,
                arguments=shown_arguments.text(fields, left_out),
                fields=fields,
                fields_left_out=left_out,
                parsed_arguments=shown_arguments.parsed(action.arguments),
                step=step,
                asked_at=workflow.now(),
            )
            self._state.approvals.append(request)
            self._by_call[call.id] = request
            self._reporter.publish(
                "approval_requested", call_id=call.id, tool=call.name, arguments=request.arguments
            )
            if entry.ask == "remembered_denial":
                self._record(request, self._state.remembered[call.name], "remembered")
            elif self._judge is not None and (named := self._judge.criteria_for(call.name)):
                request.judging = True
                self._judging[call.id] = asyncio.create_task(
                    self._judged(request, call, action, named, self._judge.next_judgement())
                )
            else:
                asked += 1
        if asked:
            self._reporter.set_status(
                "awaiting_approval", self._details(), markdown=self._markdown()
            )
        elif self._judging_now():
            self._show_judging()

    def validate(self, decision: ToolCallDecision) -> None:
        request = self._by_call.get(decision.call_id) or self._sub_agent_call(decision.call_id)
        if request is None:
            waiting = [a.call_id for a in (*self.awaiting(), *self.sub_agent_awaiting())]
            where = "this run or its sub-agent" if self._sub_agents else "this run"
            raise ValueError(
                f"no tool call {quoted_id(decision.call_id)} asked for approval in {where} "
                f"(waiting: {', '.join(waiting) or 'none'})"
            )
        if request.status != "awaiting_approval":
            waiting = [a.call_id for a in (*self.awaiting(), *self.sub_agent_awaiting())]
            raise ValueError(
                f"tool call {decision.call_id!r} is decided already: {request.status} "
                f"(waiting: {', '.join(waiting) or 'none'})"
            )
        # The bound comes last: a run recorded before it replays the checks above alone.
        check_reason(decision.reason)

    def decide(self, decision: ToolCallDecision) -> ToolApproval:
        """Apply a validated decision; answers the call's approval as decided."""
        request = self._by_call[decision.call_id]
        self._record(request, decision, "person")
        if decision.remember:
            self._remember(request.tool, decision)
        if self._anything_waiting():
            self._reporter.set_status(
                "awaiting_approval", self._details(), markdown=self._markdown()
            )
        else:
            self._reporter.set_status("running", f"step {self._state.steps}: tool calls decided")
        return request.model_copy()

    async def decide_or_forward(self, decision: ToolCallDecision) -> ToolApproval:
        """Apply a validated decision: on a call of this run, here; on a sub-agent's, by
        forwarding it and waiting for the sub-agent to report it taken."""
        if decision.call_id in self._by_call:
            return self.decide(decision)
        return await self._forward(decision)

    async def decide_by_signal(self, decision: ToolCallDecision) -> None:
        if (why := ignored("tool call decision", self.validate, decision)) is not None:
            self._reporter.decision_ignored(why)
            return
        if decision.call_id in self._by_call:
            self.decide(decision)
            return
        try:
            await self._send_to_sub_agent(decision)
        except ApplicationError as failed:
            workflow.logger.warning("tool call decision not forwarded: %s", failed.message)
            self._reporter.decision_ignored(f"not forwarded: {failed.message}")

    async def wait(self, call: ToolCall) -> str | None:
        """Wait, spending nothing, for the decision on a call; None when approved, else the
        error result the model gets. No decision in time denies the call."""
        request = self._by_call[call.id]
        if request.judging:
            await workflow.wait_condition(lambda: not request.judging)
            if (spent := self._over_budget(request)) is not None:
                return spent
        if request.status == "awaiting_approval":
            waited = (workflow.now() - request.asked_at).total_seconds()
            self._signals.drop_while_waiting()
            self._people_wait(1)
            try:
                await workflow.wait_condition(
                    lambda: request.status != "awaiting_approval",
                    timeout=timedelta(seconds=max(self._timeout - waited, 0.001)),
                    timeout_summary=f"approval of {call.name} {call.id}",
                )
            except TimeoutError:
                self._record(request, ToolCallDecision(call_id=call.id, approve=False), "timeout")
                if not self._anything_waiting():
                    self._reporter.set_status(
                        "running", f"step {self._state.steps}: approval timed out"
                    )
            finally:
                if workflow.in_workflow():  # not when the worker drops the run from its cache
                    self._people_wait(-1)
        if request.status == "approved":
            return None
        if request.status == "timed_out":
            return (
                f"Error: no person decided on this call to {call.name} within "
                f"{self._timeout:g} s, so it was denied and did not run. Choose another way, or "
                "say in your answer that it needs a person's approval."
            )
        if request.decided_by == "judge":
            return (
                f"Error: the approval judge denied this call to {call.name}: {request.reason}. "
                "It did not run. Do not call it again unchanged; choose another way, or explain "
                "in your answer."
            )
        reason = f": {request.reason}" if request.reason else ""
        return (
            f"Error: a person denied this call to {call.name}{reason}. It did not run. Do not "
            "call it again unchanged; choose another way, or explain in your answer."
        )

    def withdraw(self) -> None:
        """Requests left undecided when their calls will not run (a fatal failure, the end)."""
        withdrawn = self.awaiting()
        for request in withdrawn:
            request.status = "not_run"
            request.judging = False
            self._reporter.publish(
                "approval_decided", call_id=request.call_id, tool=request.tool, outcome="not_run"
            )
        if withdrawn and self._reporter.status == "awaiting_approval":
            self._reporter.set_status("running", "tool calls withdrawn")

    # --- auto mode: the judge's calls ----------------------------------------------------------

    def verdict_of(self, call_id: str) -> JudgeVerdict | None:
        request = self._by_call.get(call_id)
        return None if request is None else request.verdict

    async def judges_done(self) -> None:
        """Wait for the judge's reviews of the reply still out: a call a person decided first
        (or an operator handed to a person) still gets its late verdict recorded, and the
        judge's tokens counted, before the step ends."""
        if not self._judging:
            return
        reviews = list(self._judging.values())
        await workflow.wait_condition(lambda: all(review.done() for review in reviews))
        self._judging.clear()
        for review in reviews:
            if not review.cancelled() and (error := review.exception()) is not None:
                raise error

    def validate_auto_mode_change(self, change: AutoModeChange) -> None:
        check_change(self._ctx.input.tool_approval.auto_mode, change)

    def change_auto_mode(self, change: AutoModeChange) -> str:
        """An operator's change, for the rest of the run (the judge reads it from the state,
        once it is built). Calls the judge is reviewing go to a person: their verdict would come
        under the rules the operator just changed. auto_mode_forwarding.py takes it to the
        sub-agents."""
        self._state.auto_mode_change = change
        handed = [a for a in self.awaiting() if a.judging]
        for request in handed:
            self._escalate(request)
        rules = effective_rules(self._ctx.input.tool_approval.auto_mode, change)
        now = "auto mode is off" if rules is None else "auto mode judges by the new rules"
        if handed:
            now += f"; {count(len(handed), 'call')} under review went to a person"
        return now

    async def _judged(
        self,
        request: ToolApproval,
        call: ToolCall,
        run: Run,
        named: tuple[str, ApprovalCriteria],
        judgement: int,
    ) -> None:
        """The judge's review of one call, and what comes of it. Runs beside the call's wait,
        so a person who decides the call first wins; the verdict is then recorded as late."""
        assert self._judge is not None
        try:
            verdict = await self._judge.review(call, run.spec, run.arguments, named, judgement)
        except Exception:
            # Not the judge's answer (review() turns every failure of its call into a verdict
            # that escalates) but a fault here: the call goes to a person all the same, and
            # judges_done raises it, failing the workflow task where it can be seen and fixed.
            if request.judging:
                self._escalate(request)
            raise
        if not request.judging:  # decided, withdrawn or handed to a person meanwhile
            verdict = verdict.model_copy(update={"outcome": "late"})
        request.verdict = verdict
        self._reporter.publish(
            "judge_verdict",
            call_id=call.id,
            tool=call.name,
            outcome=verdict.outcome,
            text=verdict.reason,
            latency_ms=verdict.latency_ms,
            usage=verdict.usage,
            confidence=verdict.confidence,
        )
        if verdict.outcome == "late":
            return
        line = verdict_line(verdict)
        if verdict.outcome == "escalated":
            self._escalate(request)
            return
        approve = verdict.outcome == "approved"
        decision = ToolCallDecision(call_id=call.id, approve=approve, reason=verdict.reason)
        self._record(request, decision, "judge")
        if self._anything_waiting():
            self._reporter.set_status(
                "awaiting_approval", self._details(), markdown=self._markdown()
            )
        else:
            self._reporter.set_status(
                "running",
                f"step {self._state.steps}: {call.name} {call.id}: {line}",
                markdown=(
                    f": {call.name} {call.id}",
                    judged_markdown(request, verdict, DETAILS_ARGUMENT_CHARS),
                ),
            )

    def _escalate(self, request: ToolApproval) -> None:
        """The call goes to a person: it waits approval_timeout_seconds from now."""
        request.judging = False
        request.asked_at = workflow.now()
        self._reporter.set_status("awaiting_approval", self._details(), markdown=self._markdown())

    def _over_budget(self, request: ToolApproval) -> str | None:
        """The judge's tokens, cost and time count against the run's limits: a call the run
        can no longer afford does not run (the next step boundary fails the run, loudly)."""
        try:
            self._budget.check_spend(workflow.now())
        except AgentError as spent:
            if request.status in ("awaiting_approval", "approved"):
                request.status = "not_run"
                self._reporter.publish(
                    "approval_decided",
                    call_id=request.call_id,
                    tool=request.tool,
                    outcome="not_run",
                    text=spent.message,
                )
            return f"Not run: {spent.message}"
        return None

    def _judging_now(self) -> list[ToolApproval]:
        return [a for a in self.awaiting() if a.judging]

    def _show_judging(self) -> None:
        reviewing = self._judging_now()
        calls = ", ".join(f"{a.tool} {a.call_id}" for a in reviewing)
        self._reporter.set_status(
            "running", f"step {self._state.steps}: auto mode's judge reviews {calls}"
        )

    # --- a sub-agent's calls, seen from its parent ------------------------------------------

    def sub_agent_started(self, call_id: str) -> None:
        """The delegate call `call_id` starts a sub-agent: its reports are taken from now."""
        self._sub_agents[call_id] = {}

    def sub_agent_ended(self, call_id: str) -> None:
        """The sub-agent of `call_id` ended: what it left waiting will not be asked again."""
        left = [
            a for a in self._sub_agents.pop(call_id, {}).values() if a.status == "awaiting_approval"
        ]
        for approval in left:
            self._reporter.publish(
                "approval_decided", call_id=approval.call_id, tool=approval.tool, outcome="not_run"
            )
        if left:
            self._sub_agent_waits_changed("the sub-agent ended")

    def take_report(self, report: SubAgentReport) -> None:
        """A sub-agent's report (the sub_agent_approvals signal): show its calls that wait,
        as this run's own would be, until they are decided."""
        if not self._ctx.behaviours.sub_agent_approvals_reach_the_parent:
            workflow.logger.warning("sub-agent report ignored: this run predates them")
            return
        prefix = f"{workflow.info().workflow_id}/"
        delegate = report.workflow_id.removeprefix(prefix)
        calls = self._sub_agents.get(delegate) if report.workflow_id.startswith(prefix) else None
        if calls is None:
            workflow.logger.warning(
                "sub-agent report ignored: %s is not a sub-agent of this run that is running",
                report.workflow_id,
            )
            return
        for reported in report.approvals:
            qualified = f"{delegate}/{reported.call_id}"
            before = calls.get(qualified)
            approval = reported.model_copy(update={"call_id": qualified})
            calls[qualified] = approval
            was_waiting = before is not None and before.status == "awaiting_approval"
            if approval.status == "awaiting_approval" and not was_waiting:
                self._reporter.publish(
                    "approval_requested",
                    call_id=qualified,
                    tool=approval.tool,
                    arguments=approval.arguments,
                )
            elif approval.status != "awaiting_approval" and was_waiting:
                self._reporter.publish(
                    "approval_decided",
                    call_id=qualified,
                    tool=approval.tool,
                    outcome=approval.status,
                    text=approval.reason,
                )
        self._sub_agent_waits_changed("the sub-agent's tool calls are decided")

    def _sub_agent_waits_changed(self, decided: str) -> None:
        """Pause the wall clock while a sub-agent waits for a person (its own is paused too),
        and say in the status what waits."""
        waiting = bool(self.sub_agent_awaiting())
        if waiting != self._paused_for_sub_agent:
            self._paused_for_sub_agent = waiting
            self._people_wait(1 if waiting else -1)
        if self._anything_waiting():
            self._reporter.set_status(
                "awaiting_approval", self._details(), markdown=self._markdown()
            )
        elif self._reporter.status == "awaiting_approval":
            self._reporter.set_status("running", f"step {self._state.steps}: {decided}")

    def _sub_agent_call(self, call_id: str) -> SubAgentApproval | None:
        for calls in self._sub_agents.values():
            if call_id in calls:
                return calls[call_id]
        return None

    def _route(self, call_id: str) -> tuple[str, str]:
        """The sub-agent's workflow id and its own id of the qualified `call_id`."""
        delegate = next(d for d, calls in self._sub_agents.items() if call_id in calls)
        return f"{workflow.info().workflow_id}/{delegate}", call_id[len(delegate) + 1 :]

    async def _send_to_sub_agent(self, decision: ToolCallDecision) -> None:
        """Signal the decision to the sub-agent that asked, by its own call id. With
        `remember`, this run remembers it too: its own later calls of the tool, and the
        sub-agents it starts later, do not ask again."""
        child_id, own_id = self._route(decision.call_id)
        asked = self._sub_agent_call(decision.call_id)
        try:
            await workflow.get_external_workflow_handle(child_id).signal(
                DECIDE_TOOL_CALL, decision.model_copy(update={"call_id": own_id})
            )
        except FailureError as error:
            raise ApplicationError(
                f"the decision on {decision.call_id!r} did not reach sub-agent {child_id}: "
                f"{error.message}",
                non_retryable=True,
            ) from None
        if decision.remember and asked is not None:
            self._remember(asked.tool, decision)

    async def _forward(self, decision: ToolCallDecision) -> SubAgentApproval:
        call_id = decision.call_id
        child_id, _ = self._route(call_id)
        await self._send_to_sub_agent(decision)

        def taken() -> bool:
            current = self._sub_agent_call(call_id)
            return current is None or current.status != "awaiting_approval"

        try:
            await workflow.wait_condition(
                taken,
                timeout=timedelta(seconds=SUB_AGENT_CONFIRM_SECONDS),
                timeout_summary=f"sub-agent takes the decision on {call_id}",
            )
        except TimeoutError:
            raise ApplicationError(
                f"the decision on {call_id!r} was sent to sub-agent {child_id}, which has not "
                f"taken it within {SUB_AGENT_CONFIRM_SECONDS:g} s; it takes it when it runs",
                non_retryable=True,
            ) from None
        current = self._sub_agent_call(call_id)
        if current is None:
            raise ApplicationError(
                f"sub-agent {child_id} ended before it took the decision on {call_id!r}",
                non_retryable=True,
            )
        if current.status != ("approved" if decision.approve else "denied"):
            raise ApplicationError(
                f"tool call {call_id!r} is decided already: {current.status}", non_retryable=True
            )
        return current.model_copy()

    # --- this run's calls, told to its parent when it is a sub-agent -------------------------

    async def report_to_parent(self) -> None:
        """While this run is a sub-agent: tell the parent, by signal, each call that starts or
        stops waiting for a person here (its own sub-agents' included). One signal at a time, in
        order, so the parent sees every change in the order it happened."""
        parent = workflow.info().parent
        me = workflow.info().workflow_id
        if parent is None or not me.startswith(f"{parent.workflow_id}/"):
            return  # not a delegate's sub-agent (an app's workflow may start runs as children)
        handle = workflow.get_external_workflow_handle(parent.workflow_id)
        while True:
            await workflow.wait_condition(lambda: bool(self._untold()))
            changes = self._untold()
            self._told_parent = {a.call_id for a in self._waiting_here(me)}
            try:
                await handle.signal(
                    SUB_AGENT_APPROVALS_SIGNAL, SubAgentReport(workflow_id=me, approvals=changes)
                )
            except FailureError as error:  # the parent is gone; its close policy ends this run
                workflow.logger.warning("parent %s not told: %s", parent.workflow_id, error)
                return

    def _waiting_here(self, me: str) -> list[SubAgentApproval]:
        # A call auto mode's judge still reviews is not asked of anyone yet: the parent hears of
        # it if the judge hands it to a person.
        own = [_asked_by(me, a) for a in self.awaiting() if not a.judging]
        return [*own, *self.sub_agent_awaiting()]

    def _untold(self) -> list[SubAgentApproval]:
        """What the parent has not heard: calls that now wait, and calls it was told wait
        that no longer do, as they are now."""
        me = workflow.info().workflow_id
        waiting = self._waiting_here(me)
        waiting_ids = {a.call_id for a in waiting}
        started = [a for a in waiting if a.call_id not in self._told_parent]
        stopped = [self._now_of(call_id, me) for call_id in self._told_parent - waiting_ids]
        return [*started, *sorted(stopped, key=lambda a: a.call_id)]

    def _now_of(self, call_id: str, me: str) -> SubAgentApproval:
        if (own := self._by_call.get(call_id)) is not None:
            return _asked_by(me, own)
        if (sub := self._sub_agent_call(call_id)) is not None:
            return sub
        # Its sub-agent ended with it undecided, and this run forgot it.
        return SubAgentApproval(
            call_id=call_id,
            tool="?",
            arguments="",
            step=self._state.steps,
            status="not_run",
            asked_at=workflow.now(),
            workflow_id=me,
        )

    # --- shared ------------------------------------------------------------------------------

    def _remember(self, tool: str, decision: ToolCallDecision) -> None:
        """The decision holds for the tool's later calls in this run, and for those waiting."""
        self._state.remembered[tool] = decision
        for other in self.awaiting():
            if other.tool == tool:
                self._record(other, decision, "remembered")

    def _anything_waiting(self) -> bool:
        """Whether a call waits for a person (not those the judge still reviews)."""
        return any(not a.judging for a in (*self.awaiting(), *self.sub_agent_awaiting()))

    def _people_wait(self, change: int) -> None:
        """Count who waits for a person; the wall clock stops while anyone does."""
        self._waiting_for_people += change
        if change > 0 and self._waiting_for_people == 1:
            self._budget.pause(workflow.now())
        elif change < 0 and self._waiting_for_people == 0:
            self._budget.resume(workflow.now())

    def _record(self, request: ToolApproval, decision: ToolCallDecision, by: DecidedBy) -> None:
        request.status = (
            "approved" if decision.approve else "timed_out" if by == "timeout" else "denied"
        )
        request.reason = decision.reason
        request.decided_by = by
        request.judging = False
        self._reporter.publish(
            "approval_decided",
            call_id=request.call_id,
            tool=request.tool,
            outcome=request.status,
            text=decision.reason,
        )

    def _markdown(self) -> Explained:
        waiting = [
            (a, isinstance(a, SubAgentApproval))
            for a in (*self.awaiting(), *self.sub_agent_awaiting())
        ]
        return calls_markdown(waiting, DETAILS_ARGUMENT_CHARS)

    def _details(self) -> str:
        waiting = [*self.awaiting(), *self.sub_agent_awaiting()]
        calls = "; ".join(
            f"{a.tool} {_line(a)} ({a.call_id}"
            + (", a sub-agent's" if isinstance(a, SubAgentApproval) else "")
            + (", the judge reviews it" if a.judging else "")
            + (f", {verdict_line(a.verdict)}" if a.verdict is not None else "")
            + ")"
            for a in waiting
        )
        return (
            f"waiting for a person to decide {count(len(waiting), 'tool call')}: {calls}: "
            "update or signal decide_tool_call"
        )


def _line(approval: ToolApproval) -> str:
    warning, arguments = shown_arguments.of_approval(approval, DETAILS_ARGUMENT_CHARS)
    return arguments if warning is None else f"{warning}: {arguments}"


def _asked_by(workflow_id: str, approval: ToolApproval) -> SubAgentApproval:
    """A call of this run, as its parent is told of it."""
    return SubAgentApproval(**approval.model_dump(), workflow_id=workflow_id)
