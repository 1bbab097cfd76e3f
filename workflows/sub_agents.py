"""Sub-agents: the `delegate` tool's calls, each a child AgentWorkflow.

The only place that starts a sub-agent. It runs a subtask with a fresh context, a subset of
this run's tools and what is left of its budget (steps, tokens, cost, wall time and room in the
compensation log), and only its conclusion comes back: its answer, what it spent and the side
effects it made, which this run adopts, to undo them if it fails. Its calls that wait for a
person are relayed through this run (sub_agent_relay.py), and an operator's change to auto mode
reaches it (auto_mode_forwarding.py). Deterministic code only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from temporalio import workflow
from temporalio.exceptions import CancelledError, ChildWorkflowError

from . import json_schema, versioning
from .auto_mode_forwarding import AutoModeForwarding
from .budget import Budget
from .builtin_tools import DELEGATE_PARAMETERS
from .context import RunContext
from .elapsed import ms_since
from .errors import describe_failure
from .inputs import AgentInput, AgentResult, Limits, ToolApprovalPolicy
from .judge import sub_agent_auto_mode
from .outcomes import Outcome
from .saga import Saga
from .specs import ToolSpec
from .state import FailureDetails
from .status import starting_search_attributes
from .tool_call_gate import ToolCallGate
from .transcript import ToolCall

MAX_WORKFLOW_ID_CHARS = 1_000
"""Temporal's bound on a workflow id: a sub-agent's is its parent's, a slash and the call id."""


