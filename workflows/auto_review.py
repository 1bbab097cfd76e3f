"""Auto mode over this run's calls: the judge reviews a gated call before a person is asked.

A call whose tool has criteria (the run's auto mode, or an operator's change to it) goes to the
judge (judge.py) as its request opens, in a task of its own beside the call's wait: a verdict
that approves or denies decides the call, one that escalates hands it to a person, who may
decide it first all the same (the verdict then comes late, and is recorded and ignored). What
the judge spends counts against the run's limits: a call the run can no longer afford does not
run. An operator's change holds for the rest of the run, and hands the calls under review to a
person. Deterministic code only.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

from .budget import Budget
from .call_approvals import DETAILS_ARGUMENT_CHARS, CallApprovals
from .context import RunContext
from .decisions import ApprovalCriteria, AutoModeChange, ToolApproval, ToolCallDecision
from .dispatch import Run
from .errors import AgentError
from .judge import Judge, check_change, effective_rules
from .outcomes import count
from .reporting import Reporter, judged_markdown, verdict_line
from .transcript import ToolCall


class AutoReview:
    """The judge's reviews of this run's calls, by call id, and what their verdicts decide."""

    def __init__(
        self, ctx: RunContext, reporter: Reporter, budget: Budget, calls: CallApprovals
    ) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._reporter = reporter
        self._budget = budget
        self._calls = calls
        self._judge: Judge | None = None
        self._judging: dict[str, asyncio.Task[None]] = {}
        """The judge's review of each call it was given, by call id."""

    def use_judge(self, judge: Judge) -> None:
        """Calls with criteria are judged before a person is asked (judge.py)."""
        self._judge = judge

    def judges(self, tool: str) -> bool:
        """Whether a call of `tool` that asks goes to the judge first (`start`)."""
        return self._judge is not None and self._judge.criteria_for(tool) is not None

    def start(self, request: ToolApproval, call: ToolCall, run: Run) -> None:
        """Hand a call just asked to the judge: one whose tool has criteria (`judges`)."""
        named = self._judge.criteria_for(call.name) if self._judge is not None else None
        assert self._judge is not None and named is not None, "a call the judge does not review"
        request.judging = True
        self._judging[call.id] = asyncio.create_task(
            self._judged(request, call, run, named, self._judge.next_judgement())
        )

    async def settled(self, request: ToolApproval) -> str | None:
        """Wait for the judge to be done with a call it reviews; the error result the model
        gets when the run can no longer afford the call."""
        await workflow.wait_condition(lambda: not request.judging)
        return self._over_budget(request)

    def judging_now(self) -> list[ToolApproval]:
        return [a for a in self._calls.awaiting() if a.judging]

    def show_judging(self) -> None:
        reviewing = self.judging_now()
        calls = ", ".join(f"{a.tool} {a.call_id}" for a in reviewing)
        self._reporter.set_status(
            "running", f"step {self._state.steps}: auto mode's judge reviews {calls}"
        )

    async def done(self) -> None:
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

    def validate_change(self, change: AutoModeChange) -> None:
        check_change(self._ctx.input.tool_approval.auto_mode, change)

    def change(self, change: AutoModeChange) -> str:
        """An operator's change, for the rest of the run (the judge reads it from the state,
        once it is built). Calls the judge is reviewing go to a person: their verdict would come
        under the rules the operator just changed. auto_mode_forwarding.py takes it to the
        sub-agents."""
        self._state.auto_mode_change = change
        handed = self.judging_now()
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
            # done() raises it, failing the workflow task where it can be seen and fixed.
            if request.judging:
                self._escalate(request)
            raise
        if not request.judging:  # decided, withdrawn or handed to a person meanwhile
            verdict = verdict.model_copy(update={"outcome": "late"})
        request.verdict = verdict
        self._reporter.decided(request, verdict=verdict)
        if verdict.outcome == "late":
            return
        line = verdict_line(verdict)
        if verdict.outcome == "escalated":
            self._escalate(request)
            return
        approve = verdict.outcome == "approved"
        decision = ToolCallDecision(call_id=call.id, approve=approve, reason=verdict.reason)
        self._calls.record(request, decision, "judge")
        if self._calls.anything_waiting():
            self._calls.show_waiting()
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
        self._calls.show_waiting()

    def _over_budget(self, request: ToolApproval) -> str | None:
        """The judge's tokens, cost and time count against the run's limits: a call the run
        can no longer afford does not run (the next step boundary fails the run, loudly)."""
        try:
            self._budget.check_spend(workflow.now())
        except AgentError as spent:
            if request.status in ("awaiting_approval", "approved"):
                request.status = "not_run"
                self._reporter.decided(request, text=spent.message)
            return f"Not run: {spent.message}"
        return None
