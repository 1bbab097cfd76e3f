"""Continue-as-new: when a run hands on to a fresh history, and what it hands on.

Only at a step boundary (every call has its result, so the transcript is valid for a provider),
when Temporal suggests it or after `continue_as_new_after_steps`. The run's state goes whole,
with bounded tails of its records (workflows/trace.py, call_ids.py); when the whole transcript
would not fit in a workflow input, or passes MAX_CARRIED_TRANSCRIPT_BYTES, the compacted view
goes instead (the rest stays in the earlier runs' histories). A state that does not fit either
fails the run loudly rather than leaving it stuck.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

from . import compaction
from .budget import Budget
from .decisions import ToolApproval
from .errors import AgentBudgetExceeded
from .input_limits import MAX_INPUT_BYTES, json_bytes
from .inputs import AgentInput, ForkSeed
from .reporting import Reporter
from .state import RunState
from .transcript import pending_calls

MAX_CARRIED_BYTES = MAX_INPUT_BYTES
"""What a run's input may have, whether it starts or continues as new: one rule
(workflows/input_limits.py)."""
MAX_CARRIED_TRANSCRIPT_BYTES = 500_000
"""Over this, a run that has compacted carries its compaction view, not the whole transcript,
so that what a long run carries does not grow with its steps."""
MAX_CARRIED_EVENTS = 2_000
"""Progress events carried across continue-as-new; older ones stay in the earlier run."""
MAX_CARRIED_EVENT_BYTES = 200_000
"""And no more than this many bytes of them (an event's data, base64), the newest first."""
MAX_CARRIED_DECISIONS = 100
"""Decided approvals carried (the newest); those still awaiting a person always go."""


def is_due(agent_input: AgentInput, state: RunState, steps_this_run: int) -> bool:
    """At a step boundary only, with every call answered."""
    limit = agent_input.continue_as_new_after_steps
    wanted = workflow.info().is_continue_as_new_suggested() or (
        limit is not None and steps_this_run >= limit
    )
    # Handlers still running (a subscriber's poll, say) are waited for in `hand_on`.
    return wanted and not pending_calls(state.messages)


async def hand_on(
    agent_input: AgentInput,
    state: RunState,
    stream: WorkflowStream,
    reporter: Reporter,
    budget: Budget,
) -> None:
    """Continue as new with the run's state; never returns."""
    reporter.publish("continued_as_new", text=f"run {state.runs + 1} of this workflow starts")
    # Subscribers' polls return now and follow the chain to the next run.
    stream.detach_pollers()
    await workflow.wait_condition(workflow.all_handlers_finished)
    events = stream.get_state()
    kept = _events_to_keep([len(item.data) for item in events.log])
    if kept < len(events.log):
        # Subscribers further behind resume at the oldest event kept.
        stream.truncate(events.base_offset + len(events.log) - kept)
        events = stream.get_state()
    handed = state.model_copy(
        update={"runs": state.runs + 1, "stream": events, "approvals": _approvals_to_keep(state)}
    )
    # The prompt goes once, as the transcript's first message: carried twice, a prompt that
    # could start a run would fail its first hand-on.
    next_input = agent_input.model_copy(
        update={"carried": handed, "fork": _fork_origin(agent_input), "prompt": ""}
    )
    size = json_bytes(next_input)
    if state.note is not None and (
        size > MAX_CARRIED_BYTES
        or sum(len(m.model_dump_json()) for m in state.messages) > MAX_CARRIED_TRANSCRIPT_BYTES
    ):
        # Too large whole (a workflow input may have 2 MB), or long enough to grow it step by
        # step: carry the compacted view. The rest stays in the earlier runs' histories.
        view = compaction.view(state.messages, state.cut, state.note)
        handed = handed.model_copy(update={"messages": view, "cut": 1, "note": None})
        next_input = next_input.model_copy(update={"carried": handed})
        size = json_bytes(next_input)
    if size > MAX_CARRIED_BYTES:
        # A continue-as-new that cannot be sent would leave the run stuck forever.
        raise AgentBudgetExceeded(
            f"the run cannot continue as new: its state is {size:,} bytes, over the "
            f"{MAX_CARRIED_BYTES:,} a workflow input may have; turn on compaction "
            "(with max_context_tokens) or bound the tools' results",
            budget.details(),
        )
    workflow.logger.info("continuing as new after step %d", state.steps)
    if workflow.info().is_target_worker_deployment_version_changed():
        # A run pinned to a deployment version that is no longer the target moves to the
        # current one here, where nothing is replayed: the next run starts from the carried
        # state on the new code (docs/deployment.md).
        workflow.continue_as_new(
            next_input,
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )
    workflow.continue_as_new(next_input)


def _fork_origin(agent_input: AgentInput) -> ForkSeed | None:
    """A fork's seed without its transcript, which the carried state holds now, nor where its
    script resumed (in its first step): only the origin goes on (the result reports it)."""
    seed = agent_input.fork
    return None if seed is None else seed.model_copy(update={"messages": [], "script": None})


def _events_to_keep(sizes: list[int]) -> int:
    """How many of the newest events fit MAX_CARRIED_EVENTS and MAX_CARRIED_EVENT_BYTES."""
    kept = total = 0
    for size in reversed(sizes[-MAX_CARRIED_EVENTS:]):
        total += size
        if total > MAX_CARRIED_EVENT_BYTES:
            break
        kept += 1
    return kept


def _approvals_to_keep(state: RunState) -> list[ToolApproval]:
    """Every approval still awaiting a person, and the newest decided ones, oldest first."""
    decided = [a for a in state.approvals if a.status != "awaiting_approval"]
    dropped = {id(a) for a in decided[: max(len(decided) - MAX_CARRIED_DECISIONS, 0)]}
    return [a for a in state.approvals if id(a) not in dropped]