class SubAgents:
    """The sub-agents of a run's delegate calls: started, bounded by the run, and adopted."""

    def __init__(
        self,
        ctx: RunContext,
        budget: Budget,
        gate: ToolCallGate,
        auto_mode: AutoModeForwarding,
        saga: Saga,
        tools: Mapping[str, ToolSpec],
    ) -> None:
        self._input = ctx.input
        self._state = ctx.state
        self._behaviours = ctx.behaviours
        self._budget = budget
        self._gate = gate
        self._auto_mode = auto_mode
        self._saga = saga
        self.tools = tools
        """The run's own tools, by name: a sub-agent's are a subset of them."""

    async def delegate(self, call: ToolCall, arguments: dict[str, Any]) -> Outcome:
        """Run a subtask as a child AgentWorkflow with a fresh context and what is left of this
        run's budget; only its conclusion comes back."""
        problem = json_schema.problems(DELEGATE_PARAMETERS, arguments)
        if problem:
            return Outcome.error(call, f"Error: invalid arguments for delegate: {problem}.")
        if self._behaviours.bounded_sub_agents:
            refusal = self._out_of_bounds(arguments)
            if refusal is not None:
                return Outcome.error(call, refusal)
        if (full := self._saga.full()) and versioning.refuses_past_a_full_log():
            return Outcome.error(call, f"Error: the sub-agent did not start: {full}.")
        child_id = f"{workflow.info().workflow_id}/{call.id}"
        if len(child_id) > MAX_WORKFLOW_ID_CHARS:
            # Temporal would refuse the start, and fail every workflow task of this run with it.
            return Outcome.error(
                call,
                f"Error: the sub-agent did not start: its workflow id would have "
                f"{len(child_id):,} characters, over the {MAX_WORKFLOW_ID_CHARS:,} Temporal takes "
                "(sub-agents nested too deep under a long workflow id). Do the task yourself.",
            )
        started = workflow.now()
        # Its calls that wait for a person are reported here, and shown as this run's.
        self._gate.sub_agent_started(call.id)
        try:
            child_input = self._child_input(arguments)
            # It is given auto mode as it holds now; an operator's change after this reaches it
            # by signal, once it has started.
            judged = child_input.tool_approval.auto_mode is not None
            self._auto_mode.sub_agent_starting(call.id, child_id, judged=judged)
            # execute_child_workflow in its two halves (the same commands), to know when the
            # sub-agent has started.
            child = await workflow.start_child_workflow(
                "AgentWorkflow",
                child_input,
                result_type=AgentResult,
                id=child_id,
                static_summary=f"sub-agent for {call.id}",
                # Set at its start, as AgentClient sets a run's: its first upsert is not sent.
                # (A parent recorded before ONE_MARKER started its children without them.)
                search_attributes=starting_search_attributes()
                if self._behaviours.skips_unchanged_upserts
                else None,
            )
            self._auto_mode.sub_agent_started(call.id)
            result: AgentResult = await child
        except ChildWorkflowError as error:
            cause = error.cause
            if isinstance(cause, CancelledError) and self._behaviours.cancels_end_the_run:
                raise asyncio.CancelledError(
                    "the sub-agent was cancelled with its parent"
                ) from None
            # A failed sub-agent undid its own effects; what it spent still counts here.
            self._budget.record_side_call(FailureDetails.of_error(cause).usage)
            content = f"Error: the sub-agent failed: {describe_failure(cause)}"
            return Outcome.error(call, content[:2000], latency_ms=ms_since(started), attempts=1)
        finally:
            if workflow.in_workflow():  # not when the worker drops the run from its cache
                self._gate.sub_agent_ended(call.id)
                self._auto_mode.sub_agent_ended(call.id)
        self._budget.record_side_call(result.usage)
        self._saga.adopt(result.side_effects)
        return Outcome.ok(call, result.answer, latency_ms=ms_since(started), attempts=1)

    def _out_of_bounds(self, arguments: dict[str, Any]) -> str | None:
        """Why a sub-agent cannot have what the model asked for it, if it cannot: its tools are
        a subset of this run's, and its steps come out of what this run has left."""
        allowed = sorted(self.tools)
        outside = [name for name in arguments.get("tools") or [] if name not in self.tools]
        if outside:
            return (
                f"Error: a sub-agent can only use tools this run has ({', '.join(allowed)}); "
                f"not {', '.join(outside)}. The sub-agent did not start."
            )
        if self._budget.steps_left < 1:
            return "Error: this run has no steps left for a sub-agent. It did not start."
        return None

    def _child_input(self, arguments: dict[str, Any]) -> AgentInput:
        parent = self._input
        limits = parent.limits
        max_steps = limits.max_steps
        if self._behaviours.bounded_sub_agents:
            max_steps = self._budget.steps_left
        used = self._budget.usage
        remaining_wall = self._budget.remaining_seconds(workflow.now())
        policy: ToolApprovalPolicy = parent.tool_approval
        remembered = [tool for tool, d in self._state.remembered.items() if d.approve]
        # The callbacks this run's input declares are its own app's: a sub-agent's worker has
        # no such tool to resolve.
        declared = {tool.name for tool in parent.callback_tools}
        tools = [name for name in arguments.get("tools") or self.tools if name not in declared]
        return AgentInput(
            prompt=str(arguments["task"]),
            system=parent.system,
            tools=tools,
            model=parent.sub_agent_model or parent.model,
            limits=Limits(
                max_steps=max_steps,
                max_context_tokens=limits.max_context_tokens,
                max_total_tokens=None
                if limits.max_total_tokens is None
                else max(limits.max_total_tokens - used.total_tokens, 1),
                max_cost_usd=None
                if limits.max_cost_usd is None or used.cost_usd is None
                else max(limits.max_cost_usd - used.cost_usd, 1e-9),
                max_wall_seconds=None if remaining_wall is None else max(remaining_wall, 0.001),
            ),
            compaction=parent.compaction,
            linear_history=parent.linear_history,
            externalise_results=parent.externalise_results,
            heartbeat_timeout_seconds=parent.heartbeat_timeout_seconds,
            approval_timeout_seconds=parent.approval_timeout_seconds,
            tool_approval=policy.model_copy(
                update={
                    "allow": [*policy.allow, *remembered],
                    "auto_mode": sub_agent_auto_mode(
                        policy.auto_mode, self._state.auto_mode_change
                    ),
                }
            ),
            remembered_denials={
                tool: decision
                for tool, decision in self._state.remembered.items()
                if not decision.approve
            },
            effect_log_room=self._saga.room_left(),
            # The parent's guardrails guard the child too: its task, its tools' results, its
            # answer (which the parent's tool-result guardrails read again as a result).
            guardrails=parent.guardrails,
        )
