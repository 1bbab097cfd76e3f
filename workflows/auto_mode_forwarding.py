"""An operator's change to auto mode holds for the whole tree of runs: the run takes it, and
forwards it to the sub-agents running now, each of which takes it and forwards it to its own.

A sub-agent is given its parent's auto mode as it holds when the sub-agent's input is built
(judge.sub_agent_auto_mode), and judges with that copy from then on: a change its parent takes
afterwards reaches it only by the `set_auto_mode` signal, the update's twin, which it validates by
the update's rule. A sub-agent whose input was built before the change is sent it once it has
started (the change may come while its start is on its way); one built after has it already.
Changes go one at a time, in the order the run took them, so a sub-agent ends with the last.
Deterministic code only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import FailureError

from . import versioning
from .decisions import AutoModeChange
from .tool_call_gate import ToolCallGate

SET_AUTO_MODE = "set_auto_mode"
"""The update an operator sends a run, and its signal twin, which a parent sends its sub-agents."""


@dataclass
class _SubAgent:
    call_id: str
    """The delegate call that started it."""
    workflow_id: str
    built_with: int
    """The changes the run had taken when the sub-agent's input was built: it holds those."""
    judged: bool
    """Whether it was given a judge: one started while auto mode was off has none to take rules."""
    started: bool = False


class AutoModeForwarding:
    """The run's changes to auto mode, and the sub-agents of its delegate calls in flight."""

    def __init__(self, gate: ToolCallGate) -> None:
        self._gate = gate
        self._taken = 0
        """Changes this run took (none need counting across continue-as-new, which comes between
        steps, when no sub-agent runs)."""
        self._sub_agents: dict[str, _SubAgent] = {}
        """By delegate call id, from when its input is built until it ended."""
        self._in_order = asyncio.Lock()

    def sub_agent_starting(self, call_id: str, workflow_id: str, *, judged: bool) -> None:
        """The delegate call `call_id` built its sub-agent's input just now."""
        self._sub_agents[call_id] = _SubAgent(call_id, workflow_id, self._taken, judged)

    def sub_agent_started(self, call_id: str) -> None:
        self._sub_agents[call_id].started = True

    def sub_agent_ended(self, call_id: str) -> None:
        self._sub_agents.pop(call_id, None)

    async def change(self, change: AutoModeChange) -> str:
        """Take a validated change for the rest of the run, and forward it to the sub-agents
        that run; answers what holds now, and which of them it reached."""
        now = self._gate.change_auto_mode(change)
        self._taken += 1
        taken = self._taken
        # A run recorded before the forwarding sent its sub-agents nothing: asked only now.
        if self._sub_agents and versioning.changes_auto_mode_for_the_tree():
            reached: list[str] = []
            missed: list[str] = []
            async with self._in_order:
                for sub in self._built_before(taken):
                    if not await self._started(sub):
                        continue  # it ended: nothing of it runs to take the change
                    if (why := await self._send(sub, change)) is None:
                        reached.append(sub.workflow_id)
                    else:
                        missed.append(why)
            if reached:
                whom = "sub-agent" if len(reached) == 1 else "sub-agents"
                now += f"; it reached the running {whom} {', '.join(reached)}"
            now += "".join(f"; {why}" for why in missed)
        workflow.logger.info("set_auto_mode: %s", now)
        return now

    async def take_by_signal(self, change: AutoModeChange) -> None:
        """The signal twin, validated already: from the parent, or from a person."""
        if not versioning.changes_auto_mode_for_the_tree():
            workflow.logger.warning("set_auto_mode by signal ignored: this run predates it")
            return
        await self.change(change)

    def _built_before(self, taken: int) -> list[_SubAgent]:
        """The sub-agents whose input was built before change number `taken`."""
        return [sub for sub in self._sub_agents.values() if sub.built_with < taken]

    async def _started(self, sub: _SubAgent) -> bool:
        """Wait for its start to be confirmed (a signal sent before could find no such run);
        False when it ended instead."""

        def running() -> bool:
            return self._sub_agents.get(sub.call_id) is sub

        await workflow.wait_condition(lambda: sub.started or not running())
        return running()

    async def _send(self, sub: _SubAgent, change: AutoModeChange) -> str | None:
        """Signal the change to a sub-agent that runs; why it did not reach it, if it did not."""
        if change.rules is not None and not sub.judged:
            return (
                f"sub-agent {sub.workflow_id} has no judge to take the rules (it started while "
                "auto mode was off): a person decides its calls"
            )
        try:
            await workflow.get_external_workflow_handle(sub.workflow_id).signal(
                SET_AUTO_MODE, change
            )
        except FailureError as error:
            return f"it did not reach sub-agent {sub.workflow_id}: {error.message}"
        return None
