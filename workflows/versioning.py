"""The only place that calls `workflow.patched`: each behaviour a release changed, by name.

A run records a marker for each patch the first time it asks; a history recorded before the
patch has none, and replays the old behaviour. So the rooms of the workflow read named flags
from `Behaviours` and never a patch id. Retire a patch (samples-python `patching/`) only when
no run that lacks its marker can still be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

STATUS_SEARCH_ATTRIBUTES = "agent-status-search-attributes"
"""Runs upsert the AgentStatus and AgentStep search attributes."""
RELEASE_2 = "approvals-bounded-dispatch-coarse-step"
"""One patch for the changes released together (each patch costs every new run a marker and a
TemporalChangeVersion upsert): per-tool approval, bounded dispatch, and a coarse AgentStep."""

FAULTS_RELEASE = "cancels-end-runs-unknown-outcomes-undone"
"""A cancel ends the run wherever it lands, and a call that changes data whose outcome is
unknown is undone too (issue 16's first release)."""

RELEASE_4 = "sub-agent-approvals-bounded-long-runs"
"""A sub-agent's approvals reach its parent, and loop counts and call ids are held in bounded
state for runs of any length (issue 16's last release; FAULTS_RELEASE had landed already, so
runs in flight carry its marker without these). A real provider's model calls go to that
provider's task queue (`<queue>-model-openai`), where every worker admits them under the
provider's limits (issue 17); a scripted run's calls stay on the run's queue."""

RELEASE_5 = "relisted-tools-local-tools-operator-ui"
"""A run that continues as new lists its tools again (issue 18); a model call names the
previous reply's text by reference, and a tool declared local runs as a local activity
(issue 21); AgentCostUsd and AgentError beside AgentStatus and AgentStep, all exact whenever
the run waits or ends (issue 23)."""
FULL_EFFECT_LOG = "full-effect-log-refuses"
"""A side effect that would start once the compensation log is full (workflows/effect_log.py)
is refused (older runs had no bound). Asked only when the log is full, by
`refuses_past_a_full_log`, so a run that never fills it records no marker for it."""
ANSWERED_EFFECTS_KEPT = "failed-conversation-keeps-answered-effects"
"""A conversation that fails undoes only the effects made since its last answer (older runs
undid them all). Asked only when such a conversation fails, by `keeps_answered_effects`."""
CONVERSATIONS = "conversations"
"""Conversations (AgentInput.conversation): asked only by a conversation's run, so that other
runs record no marker for it; its turns, steering and interrupts are behind the flag."""
SIGNAL_INPUT_BOUNDS = "signal-input-bounds"
"""A signal whose input is over a bound of workflows/input_limits.py is ignored (older runs took
it). Asked only when such a signal comes, by `ignores_oversized_signal`, so a run that never gets
one records no marker for it."""


@dataclass(frozen=True)
class Behaviours:
    """What this run does, as its history decides. Every flag is True for a new run."""

    reports_status: bool = True
    """Upsert AgentStatus and AgentStep (older runs replay without the upserts)."""
    per_tool_approval: bool = True
    """Calls of tools that need a person wait for a decision (older runs ran every call)."""
    bounded_dispatch: bool = True
    """Nothing called after an accepted finish runs, and arguments nested deeper than
    MAX_ARGUMENT_DEPTH are refused (older runs ran both)."""
    coarse_step_attribute: bool = True
    """AgentStep moves with the status and every AGENT_STEP_EVERY steps (older runs upserted it
    at every step)."""
    cancels_end_the_run: bool = True
    """A cancel during a model call, a sub-agent or a call that changes data ends the run
    CANCELED after its compensations; the call that changes data is waited for, not abandoned,
    and compensating is shielded from a second cancel. (Older runs took a cancel during a
    side-effecting call or a model call as that call's failure.)"""
    records_unknown_outcomes: bool = True
    """A call that changes data and was cancelled, timed out or failed after it started enters
    the compensation log as "outcome unknown" (older runs logged only calls that succeeded)."""
    records_tool_specs: bool = True
    """The run's tool specs are read once, by the `resolve_tools` local activity, and replayed
    from its recorded result (older runs read the worker's registry on every replay)."""
    bounded_sub_agents: bool = True
    """A sub-agent gets a subset of its parent's tools and the steps the parent has left, and
    an output schema with an external $ref is refused at the start (older runs let a sub-agent
    have any registered tool and the parent's whole max_steps, and took any schema)."""
    sub_agent_approvals_reach_the_parent: bool = True
    """A sub-agent signals its parent when a call of its starts or stops waiting for a person,
    and the parent shows it, waits on it and forwards decisions to it (older sub-agents sent
    nothing, and older parents neither listed nor forwarded)."""
    bounded_state: bool = True
    """Loop detection remembers the MAX_REMEMBERED_CALLS most recent distinct calls, and call
    ids older than MAX_EXACT_CALL_IDS are kept in a Bloom filter (older runs kept every count
    and every id, so a repeat after many calls, or a rename, could come out differently)."""
    model_calls_on_provider_queues: bool = True
    """Model calls of a real provider are scheduled on that provider's task queue
    (`model_gateway.model_task_queue`), where workers admit them under its concurrency and rate
    limits (older runs, and every scripted run, call the model on the run's own queue). Part of
    RELEASE_4."""
    relists_tools: bool = True
    """A run that continued as new lists its tools again when it starts, keeping the tools it
    was offered before if that fails (older runs kept the first run's list for the chain)."""
    replies_by_reference: bool = True
    """With linear history, the next model call names the previous reply's text by reference
    (its worker kept it), as tool results are (older runs sent every reply's text again in the
    next call's input)."""
    local_tools: bool = True
    """A read-only tool declared `local` runs as a local activity (older runs scheduled every
    tool call as an activity). Part of RELEASE_5."""
    conversations: bool = True
    """A conversation's run waits for the next message after an answer, takes steering
    messages at safe points and stops a turn on an interrupt. Only a run whose input asks for
    a conversation asks for it; every other run has it False."""
    reports_for_operators: bool = True
    """The status upsert also sets AgentCostUsd (the cost so far, a sub-agent's included once it
    ended) and, when the run fails, AgentError (the error's type); and while the run waits or
    once it ended, any change of step or cost is upserted, so the list is exact then (older runs
    upserted AgentStatus and AgentStep only, and only when the status changed). Part of
    RELEASE_5."""


LEGACY = Behaviours(*(False,) * 16)
"""The first release's behaviour: what a run does before it has asked its history."""


def decide(provider: str, conversation: bool = False) -> Behaviours:
    """Ask the history, once, at the start of `AgentWorkflow.run` (the order of the patches is
    part of the history: keep it). `provider` is the run's model provider, fixed by its input:
    a scripted run's model calls stay on the run's queue, whatever its history says.
    `conversation` (AgentInput.conversation) asks for CONVERSATIONS too."""
    reports_status = workflow.patched(STATUS_SEARCH_ATTRIBUTES)
    release_2 = workflow.patched(RELEASE_2)
    faults = workflow.patched(FAULTS_RELEASE)
    release_4 = workflow.patched(RELEASE_4)
    release_5 = workflow.patched(RELEASE_5)
    conversations = conversation and workflow.patched(CONVERSATIONS)
    return Behaviours(
        reports_status=reports_status,
        per_tool_approval=release_2,
        bounded_dispatch=release_2,
        coarse_step_attribute=release_2,
        cancels_end_the_run=faults,
        records_unknown_outcomes=faults,
        records_tool_specs=faults,
        bounded_sub_agents=faults,
        sub_agent_approvals_reach_the_parent=release_4,
        bounded_state=release_4,
        model_calls_on_provider_queues=release_4 and provider != "scripted",
        relists_tools=release_5,
        replies_by_reference=release_5,
        local_tools=release_5,
        conversations=conversations,
        reports_for_operators=release_5,
    )


def ignores_oversized_signal() -> bool:
    """A signal's input is over a bound (workflows/input_limits.py): whether to ignore it, as
    this run does, or take it, as a run recorded before the bounds did. Asked only then, from
    the signal's handler, so that other runs record no marker."""
    return workflow.patched(SIGNAL_INPUT_BOUNDS)


def refuses_past_a_full_log() -> bool:
    """The compensation log is full: whether to refuse the side effect about to start, as this
    run does, or run it, as a run recorded before the bound did. Asked only then."""
    return workflow.patched(FULL_EFFECT_LOG)


def keeps_answered_effects() -> bool:
    """A conversation with answered turns' effects fails: whether to keep them, as this run
    does, or undo them too, as a run recorded before did. Asked only then."""
    return workflow.patched(ANSWERED_EFFECTS_KEPT)
