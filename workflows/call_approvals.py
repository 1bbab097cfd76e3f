"""This run's own calls that wait for a decision: opened, decided, waited on, remembered and
withdrawn.

What needs a decision comes from the dispatch plan; this room decides nothing about a call
itself. A request is opened for each call the plan marks, at once, before anything runs, and
kept in the run's state (`state.approvals`); a decision, validated first (tool_call_gate.py), is
recorded on it, by a person, a remembered decision, the timeout or auto mode's judge. A wait
spends nothing: it holds no worker slot, and the wall-time budget is paused while anyone waits
for a person. The run's status lists every call that waits, this run's and those its sub-agents
relay (sub_agent_relay.py), which this room is given to show. Deterministic code only.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import timedelta

from temporalio import workflow

from . import shown_arguments
from .budget import Budget
from .context import RunContext
from .decisions import DecidedBy, ToolApproval, ToolCallDecision
from .dispatch import Run
from .events import FirstDecider
from .outcomes import count
from .reporting import Explained, Reporter, calls_markdown, verdict_line
from .status import SubAgentApproval
from .transcript import ToolCall
from .unknown_signals import UnknownSignals

DETAILS_ARGUMENT_CHARS = 80
"""Each argument's value as the current details (the Web UI's run page) quote it, per waiting
call: every field is shown, each cut on its own (shown_arguments.py)."""


class CallApprovals:
    """The requests of this run's calls, and who waits for a person."""

    def __init__(
        self,
        ctx: RunContext,
        reporter: Reporter,
        budget: Budget,
        signals: UnknownSignals,
        relayed: Callable[[], list[SubAgentApproval]],
    ):
        self._state = ctx.state
        self._reporter = reporter
        self._budget = budget
        self._timeout = ctx.input.approval_timeout_seconds
        self._signals = signals
        self._relayed = relayed
        """The calls this run's sub-agents wait on, shown with this run's own."""
        self._by_call = {a.call_id: a for a in ctx.state.approvals}
        """An index of state.approvals (the same objects)."""
        self._waiting_for_people = 0

    def request(self, call_id: str) -> ToolApproval | None:
        return self._by_call.get(call_id)

    def awaiting(self) -> list[ToolApproval]:
        return [a for a in self._state.approvals if a.status == "awaiting_approval"]

    def waiting(self) -> list[ToolApproval]:
        """Every call that waits, this run's and its sub-agents'."""
        return [*self.awaiting(), *self._relayed()]

    def open(
        self, call: ToolCall, action: Run, step: int, first: FirstDecider | None = None
    ) -> ToolApproval:
        """The request of one call the plan marks (its arguments parsed: only a call the plan
        will run asks), published as asked, of a person or `first` of another."""
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
            script=self._reporter.scripts.get(call.id),
        )
        self._state.approvals.append(request)
        self._by_call[call.id] = request
        self._reporter.asked(request, first)
        return request

    def decide(self, decision: ToolCallDecision) -> ToolApproval:
        """Apply a validated decision; answers the call's approval as decided."""
        request = self._by_call[decision.call_id]
        self.record(request, decision, "person")
        if decision.remember:
            self.remember(request.tool, decision)
        if self.anything_waiting():
            self.show_waiting()
        else:
            self._reporter.set_status("running", f"step {self._state.steps}: tool calls decided")
        return request.model_copy()

    async def wait(self, request: ToolApproval, call: ToolCall) -> str | None:
        """Wait, spending nothing, for a person's decision on a call that waits for one; None
        when approved, else the error result the model gets. No decision in time denies it."""
        if request.status == "awaiting_approval":
            waited = (workflow.now() - request.asked_at).total_seconds()
            self._signals.drop_while_waiting()
            self.people_wait(1)
            try:
                await workflow.wait_condition(
                    lambda: request.status != "awaiting_approval",
                    timeout=timedelta(seconds=max(self._timeout - waited, 0.001)),
                    timeout_summary=f"approval of {call.name} {call.id}",
                )
            except TimeoutError:
                self.record(request, ToolCallDecision(call_id=call.id, approve=False), "timeout")
                if not self.anything_waiting():
                    self._reporter.set_status(
                        "running", f"step {self._state.steps}: approval timed out"
                    )
            finally:
                if workflow.in_workflow():  # not when the worker drops the run from its cache
                    self.people_wait(-1)
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

    def withdraw(self, call_ids: Collection[str] | None = None) -> None:
        """Requests left undecided when their calls will not run (a fatal failure, the end);
        given `call_ids`, those of these calls alone (a script's, as it ends)."""
        withdrawn = self.awaiting()
        if call_ids is not None:
            withdrawn = [a for a in withdrawn if a.call_id in call_ids]
        for request in withdrawn:
            request.status = "not_run"
            request.judging = False
            self._reporter.decided(request)
        if not withdrawn or self._reporter.status != "awaiting_approval":
            return
        if call_ids is not None and self.anything_waiting():
            self.show_waiting()  # others wait still (a later call of the reply)
        else:
            self._reporter.set_status("running", "tool calls withdrawn")

    def record(self, request: ToolApproval, decision: ToolCallDecision, by: DecidedBy) -> None:
        request.status = (
            "approved" if decision.approve else "timed_out" if by == "timeout" else "denied"
        )
        request.reason = decision.reason
        request.decided_by = by
        request.judging = False
        self._reporter.decided(request, text=decision.reason)

    def remember(self, tool: str, decision: ToolCallDecision) -> None:
        """The decision holds for the tool's later calls in this run, and for those waiting."""
        self._state.remembered[tool] = decision
        for other in self.awaiting():
            if other.tool == tool:
                self.record(other, decision, "remembered")

    def people_wait(self, change: int) -> None:
        """Count who waits for a person; the wall clock stops while anyone does."""
        self._waiting_for_people += change
        if change > 0 and self._waiting_for_people == 1:
            self._budget.pause(workflow.now())
        elif change < 0 and self._waiting_for_people == 0:
            self._budget.resume(workflow.now())

    def anything_waiting(self) -> bool:
        """Whether a call waits for a person (not those the judge still reviews)."""
        return any(not a.judging for a in self.waiting())

    def show_waiting(self) -> None:
        """The run's status: waiting for a person, with every call that waits."""
        self._reporter.set_status("awaiting_approval", self._details(), markdown=self._markdown())

    def _markdown(self) -> Explained:
        waiting = [(a, isinstance(a, SubAgentApproval)) for a in self.waiting()]
        return calls_markdown(waiting, DETAILS_ARGUMENT_CHARS)

    def _details(self) -> str:
        waiting = self.waiting()
        calls = "; ".join(
            f"{a.tool} {_line(a)} ({a.call_id}"
            + (", a sub-agent's" if isinstance(a, SubAgentApproval) else "")
            + (f", in the script of run_code call {a.script}" if a.script else "")
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
