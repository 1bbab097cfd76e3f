"""Gates: where a run waits for a person. The plan gate (plan mode) and per-call approvals.

A gate opens the requests, takes decisions from the workflow's handlers (validated first, so an
update is refused with the reason and a signal is logged and ignored), and waits for them
spending nothing: the wait holds no worker slot and the wall-time budget is paused. What needs
a decision comes from the dispatch plan; a gate decides nothing about a call itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio import workflow

from workflows.budget import Budget
from workflows.dispatch import PlannedCall
from workflows.errors import AgentApprovalTimeout
from workflows.models import (
    DecidedBy,
    PlanDecision,
    PlanState,
    ToolApproval,
    ToolCallDecision,
)
from workflows.outcomes import RECORDED_ARGUMENT_CHARS, count
from workflows.reporting import Reporter
from workflows.state import RunState
from workflows.transcript import ToolCall

DETAILS_ARGUMENT_CHARS = 200
"""Arguments quoted in the current details (the Web UI's run page), per waiting call."""


class PlanGate:
    """Plan mode: the run waits for a person to approve or reject the submitted plan."""

    def __init__(self, state: RunState, reporter: Reporter, budget: Budget, timeout: float):
        self._state = state
        self._reporter = reporter
        self._budget = budget
        self._timeout = timeout
        self._decision: PlanDecision | None = None

    @property
    def approved(self) -> bool:
        return self._state.plan is not None and self._state.plan.status == "approved"

    def validate(self, decision: PlanDecision) -> None:
        plan = self._state.plan
        waiting = plan if plan and plan.status == "awaiting_approval" else None
        if waiting is None or self._decision is not None:
            raise ValueError("no plan is waiting for a decision")
        if decision.version is not None and decision.version != waiting.version:
            raise ValueError(
                f"plan version {decision.version} is not the one waiting: "
                f"version {waiting.version} is"
            )
        if not decision.approve and not (decision.comment or "").strip():
            raise ValueError("a rejection needs feedback for the model")

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
        try:
            self.validate(decision)
        except ValueError as refused:
            # A signal cannot be refused to its sender; the run's log says why it was ignored.
            workflow.logger.warning("plan decision ignored: %s", refused)
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
        )
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
            self._budget.resume(workflow.now())
        decision = self._decision
        assert decision is not None and state.plan is not None
        self._reporter.set_status("running", f"plan v{version} {state.plan.status}")
        self._reporter.publish("plan_decided", outcome=state.plan.status, text=decision.comment)
        return decision


class ToolCallGate:
    """Per-call approval: the calls the dispatch plan marks wait for their own decision."""

    def __init__(self, state: RunState, reporter: Reporter, budget: Budget, timeout: float):
        self._state = state
        self._reporter = reporter
        self._budget = budget
        self._timeout = timeout
        self._by_call = {a.call_id: a for a in state.approvals}
        """An index of state.approvals (the same objects)."""
        self._waiting_for_people = 0

    def asked(self, call_id: str) -> bool:
        return call_id in self._by_call

    def awaiting(self) -> list[ToolApproval]:
        return [a for a in self._state.approvals if a.status == "awaiting_approval"]

    def open(self, planned: Sequence[PlannedCall], step: int) -> None:
        """Open a request for every call the plan marks, at once, before anything runs."""
        asked = 0
        for entry in planned:
            if entry.ask is None:
                continue
            call = entry.call
            request = ToolApproval(
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments[:RECORDED_ARGUMENT_CHARS],
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
            else:
                asked += 1
        if asked:
            self._reporter.set_status("awaiting_approval", self._details())

    def validate(self, decision: ToolCallDecision) -> None:
        request = self._by_call.get(decision.call_id)
        if request is None:
            waiting = ", ".join(a.call_id for a in self.awaiting()) or "none"
            raise ValueError(
                f"no tool call {decision.call_id!r} asked for approval in this run "
                f"(waiting: {waiting})"
            )
        if request.status != "awaiting_approval":
            raise ValueError(f"tool call {decision.call_id!r} is decided already: {request.status}")

    def decide(self, decision: ToolCallDecision) -> ToolApproval:
        """Apply a validated decision; answers the call's approval as decided."""
        request = self._by_call[decision.call_id]
        self._record(request, decision, "person")
        if decision.remember:
            self._state.remembered[request.tool] = decision
            for other in self.awaiting():
                if other.tool == request.tool:
                    self._record(other, decision, "remembered")
        if self.awaiting():
            self._reporter.set_status("awaiting_approval", self._details())
        else:
            self._reporter.set_status("running", f"step {self._state.steps}: tool calls decided")
        return request.model_copy()

    def decide_by_signal(self, decision: ToolCallDecision) -> None:
        try:
            self.validate(decision)
        except ValueError as refused:
            workflow.logger.warning("tool call decision ignored: %s", refused)
            return
        self.decide(decision)

    async def wait(self, call: ToolCall) -> str | None:
        """Wait, spending nothing, for the decision on a call; None when approved, else the
        error result the model gets. No decision in time denies the call."""
        request = self._by_call[call.id]
        if request.status == "awaiting_approval":
            waited = (workflow.now() - request.asked_at).total_seconds()
            self._waiting_for_people += 1
            if self._waiting_for_people == 1:
                self._budget.pause(workflow.now())
            try:
                await workflow.wait_condition(
                    lambda: request.status != "awaiting_approval",
                    timeout=timedelta(seconds=max(self._timeout - waited, 0.001)),
                    timeout_summary=f"approval of {call.name} {call.id}",
                )
            except TimeoutError:
                self._record(request, ToolCallDecision(call_id=call.id, approve=False), "timeout")
                if not self.awaiting():
                    self._reporter.set_status(
                        "running", f"step {self._state.steps}: approval timed out"
                    )
            finally:
                self._waiting_for_people -= 1
                if self._waiting_for_people == 0:
                    self._budget.resume(workflow.now())
        if request.status == "approved":
            return None
        if request.status == "timed_out":
            return (
                f"Error: no person decided on this call to {call.name} within "
                f"{self._timeout:g} s, so it was denied and did not run. Choose another way, or "
                "say in your answer that it needs a person's approval."
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
            self._reporter.publish(
                "approval_decided", call_id=request.call_id, tool=request.tool, outcome="not_run"
            )
        if withdrawn and self._reporter.status == "awaiting_approval":
            self._reporter.set_status("running", "tool calls withdrawn")

    def _record(self, request: ToolApproval, decision: ToolCallDecision, by: DecidedBy) -> None:
        request.status = (
            "approved" if decision.approve else "timed_out" if by == "timeout" else "denied"
        )
        request.reason = decision.reason
        request.decided_by = by
        self._reporter.publish(
            "approval_decided",
            call_id=request.call_id,
            tool=request.tool,
            outcome=request.status,
            text=decision.reason,
        )

    def _details(self) -> str:
        waiting = self.awaiting()
        calls = "; ".join(
            f"{a.tool} {a.arguments[:DETAILS_ARGUMENT_CHARS]} ({a.call_id})" for a in waiting
        )
        return (
            f"waiting for a person to decide {count(len(waiting), 'tool call')}: {calls}: "
            "update or signal decide_tool_call"
        )
