"""The plan gate: in plan mode, the run waits for a person to approve or reject its plan.

The model submits a plan (`submit_plan`, dispatch.py); the gate shows it, waits for a decision
spending nothing (the wait holds no worker slot and the wall-time budget is paused) and answers
the model with what was decided. A decision comes by update or signal (handlers.py), validated
first: an update is refused with the reason, a signal logged and ignored (refusals.py). The plan
approved, the tools that change data are offered. Deterministic code only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from .budget import Budget
from .context import RunContext
from .decisions import PlanDecision, PlanState
from .errors import AgentApprovalTimeout
from .input_limits import check_comment
from .outcomes import count
from .refusals import ignored
from .reporting import Reporter, plan_markdown
from .unknown_signals import UnknownSignals


class PlanGate:
    """Plan mode: the run waits for a person to approve or reject the submitted plan."""

    def __init__(
        self, ctx: RunContext, reporter: Reporter, budget: Budget, signals: UnknownSignals
    ):
        self._state = ctx.state
        self._reporter = reporter
        self._budget = budget
        self._timeout = ctx.input.approval_timeout_seconds
        self._signals = signals
        self._decision: PlanDecision | None = None

    @property
    def approved(self) -> bool:
        return self._state.plan is not None and self._state.plan.status == "approved"

    def validate(self, decision: PlanDecision) -> None:
        plan = self._state.plan
        waiting = plan if plan and plan.status == "awaiting_approval" else None
        if waiting is None or self._decision is not None:
            raise ValueError(
                f"no plan is waiting for a decision (the run is {self._reporter.status}: "
                f"{self._reporter.details}); a plan is decided only while it waits"
            )
        if decision.version is not None and decision.version != waiting.version:
            raise ValueError(
                f"plan version {decision.version} is not the one waiting: "
                f"version {waiting.version} is"
            )
        if not decision.approve and not (decision.comment or "").strip():
            raise ValueError(
                "a rejection needs feedback for the model: send "
                f'{{"approve": false, "version": {waiting.version}, "comment": "what to change"}}'
            )
        # The bound comes last: a run recorded before it replays the checks above alone.
        check_comment(decision.comment)

    def decide(self, decision: PlanDecision) -> PlanState:
        """Apply a validated decision; answers the plan as decided."""
        assert self._state.plan is not None  # the validator saw to it
        self._decision = decision
        self._state.plan = self._state.plan.model_copy(
            update={
                "status": "approved" if decision.approve else "rejected",
                "comment": decision.comment,
            }
        )
        return self._state.plan

    def decide_by_signal(self, decision: PlanDecision) -> None:
        # A signal cannot be refused to its sender; the run's log and page say why it was ignored.
        if (why := ignored("plan decision", self.validate, decision)) is not None:
            self._reporter.decision_ignored(why)
            return
        self.decide(decision)

    async def wait(self, steps: list[str]) -> PlanDecision:
        """Wait, spending nothing, for a person to approve or reject the plan."""
        state = self._state
        version = state.plan.version + 1 if state.plan else 1
        state.plan = PlanState(version=version, steps=steps, status="awaiting_approval")
        self._decision = None
        self._reporter.publish("plan_submitted", outcome=f"v{version}", text="\n".join(steps))
        self._reporter.set_status(
            "awaiting_approval",
            f"waiting for a person to approve plan v{version} ({count(len(steps), 'step')}): "
            "signal approve_plan or reject_plan, or update decide_plan",
            markdown=plan_markdown(version, steps),
        )
        self._signals.drop_while_waiting()
        self._budget.pause(workflow.now())
        try:
            await workflow.wait_condition(
                lambda: self._decision is not None,
                timeout=timedelta(seconds=self._timeout),
                timeout_summary=f"approval of plan v{version}",
            )
        except TimeoutError:
            raise AgentApprovalTimeout(
                f"plan v{version} waited {self._timeout:g} s for a decision "
                "(approval_timeout_seconds)",
                self._budget.details(),
            ) from None
        finally:
            if workflow.in_workflow():  # not when the worker drops the run from its cache
                self._budget.resume(workflow.now())
        decision = self._decision
        assert decision is not None and state.plan is not None
        self._reporter.set_status("running", f"plan v{version} {state.plan.status}")
        self._reporter.publish("plan_decided", outcome=state.plan.status, text=decision.comment)
        return decision


def decision_text(decision: PlanDecision, plan: PlanState | None) -> str:
    """What the model reads of a person's decision on its plan: the submit_plan call's result."""
    version = plan.version if plan else "?"
    if decision.approve:
        comment = f" Their comment: {decision.comment}" if decision.comment else ""
        return (
            f"A person approved plan v{version}.{comment} Carry it out now; the tools that "
            "change data are available."
        )
    return f"A person rejected plan v{version}; their feedback follows. Plan again."
