"""The only place that calls `workflow.patched`: each behaviour a release changed, by name.

A run records a marker for each patch the first time it asks; a history recorded before the
patch has none, and replays the old behaviour. So the workflow's modules read named flags
from `Behaviours` and never a patch id. Retire a patch (samples-python `patching/`) only when
no run that lacks its marker can still be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from temporalio import workflow

STATUS_SEARCH_ATTRIBUTES = "agent-status-search-attributes"
"""Runs upsert the AgentStatus and AgentStep search attributes."""
RELEASE_2 = "approvals-bounded-dispatch-coarse-step"
"""One patch for the changes released together (each patch costs every new run a marker and a
TemporalChangeVersion upsert): per-tool approval, bounded dispatch, and a coarse AgentStep."""
TOOL_APPROVAL_FIRST_ID = "tool-approval"
"""Per-tool approval as it landed first (a206d04, 2026-11-29), before RELEASE_2 took it in
(aaf2c62, an hour later): runs recorded with it replay `per_tool_approval`."""
BOUNDED_DISPATCH_FIRST_ID = "bounded-dispatch"
"""Bounded dispatch as it landed first (761759d, 2026-11-29), before RELEASE_2 took it in:
runs recorded with it replay `bounded_dispatch`."""

FAULTS_RELEASE = "cancels-end-runs-unknown-outcomes-undone"
"""A cancel ends the run wherever it lands, and a call that changes data whose outcome is
unknown is undone too (the faults release's first part)."""

RELEASE_4 = "sub-agent-approvals-bounded-long-runs"
"""A sub-agent's approvals reach its parent, and loop counts and call ids are held in bounded
state for runs of any length (the faults release's last part; FAULTS_RELEASE had landed already, so
runs in flight carry its marker without these). A real provider's model calls go to that
provider's task queue (`<queue>-model-openai`), where every worker admits them under the
provider's limits; a scripted run's calls stay on the run's queue."""

RELEASE_5 = "relisted-tools-local-tools-operator-ui"
"""A run that continues as new lists its tools again; a model call names the previous reply's
text by reference, and a tool declared local runs as a local activity; AgentCostUsd and
AgentError beside AgentStatus and AgentStep, all exact whenever the run waits or ends."""
RELEASE_5_FIRST_ID = "tools-relisted-on-continue-as-new"
"""RELEASE_5 as it landed first (76a2f24 to fa009d9, 2026-12-01), without the operator
reports: the merge of the operator reports renamed it, and every run begun before the rename
failed its workflow task on the renamed code (until 0.2.0). Runs recorded with it replay RELEASE_5's
behaviours but `reports_for_operators`. Never rename or remove an id that landed
(tests/test_releases.py)."""
ONE_MARKER = "one-marker-a-run"
"""Every behaviour of the ids `decide` asked before it, under one marker: a run recorded with it
asks none of them at its start (each id cost a new run a marker and a TemporalChangeVersion
upsert: five ids were ten of a 10-step run's 145 events, and are two now). With it, a status
upsert that would set what the run's search attributes hold already is not sent: a run that
`AgentClient` started with AgentStatus running and AgentStep 0 sends none at its start."""
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
LINEAR_SCHEMA_CHECKS = "linear-schema-checks"
"""A run's output schema and finish's arguments are checked by jsonschema-rs, whose patterns
match in linear time, and a schema it cannot check is refused at the start (older runs used the
`jsonschema` package, whose `re` can backtrack for minutes): workflows/json_schema.py. Asked only
by a run with an output schema."""
DROPS_UNKNOWN_SIGNALS = "drops-unknown-signals"
"""Signals of names the run does not define are dropped by a handler, which wakes the run
(older runs let the SDK buffer them, unseen): workflows/unknown_signals.py. Asked when the run
first waits for a person or a message, so runs that never wait record no marker."""
MOVES_BETWEEN_TURNS = "moves-to-the-current-version-between-turns"
"""A conversation waiting between turns on a worker deployment version that is no longer the
target continues as new onto the current one (older runs waited on). Asked only then."""
INPUT_BOUND_AT_START = "input-bound-at-start"
"""A run whose input is over input_limits.MAX_INPUT_BYTES fails as it starts, with
AgentInputTooLarge (older runs took it, and failed at their first continue-as-new). Asked only
by such a run."""
CALLS_PER_REPLY = "bounded-calls-per-reply"
"""A reply's calls past dispatch.MAX_CALLS_PER_REPLY get an error result and do not run (older
runs planned them all). Asked only by a reply that has more."""
CALLS_IN_FLIGHT = "bounded-calls-in-flight"
"""At most tool_runner.MAX_CALLS_IN_FLIGHT of a reply's calls run at once, the rest as slots
free up (older runs started them all at once). Asked only by a batch that has more."""
DUPLICATE_KEYS = "duplicate-argument-keys-refused"
"""Arguments with a key twice in one object are refused before anyone is asked (older runs took
the last). Asked only by a reply that has such arguments."""
LONG_CALL_IDS = "long-call-ids-renamed"
"""A call id over dispatch.MAX_CALL_ID_CHARS is renamed (older runs kept it). Asked only by a
reply that has one."""
FINISH_AFTER_A_FAILURE = "finish-beside-a-failed-call-refused"
"""finish is not taken when a call before it in the same reply did not come back ok (older runs
ended with its answer). Asked only when that happens."""
ERRORS_AFTER_EFFECTS = "errors-after-effects-undone"
"""A side-effecting call that failed with a message for the model other than a ToolError's (a
ValueError from a reply it could not parse, after the effect) enters the compensation log as
outcome unknown, and a failed run undoes it (older runs took it as having changed nothing).
Asked only when such a call's result comes, by `undoes_errors_after_effects`, so a run that
never has one records no marker for it."""
SIGNAL_INPUT_BOUNDS = "signal-input-bounds"
"""A signal whose input is over a bound of workflows/input_limits.py is ignored (older runs took
it). Asked only when such a signal comes, by `ignores_oversized_signal`, so a run that never gets
one records no marker for it."""
SLASHED_CALL_IDS = "call-ids-with-a-slash-renamed"
"""A call id with a '/' is renamed, as a long one is, so that the run's own call ids and the
qualified ids of its sub-agents' calls (`call_1_1/call_2_1`) are never the same (older runs kept
it, and a decision on a sub-agent's call could decide the run's own). Asked only by a reply that
has one, by `renames_slashed_call_ids`."""
VERDICT_DUPLICATE_KEYS = "verdict-duplicate-keys-refused"
"""Auto mode's verdict with a key twice in it goes to a person (older runs took the last value:
`"decision": "escalate", ..., "decision": "approve"` approved the call). Asked only by such a
verdict, by `refuses_duplicate_verdict_keys`."""
AUTO_MODE_FOR_THE_TREE = "auto-mode-changes-reach-sub-agents"
"""An operator's change to auto mode reaches the sub-agents running then: the run forwards it to
each by the `set_auto_mode` signal, and a run takes that signal (older runs forwarded nothing,
and had no such signal: a sub-agent judged on under the rules it started with). Asked only when
a change comes while a sub-agent runs, or the signal comes, by `changes_auto_mode_for_the_tree`:
workflows/auto_mode_forwarding.py."""
FOREIGN_DIALECTS = "foreign-schema-dialects-refused"
"""A schema whose root `$schema` names another dialect than Draft 2020-12 is refused as the run
starts, and nothing is fetched (older runs had the engine fetch an unknown one over HTTP, from
the workflow task: workflows/json_schema.py). Asked only by a run with such a schema, by
`refuses_foreign_dialects`, so other runs record no marker for it."""

CONTINUED_WAIT_SETTLES = "a-continued-conversation-waits-after-a-timer"
"""A conversation that continued as new while it waited between turns starts its wait after a
1 ms timer, in a workflow task of its own (older runs waited at once). The tools' local activity
comes first, and a query that reaches the run while it runs can make the server close that task
early: the wait's own patches (`drops-unknown-signals`) were then recorded in the task after it,
where a replay asks them in the first, and fails with a nondeterminism error. Asked before that
local activity, in the run's first task, and only by such a run."""


PATCH_IDS: dict[str, str] = {
    STATUS_SEARCH_ATTRIBUTES: "0fe2ca6, 2026-11-29",
    TOOL_APPROVAL_FIRST_ID: "a206d04, 2026-11-29",
    BOUNDED_DISPATCH_FIRST_ID: "761759d, 2026-11-29",
    RELEASE_2: "aaf2c62, 2026-11-29",
    FAULTS_RELEASE: "5e93533, 2026-12-01",
    RELEASE_4: "571fe22, 2026-12-01",
    RELEASE_5_FIRST_ID: "76a2f24, 2026-12-01",
    CONVERSATIONS: "c152550, 2026-12-01",
    RELEASE_5: "575a61f, 2026-12-01",
    FULL_EFFECT_LOG: "c02f4d4, 2026-12-02",
    ANSWERED_EFFECTS_KEPT: "c02f4d4, 2026-12-02",
    SIGNAL_INPUT_BOUNDS: "b2a1810, 2026-12-02",
    LINEAR_SCHEMA_CHECKS: "0.2.0",
    DROPS_UNKNOWN_SIGNALS: "0.2.0",
    MOVES_BETWEEN_TURNS: "0.2.0",
    INPUT_BOUND_AT_START: "0.2.0",
    CALLS_PER_REPLY: "0.2.0",
    CALLS_IN_FLIGHT: "0.2.0",
    DUPLICATE_KEYS: "0.2.0",
    LONG_CALL_IDS: "0.2.0",
    FINISH_AFTER_A_FAILURE: "0.2.0",
    ERRORS_AFTER_EFFECTS: "0.2.0",
    ONE_MARKER: "0.3.0",
    FOREIGN_DIALECTS: "0.4.0 (unreleased)",
    SLASHED_CALL_IDS: "0.4.0 (unreleased)",
    VERDICT_DUPLICATE_KEYS: "0.4.0 (unreleased)",
    AUTO_MODE_FOR_THE_TREE: "0.4.0 (unreleased)",
    CONTINUED_WAIT_SETTLES: "0.4.0 (unreleased)",
}
"""Every patch id that ever landed on main, with where it landed: append-only. A history with an
id's marker replays only while the code asks for that id (Temporal fails the task on a marker
nobody asks for: "Non-deprecated patch marker encountered"), so every id here is asked, by
`decide` or a function below, until it is retired by the two steps of docs/deployment.md
("Retiring a patch") and moved to RETIRED_PATCH_IDS. tests/test_releases.py holds this ledger to
the code, to every committed history, and to every commit of main."""

RETIRED_PATCH_IDS: dict[str, str] = {}
"""Ids no longer asked, each with the release whose CHANGELOG.md entry retired it. None yet."""


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
    RELEASE_5 (not of RELEASE_5_FIRST_ID)."""
    linear_schema_checks: bool = True
    """The output schema is checked, and finish's arguments against it, in linear time
    (workflows/json_schema.py). Only a run with an output schema asks for it."""
    skips_unchanged_upserts: bool = True
    """A status upsert sends only the search attributes whose value changes, and none when
    nothing does (older runs sent them all at every change of status). Part of ONE_MARKER."""


LEGACY = Behaviours(**{flag.name: False for flag in fields(Behaviours)})
"""The first release's behaviour: what a run does before it has asked its history."""


def decide(provider: str, conversation: bool = False, output_schema: bool = False) -> Behaviours:
    """Ask the history, once, at the start of `AgentWorkflow.run` (the order of the patches is
    part of the history: keep it). `provider` is the run's model provider, fixed by its input:
    a scripted run's model calls stay on the run's queue, whatever its history says.
    `conversation` (AgentInput.conversation) asks for CONVERSATIONS too, and `output_schema`
    (the run has one) for LINEAR_SCHEMA_CHECKS. ONE_MARKER, asked first, stands for all of
    them: a run recorded with it asks no other id here."""
    if workflow.patched(ONE_MARKER):
        return Behaviours(
            model_calls_on_provider_queues=provider != "scripted",
            conversations=conversation,
            linear_schema_checks=output_schema,
        )
    reports_status = workflow.patched(STATUS_SEARCH_ATTRIBUTES)
    release_2 = workflow.patched(RELEASE_2)
    # The ids a release landed under before a later one renamed them, asked only where the
    # current id's marker is missing (new runs record one marker, not three), in the order
    # their code asked them.
    tool_approval_first = not release_2 and workflow.patched(TOOL_APPROVAL_FIRST_ID)
    bounded_dispatch_first = not release_2 and workflow.patched(BOUNDED_DISPATCH_FIRST_ID)
    faults = workflow.patched(FAULTS_RELEASE)
    release_4 = workflow.patched(RELEASE_4)
    release_5 = workflow.patched(RELEASE_5)
    release_5_first = not release_5 and workflow.patched(RELEASE_5_FIRST_ID)
    conversations = conversation and workflow.patched(CONVERSATIONS)
    linear_schema_checks = output_schema and workflow.patched(LINEAR_SCHEMA_CHECKS)
    return Behaviours(
        reports_status=reports_status,
        per_tool_approval=release_2 or tool_approval_first,
        bounded_dispatch=release_2 or bounded_dispatch_first,
        coarse_step_attribute=release_2,
        cancels_end_the_run=faults,
        records_unknown_outcomes=faults,
        records_tool_specs=faults,
        bounded_sub_agents=faults,
        sub_agent_approvals_reach_the_parent=release_4,
        bounded_state=release_4,
        model_calls_on_provider_queues=release_4 and provider != "scripted",
        relists_tools=release_5 or release_5_first,
        replies_by_reference=release_5 or release_5_first,
        local_tools=release_5 or release_5_first,
        conversations=conversations,
        reports_for_operators=release_5,
        linear_schema_checks=linear_schema_checks,
        skips_unchanged_upserts=False,
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


def drops_unknown_signals() -> bool:
    """The run waits for the first time: whether to drop signals of unknown names, as this run
    does, or leave them to the SDK's buffer, as a run recorded before did. Asked only then."""
    return workflow.patched(DROPS_UNKNOWN_SIGNALS)


def waits_after_a_timer() -> bool:
    """A conversation starts by waiting between turns: whether its wait begins after a timer,
    as this run's does, or at once, as a run recorded before did. Asked only then, before the
    tools' local activity."""
    return workflow.patched(CONTINUED_WAIT_SETTLES)


def moves_between_turns() -> bool:
    """A conversation between turns finds its deployment version is no longer the target:
    whether to continue as new onto the current one, as this run does, or wait on, as a run
    recorded before did. Asked only then."""
    return workflow.patched(MOVES_BETWEEN_TURNS)


def refuses_oversized_input() -> bool:
    """The run's input is over input_limits.MAX_INPUT_BYTES: whether to fail it as it starts,
    as this run does, or take it, as a run recorded before the bound did. Asked only then."""
    return workflow.patched(INPUT_BOUND_AT_START)


def caps_calls_per_reply() -> bool:
    """A reply has more than dispatch.MAX_CALLS_PER_REPLY calls: whether the ones past it are
    refused, as in this run, or all run, as in a run recorded before. Asked only then."""
    return workflow.patched(CALLS_PER_REPLY)


def bounds_calls_in_flight() -> bool:
    """A batch has more calls than tool_runner.MAX_CALLS_IN_FLIGHT: whether they run that many
    at a time, or all at once as in a run recorded before. Asked only then."""
    return workflow.patched(CALLS_IN_FLIGHT)


def refuses_duplicate_keys() -> bool:
    """A reply's arguments repeat a key: whether they are refused, or the last taken as in a run
    recorded before. Asked only then."""
    return workflow.patched(DUPLICATE_KEYS)


def renames_long_call_ids() -> bool:
    """A reply has a call id over dispatch.MAX_CALL_ID_CHARS: whether it is renamed, or kept as
    in a run recorded before. Asked only then."""
    return workflow.patched(LONG_CALL_IDS)


def refuses_finish_after_a_failure() -> bool:
    """A call before finish in its reply did not come back ok: whether finish is refused, or
    taken as in a run recorded before. Asked only then."""
    return workflow.patched(FINISH_AFTER_A_FAILURE)


def undoes_errors_after_effects() -> bool:
    """A side-effecting call failed with a message for the model other than a ToolError's, so
    its outcome is unknown: whether to log it for compensation, as this run does, or take it as
    having changed nothing, as a run recorded before did (its activity's result may say unknown
    all the same, when a newer worker ran the tool). Asked only then."""
    return workflow.patched(ERRORS_AFTER_EFFECTS)


def refuses_foreign_dialects() -> bool:
    """A schema of the run declares another dialect than Draft 2020-12: whether to refuse it, as
    this run does, or to check it without what it declares (the engine's own meta-schema, or none
    for one it does not carry), as a run recorded before did, less the fetch. Asked only then."""
    return workflow.patched(FOREIGN_DIALECTS)


def renames_slashed_call_ids() -> bool:
    """A reply has a call id with a '/', the separator of a sub-agent's qualified call ids:
    whether it is renamed, or kept as in a run recorded before. Asked only then."""
    return workflow.patched(SLASHED_CALL_IDS)


def refuses_duplicate_verdict_keys() -> bool:
    """Auto mode's judge answered with a key twice in its verdict: whether the call goes to a
    person, or the verdict is read by the last value as in a run recorded before. Asked only
    then."""
    return workflow.patched(VERDICT_DUPLICATE_KEYS)


def changes_auto_mode_for_the_tree() -> bool:
    """An operator's change to auto mode comes while a sub-agent runs, or comes by the
    set_auto_mode signal: whether the run forwards it to its sub-agents and takes it by signal,
    as this run does, or neither, as a run recorded before did (it had no such signal). Asked
    only then."""
    return workflow.patched(AUTO_MODE_FOR_THE_TREE)
