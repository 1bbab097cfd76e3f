"""The tool-call gate: where a run's calls wait for a decision, as the loop and the handlers
see it.

A small surface over three rooms, each with one concern: this run's own calls
(call_approvals.py: open, decide, wait, remember, withdraw), auto mode's judge over them
(auto_review.py: judging, escalating, budget, late verdicts, an operator's changes), and a
sub-agent tree's waits and decisions (sub_agent_relay.py: reports to the parent, decisions
forwarded down, qualified call ids routed). The gate routes between them: a decision is
validated against whichever run the call waits in, and taken there; a call the judge reviews
waits for it before it waits for a person. What needs a decision comes from the dispatch plan;
the gate decides nothing about a call itself. Deterministic code only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from .auto_review import AutoReview
from .budget import Budget
from .call_approvals import CallApprovals
from .context import RunContext
from .decisions import AutoModeChange, JudgeVerdict, ToolApproval, ToolCallDecision
from .dispatch import PlannedCall, Run
from .events import FirstDecider
from .input_limits import check_reason, quoted_id
from .judge import Judge
from .refusals import ignored
from .reporting import Reporter
from .status import SubAgentApproval, SubAgentReport
from .sub_agent_relay import SubAgentRelay
from .transcript import ToolCall
from .unknown_signals import UnknownSignals


class ToolCallGate:
    """Per-call approval: the calls the dispatch plan marks wait for their own decision."""

    def __init__(
        self, ctx: RunContext, reporter: Reporter, budget: Budget, signals: UnknownSignals
    ):
        self._state = ctx.state
        self._reporter = reporter
        # The calls that wait are shown together, this run's and its sub-agents' (the relay's,
        # built next to them).
        self._calls = CallApprovals(
            ctx, reporter, budget, signals, relayed=lambda: self._relay.awaiting()
        )
        self._relay = SubAgentRelay(ctx, reporter, self._calls)
        self._review = AutoReview(ctx, reporter, budget, self._calls)

    def use_judge(self, judge: Judge) -> None:
        """Auto mode: calls with criteria are judged before a person is asked (judge.py)."""
        self._review.use_judge(judge)

    def asked(self, call_id: str) -> bool:
        return self._calls.request(call_id) is not None

    def awaiting(self) -> list[ToolApproval]:
        return self._calls.awaiting()

    def sub_agent_awaiting(self) -> list[SubAgentApproval]:
        """The calls this run's sub-agents wait on, with qualified call ids."""
        return self._relay.awaiting()

    def verdict_of(self, call_id: str) -> JudgeVerdict | None:
        request = self._calls.request(call_id)
        return None if request is None else request.verdict

    # --- the loop: a reply's calls ------------------------------------------------------------

    def open(self, planned: Sequence[PlannedCall], step: int) -> None:
        """Open a request for every call the plan marks, at once, before anything runs."""
        asked = 0
        for entry in planned:
            if entry.ask is None:
                continue
            call, action = entry.call, entry.action
            # Only a call the plan will run asks (dispatch._asks): its arguments are parsed.
            assert isinstance(action, Run)
            remembered = entry.ask == "remembered_denial"
            judged = not remembered and self._review.judges(call.name)
            first: FirstDecider | None = "remembered" if remembered else "judge" if judged else None
            request = self._calls.open(call, action, step, first)
            if remembered:
                self._calls.record(request, self._state.remembered[call.name], "remembered")
            elif judged:
                self._review.start(request, call, action)
            else:
                asked += 1
        if asked:
            self._calls.show_waiting()
        elif self._review.judging_now():
            self._review.show_judging()

    async def wait(self, call: ToolCall) -> str | None:
        """Wait, spending nothing, for the decision on a call (the judge's first, when it
        reviews it); None when approved, else the error result the model gets. No decision in
        time denies the call."""
        request = self._calls.request(call.id)
        assert request is not None  # only a call that asked waits
        if request.judging and (spent := await self._review.settled(request)) is not None:
            return spent
        return await self._calls.wait(request, call)

    async def judges_done(self) -> None:
        """Wait for the judge's reviews of the reply still out (auto_review.py)."""
        await self._review.done()

    def withdraw(self, call_ids: Collection[str] | None = None) -> None:
        """Requests left undecided when their calls will not run (a fatal failure, the end);
        given `call_ids`, those of these calls alone (a script's, as it ends)."""
        self._calls.withdraw(call_ids)

    # --- the handlers: decisions, an operator's changes, a sub-agent's reports ------------------

    def validate(self, decision: ToolCallDecision) -> None:
        request = self._calls.request(decision.call_id) or self._relay.call(decision.call_id)
        if request is None:
            waiting = [a.call_id for a in self._calls.waiting()]
            where = "this run or its sub-agent" if self._relay.running else "this run"
            raise ValueError(
                f"no tool call {quoted_id(decision.call_id)} asked for approval in {where} "
                f"(waiting: {', '.join(waiting) or 'none'})"
            )
        if request.status != "awaiting_approval":
            waiting = [a.call_id for a in self._calls.waiting()]
            raise ValueError(
                f"tool call {decision.call_id!r} is decided already: {request.status} "
                f"(waiting: {', '.join(waiting) or 'none'})"
            )
        # The bound comes last: a run recorded before it replays the checks above alone.
        check_reason(decision.reason)

    async def decide_or_forward(self, decision: ToolCallDecision) -> ToolApproval:
        """Apply a validated decision: on a call of this run, here; on a sub-agent's, by
        forwarding it and waiting for the sub-agent to report it taken."""
        if self.asked(decision.call_id):
            return self._calls.decide(decision)
        return await self._relay.forward(decision)

    async def decide_by_signal(self, decision: ToolCallDecision) -> None:
        if (why := ignored("tool call decision", self.validate, decision)) is not None:
            self._reporter.decision_ignored(why)
            return
        if self.asked(decision.call_id):
            self._calls.decide(decision)
            return
        try:
            await self._relay.send(decision)
        except ApplicationError as failed:
            workflow.logger.warning("tool call decision not forwarded: %s", failed.message)
            self._reporter.decision_ignored(f"not forwarded: {failed.message}")

    def validate_auto_mode_change(self, change: AutoModeChange) -> None:
        self._review.validate_change(change)

    def change_auto_mode(self, change: AutoModeChange) -> str:
        """An operator's change to auto mode, for the rest of the run (auto_review.py);
        auto_mode_forwarding.py takes it to the sub-agents."""
        return self._review.change(change)

    def take_report(self, report: SubAgentReport) -> None:
        """A sub-agent's report of its calls that started or stopped waiting (the
        sub_agent_approvals signal)."""
        self._relay.take_report(report)

    # --- the tool runner and the run: sub-agents ------------------------------------------------

    def sub_agent_started(self, call_id: str) -> None:
        """The delegate call `call_id` starts a sub-agent: its reports are taken from now."""
        self._relay.sub_agent_started(call_id)

    def sub_agent_ended(self, call_id: str) -> None:
        """The sub-agent of `call_id` ended: what it left waiting will not be asked again."""
        self._relay.sub_agent_ended(call_id)

    async def report_to_parent(self) -> None:
        """While this run is a sub-agent: tell the parent each call that starts or stops waiting
        for a person here (sub_agent_relay.py). The run's task; it ends with the run."""
        await self._relay.report_to_parent()
