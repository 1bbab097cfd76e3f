"""The relay of a sub-agent tree's waits and decisions, one level at a time.

A sub-agent's calls wait at the sub-agent's own gate. It tells its parent, by signal, which of
its calls started or stopped waiting for a person (`report_to_parent`); the parent shows them,
qualified by the delegate call that started the sub-agent (`call_1_1/call_2_1`), waits on them
as on its own (its wall clock paused while one waits), and forwards a decision on one to the
sub-agent by signal, under the sub-agent's own call id. Sub-agents of sub-agents go up the same
way: each run reports its sub-agents' waits with its own. Deterministic code only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

from .call_approvals import CallApprovals
from .context import RunContext
from .decisions import ToolApproval, ToolCallDecision
from .reporting import Reporter
from .status import SUB_AGENT_APPROVALS_SIGNAL, SubAgentApproval, SubAgentReport

DECIDE_TOOL_CALL = "decide_tool_call"
"""The update and the signal that decide a waiting call; a parent forwards the signal."""
SUB_AGENT_CONFIRM_SECONDS = 60.0
"""How long a decision forwarded to a sub-agent waits for the sub-agent to report it taken
before the update answers that it was sent but not yet taken."""


class SubAgentRelay:
    """Seen from a parent, its sub-agents' waiting calls; seen from a sub-agent, its parent."""

    def __init__(self, ctx: RunContext, reporter: Reporter, calls: CallApprovals) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._reporter = reporter
        self._calls = calls
        self._sub_agents: dict[str, dict[str, SubAgentApproval]] = {}
        """Per delegate call in flight: the calls its sub-agent reported waiting, by qualified
        call id, with what became of them."""
        self._paused_for_sub_agent = False
        self._told_parent: set[str] = set()
        """The calls (qualified ids) this run, a sub-agent, last told its parent are waiting."""

    @property
    def running(self) -> bool:
        """Whether a sub-agent of this run runs now."""
        return bool(self._sub_agents)

    def awaiting(self) -> list[SubAgentApproval]:
        """The calls this run's sub-agents wait on, with qualified call ids."""
        return [
            approval
            for calls in self._sub_agents.values()
            for approval in calls.values()
            if approval.status == "awaiting_approval"
        ]

    def call(self, call_id: str) -> SubAgentApproval | None:
        """A call a sub-agent reported, by its qualified id."""
        for calls in self._sub_agents.values():
            if call_id in calls:
                return calls[call_id]
        return None

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
            self._reporter.decided(approval, outcome="not_run")
        if left:
            self._waits_changed("the sub-agent ended")

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
                self._reporter.asked(approval)
            elif approval.status != "awaiting_approval" and was_waiting:
                self._reporter.decided(approval, text=approval.reason)
        self._waits_changed("the sub-agent's tool calls are decided")

    def _waits_changed(self, decided: str) -> None:
        """Pause the wall clock while a sub-agent waits for a person (its own is paused too),
        and say in the status what waits."""
        waiting = bool(self.awaiting())
        if waiting != self._paused_for_sub_agent:
            self._paused_for_sub_agent = waiting
            self._calls.people_wait(1 if waiting else -1)
        if self._calls.anything_waiting():
            self._calls.show_waiting()
        elif self._reporter.status == "awaiting_approval":
            self._reporter.set_status("running", f"step {self._state.steps}: {decided}")

    def _route(self, call_id: str) -> tuple[str, str]:
        """The sub-agent's workflow id and its own id of the qualified `call_id`."""
        delegate = next(d for d, calls in self._sub_agents.items() if call_id in calls)
        return f"{workflow.info().workflow_id}/{delegate}", call_id[len(delegate) + 1 :]

    async def send(self, decision: ToolCallDecision) -> None:
        """Signal the decision to the sub-agent that asked, by its own call id. With
        `remember`, this run remembers it too: its own later calls of the tool, and the
        sub-agents it starts later, do not ask again."""
        child_id, own_id = self._route(decision.call_id)
        asked = self.call(decision.call_id)
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
            self._calls.remember(asked.tool, decision)

    async def forward(self, decision: ToolCallDecision) -> SubAgentApproval:
        """Send the decision, and wait for the sub-agent to report it taken; answers the call's
        approval as decided."""
        call_id = decision.call_id
        child_id, _ = self._route(call_id)
        await self.send(decision)

        def taken() -> bool:
            current = self.call(call_id)
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
        current = self.call(call_id)
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
        own = [_asked_by(me, a) for a in self._calls.awaiting() if not a.judging]
        return [*own, *self.awaiting()]

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
        if (own := self._calls.request(call_id)) is not None:
            return _asked_by(me, own)
        if (sub := self.call(call_id)) is not None:
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


def _asked_by(workflow_id: str, approval: ToolApproval) -> SubAgentApproval:
    """A call of this run, as its parent is told of it."""
    return SubAgentApproval(**approval.model_dump(), workflow_id=workflow_id)
