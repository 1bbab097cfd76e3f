"""Forks: start a run from another run's step K, and compare two runs step by step.

    recorded = await read_run(client, "agent-1f2e3d4c5b6a")
    fork_input = recorded.fork_input(2, model=ModelSettings(provider="openai", model="gpt-4o"))

The original's transcript is read from its event history, on the client: the model requests
its workflow sent (each names what an earlier request sent by a chain reference and carries the
rest, or all of it after a store miss), the replies, and the tool activities' results, whose
text a request may name by content hash (workflows/history.py). So a fork reads a closed run,
every run of a continued-as-new chain, and an encrypted run when this client's data converter
has its keys; it needs neither a worker nor the workers' stores. Nothing here changes a run.

The transcript through step K is what the model was sent at step K+1 (compacted, if the
original compacted before it); for the last step, that step's request, its reply and its tool
activities' results (run_code's: what its script's legs came to, as the model read it). The
fork's seed carries it, with what steps 1..K cost and the side effects they had, which the fork
lists as inherited and never undoes (workflows/fork.py). A code-mode script's calls are tool
activities of their step: a fork inherits them and their effects as it does a direct call's. A
fork of a plan-mode run is in plan mode too, and its seed carries the plan a person decided in
steps 1..K: only a plan approved there lets the fork change data without planning first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError

from ..workflows import history, json_schema
from ..workflows.activity_io import (
    ModelRequest,
    ModelResponse,
    ScriptLeg,
    ScriptLegInput,
    ToolActivityInput,
    ToolActivityResult,
)
from ..workflows.builtin_tools import SUBMIT_PLAN, SUBMIT_PLAN_PARAMETERS
from ..workflows.code_mode import result_text
from ..workflows.decisions import PlanState
from ..workflows.inputs import (
    AgentInput,
    AgentResult,
    ForkOrigin,
    ForkSeed,
    Limits,
    ScriptResume,
    ToolApprovalPolicy,
)
from ..workflows.model_gateway import MODEL_ACTIVITY
from ..workflows.model_settings import ModelSettings, ScriptedTurn
from ..workflows.script_tools import RUN_CODE, RUN_SCRIPT
from ..workflows.specs import ToolSpec
from ..workflows.state import AppliedEffect, CompensationInput, FailureDetails
from ..workflows.transcript import AssistantMessage, Message, ToolCall, ToolResult, UserMessage
from ..workflows.usage import Usage

AGENT_FORKED_FROM = SearchAttributeKey.for_keyword("AgentForkedFrom")
"""Set when a fork starts, to the workflow id it was forked from: list the forks of a run with
`temporal workflow list --query "AgentForkedFrom='agent-...'"`. The client sets it (the
workflow never upserts it), so it is registered by the first fork, not by the worker."""
FORK_SEARCH_ATTRIBUTES = (AGENT_FORKED_FROM,)
MAX_FORK_INPUT_BYTES = 1_800_000
"""A fork's input carries the transcript it starts with; a workflow input may have 2 MB."""
INHERITED_TURN = "(step {step} is inherited: the fork does not ask the model for it)"


def scripted_from(k: int, turns: Sequence[ScriptedTurn]) -> list[ScriptedTurn]:
    """A script for a scripted fork at step `k` whose replies from step k + 1 are `turns`: the
    scripted model plays the turn of the request's step, and a fork numbers its steps on from
    k, so turns 1..k are placeholders it never plays."""
    padding = [ScriptedTurn(text=INHERITED_TURN.format(step=i + 1)) for i in range(k)]
    return [*padding, *turns]


class ForkError(Exception):
    """A fork that cannot be made (a step past the run's last, a history that cannot be read),
    or a run whose history cannot be read; the message says why, in a line."""


class ForkStepOutOfRange(ForkError):
    """The step to fork at is not one of the run's: the message says how many it had."""


@dataclass
class RecordedCall:
    """One tool activity of the original: what it was asked and what came of it."""

    tool: str
    request: ToolActivityInput
    result: ToolActivityResult | None = None
    failed: bool = False
    """The activity failed, timed out or was cancelled: no result, and an unknown outcome."""


@dataclass
class RecordedStep:
    step: int
    run_id: str
    """The run of the chain that made this step."""
    sent: list[Message]
    """Every message the model was sent for this step."""
    reply: ModelResponse | None = None
    calls: dict[str, RecordedCall] = field(default_factory=dict)
    """The step's tool activities, by call id."""
    scripts: dict[str, list[tuple[ScriptLegInput, ScriptLeg]]] = field(default_factory=dict)
    """The legs of the step's run_code scripts that completed, in order, by run_code's call id."""
    resumed: ScriptResume | None = None
    """A fork inside a script: its first step, the original's reply, whose script it resumed
    (what the script printed before is the original's)."""

    def printed_before(self) -> tuple[str, int]:
        """What a resumed script printed in the original's legs: kept, and left out."""
        if self.resumed is None:
            return "", 0
        return self.resumed.printed, self.resumed.printed_left_out

    def result_of(self, call: ToolCall) -> ToolResult | None:
        """A call's result as the transcript had it, when the history holds it: its tool
        activity's, or, for run_code, what the legs of its script that ended come to."""
        recorded = self.calls.get(call.id)
        if recorded is not None and recorded.result is not None:
            return _result_message(call, recorded.result)
        legs = self.scripts.get(call.id, [])
        if call.name != RUN_CODE or not legs or legs[-1][1].status == "waiting":
            return None
        first, (last_input, last) = legs[0][0], legs[-1]
        printed, left_out = self.printed_before()
        printed += "".join(leg.printed for _, leg in legs)
        left_out += sum(leg.printed_left_out for _, leg in legs)
        bound = first.output_chars_left + len(self.printed_before()[0])
        content, ok = result_text(last, printed, left_out, last_input.calls_made, bound)
        return ToolResult(
            tool_call_id=call.id, tool_name=call.name, content=content, is_error=not ok
        )


@dataclass
class RecordedRun:
    """A run as its history shows it, every run of its chain taken together."""

    workflow_id: str
    first_run_id: str
    input: AgentInput
    """The first run's input: what the run was asked to do."""
    steps: list[RecordedStep]
    """The steps that got a reply, in order; a fork's start from the step after its origin."""
    sent: dict[int, list[Message]]
    """What the model was sent at each step asked for, the one that got no reply included."""
    tools: dict[str, ToolSpec]
    status: str
    """running, completed, failed, cancelled, terminated, timed_out or continued_as_new."""
    task_queue: str = ""
    """The queue its first run was started on."""
    result: AgentResult | None = None
    failure: ApplicationError | None = None
    offered: dict[int, list[str]] = field(default_factory=dict)
    """The names of the tools each step's request offered the model (its last request's)."""
    undone: frozenset[str] = frozenset()
    """The idempotency keys of the side effects the run's compensations undid (as it failed or
    was cancelled, or a conversation's turn was)."""

    @property
    def step_count(self) -> int:
        """The steps the run made, a fork's inherited ones included."""
        return self.steps[-1].step if self.steps else self.inherited_steps

    @property
    def inherited_steps(self) -> int:
        return 0 if self.input.fork is None else self.input.fork.origin.step

    def step(self, number: int) -> RecordedStep | None:
        return next((s for s in self.steps if s.step == number), None)

    def transcript_through(self, k: int) -> list[Message]:
        """The transcript through the tool results of step `k` (0: the prompt)."""
        self._check_step(k)
        if k + 1 in self.sent:
            return list(self.sent[k + 1])
        if k == self.inherited_steps and self.step(k) is None:
            return self._start()
        last = self.step(k)
        assert last is not None and last.reply is not None  # k is the last step: it replied
        messages = [*last.sent, last.reply.message]
        for call in last.reply.message.tool_calls:
            result = last.result_of(call)
            if result is None:
                raise ForkError(
                    f"step {k} of {self.workflow_id} has no result for its call {call.id} "
                    f"({call.name}) in the history (an answer, a refused or failed call, a "
                    f"script that did not end): fork at step {k - 1} or earlier"
                )
            messages.append(result)
        return messages

    def transcript(self) -> list[Message]:
        """As much of the transcript as the history shows: through the last step's reply and
        whatever results of its calls were recorded."""
        if not self.steps:
            return self._start()
        last = self.steps[-1]
        messages = list(last.sent)
        if last.reply is not None:
            messages.append(last.reply.message)
            for call in last.reply.message.tool_calls:
                if (result := last.result_of(call)) is not None:
                    messages.append(result)
        return messages

    def usage_through(self, k: int) -> Usage:
        """What steps 1..k cost (their model calls; a compaction's summaries not counted)."""
        inherited = self.input.fork.origin.usage if self.input.fork is not None else Usage()
        return sum(
            (s.reply.usage for s in self.steps if s.step <= k and s.reply is not None), inherited
        )

    def effects_through(self, k: int) -> list[AppliedEffect]:
        """The side effects of steps 1..k, as the run's compensation log held them."""
        effects = list(self.input.fork.origin.effects) if self.input.fork is not None else []
        for step in self.steps:
            if step.step > k:
                break
            effects += self._effects_of(step.calls.values())
        return effects

    def _effects_of(self, calls: Iterable[RecordedCall]) -> list[AppliedEffect]:
        """The compensation log's entries for these calls: those of side-effecting tools that
        did not fail with the tool's own error."""
        effects = []
        for recorded in calls:
            spec = self.tools.get(recorded.tool)
            if spec is None or not spec.side_effects:
                continue
            if recorded.result is not None and recorded.result.is_error:
                continue  # a tool's own error: nothing happened
            unknown = recorded.result is None
            request = recorded.request
            effects.append(
                AppliedEffect(
                    call=CompensationInput(
                        tool=recorded.tool,
                        tool_call_id=request.tool_call_id,
                        arguments=request.arguments,
                        result=None if recorded.result is None else recorded.result.value,
                        idempotency_key=request.idempotency_key,
                        outcome_unknown=unknown,
                    ),
                    compensation=spec.compensation,
                    outcome_unknown=unknown,
                )
            )
        return effects

    def plan_through(self, k: int) -> PlanState | None:
        """The plan of a plan-mode run as steps 1..k left it: the last one a person decided,
        approved or rejected; None when none was (not submitted, or still waiting at step k).

        Read from the tools each request offered rather than from the decision's text, which a
        compaction may have summarised away: a plan-mode run offers submit_plan until its plan
        is approved, and never after. A plan submitted at step s was decided before the request
        of step s + 1 (a run whose plan timed out, or was cancelled waiting, made no more steps),
        so that request tells approved from rejected."""
        if not self.input.plan:
            return None
        seed = self.input.fork
        plan = seed.plan if seed is not None else None
        for step in self.steps:
            if step.step > k or (plan is not None and plan.status == "approved"):
                break
            if SUBMIT_PLAN not in self.offered.get(step.step, []):
                continue  # refused as "approved already": no submission
            submitted = _submitted_plan(step.reply)
            after = self.offered.get(step.step + 1)
            if submitted is None or after is None:
                continue
            plan = PlanState(
                version=(plan.version if plan is not None else 0) + 1,
                steps=submitted,
                status="rejected" if SUBMIT_PLAN in after else "approved",
            )
        return plan

    def origin(self, k: int) -> ForkOrigin:
        """Where a fork at step `k` starts. The effects of steps 1..k that this run undid later
        are not inherited: they are named in `undone` instead."""
        self._check_step(k)
        made_it = self.step(k)
        effects = self.effects_through(k)
        return ForkOrigin(
            workflow_id=self.workflow_id,
            run_id=made_it.run_id if made_it is not None else self.first_run_id,
            step=k,
            usage=self.usage_through(k),
            effects=[e for e in effects if e.call.idempotency_key not in self.undone],
            undone=[e.call.tool_call_id for e in effects if e.call.idempotency_key in self.undone],
        )

    def inside_script(self, k: int, at: str) -> ForkSeed:
        """A fork inside step `k`'s script, at its call `at` (`script_1.3`): the transcript
        through step k - 1's results, step k's reply (one run_code call) given, and the script
        resumed from the saved state of the leg that asked for the batch holding `at`. The
        batch's calls before `at` keep their results; `at` and the rest run afresh."""
        self._check_step(k)
        step = self.step(k)
        where = f"step {k} of {self.workflow_id}"
        if step is None or step.reply is None:
            raise ForkError(f"{where} was not made by this run: fork the run that made it")
        script_id, _, number = at.rpartition(".")
        calls = step.reply.message.tool_calls
        if [(c.name, c.id) for c in calls] != [(RUN_CODE, script_id)]:
            ran = ", ".join(f"{c.name} {c.id}" for c in calls) or "no call"
            raise ForkError(
                f"{where} has no script whose call is {at!r}: a fork inside a script needs a "
                f"step whose reply is one run_code call, and its reply made {ran}"
            )
        legs = step.scripts.get(script_id, [])
        n = int(number) if number.isdigit() else 0
        found = [
            index
            for index, (asked, leg) in enumerate(legs)
            if leg.status == "waiting" and asked.calls_made < n <= asked.calls_made + len(leg.calls)
        ]
        seed = self.input.fork
        resumed_after = legs[0][0].calls_made if step.resumed is not None and legs else 0
        if not found and seed is not None and n <= resumed_after:
            # Asked for by the original's legs, not this run's.
            raise ForkError(
                f"{where}: its script resumed the script of {seed.origin.workflow_id} after "
                f"{at} was asked for: fork {seed.origin.workflow_id} at {at}"
            )
        if not found:
            made = max((a.calls_made + len(leg.calls) for a, leg in legs), default=0)
            raise ForkError(
                f"{where}: its script {script_id} made no call {at!r} (it made {made}: "
                f"{script_id}.1 to {script_id}.{made})"
            )
        index = found[0]
        asked, leg = legs[index]
        before = n - asked.calls_made - 1
        if before and index + 1 == len(legs):
            raise ForkError(
                f"{where}: the history holds no results of the calls its script made with "
                f"{at} (the run ended among them): fork at {script_id}.{asked.calls_made + 1}"
            )
        inherited = legs[index + 1][0].results[:before] if before else []
        kept = legs[: index + 1]
        script_calls = {f"{script_id}.{m}" for m in range(1, n)}
        effects = self._effects_of(
            call for call_id, call in step.calls.items() if call_id in script_calls
        )
        if step.resumed is not None and seed is not None:
            # Itself a fork inside this script: what came before it is its seed's.
            messages, plan, earlier = list(seed.messages), seed.plan, list(seed.origin.effects)
        else:
            messages, plan = self.transcript_through(k - 1), self.plan_through(k - 1)
            earlier = self.effects_through(k - 1)
        origin = self.origin(k).model_copy(update={"call": at, "effects": [*earlier, *effects]})
        return ForkSeed(
            origin=origin,
            messages=messages,
            plan=plan,
            script=ScriptResume(
                reply=step.reply.message,
                leg=leg.model_dump(mode="json"),
                inherited=[r.model_dump(mode="json") for r in inherited],
                calls_made=asked.calls_made,
                printed=step.printed_before()[0] + "".join(done.printed for _, done in kept),
                printed_left_out=step.printed_before()[1]
                + sum(done.printed_left_out for _, done in kept),
                legs=(step.resumed.legs if step.resumed else 0) + index + 1,
            ),
        )

    def fork_input(
        self,
        k: int,
        *,
        model: ModelSettings | None = None,
        system: str | None = None,
        limits: Limits | None = None,
        tool_approval: ToolApprovalPolicy | None = None,
        label: str | None = None,
        call: str | None = None,
    ) -> AgentInput:
        """The input of a fork at step `k`: this run's task and options, with what is given
        instead (a scripted model plays the turn of each step's number: see scripted_from).
        Tool approval is on unless `tool_approval` says otherwise (a fork never inherits a
        trusted job's approve_all). A fork of a plan-mode run is in plan mode at every step,
        and its plan counts as approved only if a person approved one in steps 1..k: else it
        plans, and waits for a person, before anything that changes data is offered. With
        `call` (`script_1.3`), a fork inside step k's script, at that call (inside_script)."""
        if call is None:
            origin = self.origin(k)
            seed = ForkSeed(
                origin=origin,
                messages=_told_undone(self.transcript_through(k), origin.undone),
                plan=self.plan_through(k),
            )
        else:
            seed = self.inside_script(k, call)
        original = self.input
        fork_input = original.model_copy(
            update={
                "model": model or original.model,
                "system": original.system if system is None else system,
                "limits": limits or original.limits,
                "tool_approval": tool_approval or ToolApprovalPolicy(),
                "label": original.label if label is None else label,
                "carried": None,
                "fork": seed,
            }
        )
        size = len(fork_input.model_dump_json())
        if size > MAX_FORK_INPUT_BYTES:
            raise ForkError(
                f"a fork of {self.workflow_id} at step {k} would start with {size:,} bytes of "
                f"input, over the {MAX_FORK_INPUT_BYTES:,} a workflow input may have: fork at an "
                "earlier step"
            )
        return fork_input

    def _check_step(self, k: int) -> None:
        if k < 0 or k > self.step_count:
            raise ForkStepOutOfRange(
                f"run {self.workflow_id} had {self.step_count} steps: the step to fork at must "
                f"be between 0 and {self.step_count}, not {k}"
            )
        if k < self.inherited_steps:
            origin = self.input.fork.origin if self.input.fork is not None else None
            assert origin is not None
            raise ForkError(
                f"run {self.workflow_id} is a fork of {origin.workflow_id} at step {origin.step}: "
                f"for step {k}, fork {origin.workflow_id}"
            )

    def _start(self) -> list[Message]:
        if self.input.fork is not None:
            return list(self.input.fork.messages)
        return [UserMessage(content=self.input.prompt)]


UNDONE_SINCE = (
    "\n[Undone since: the run this one was forked from undid this call's effect later, so it "
    "is no longer in place.]"
)


def _told_undone(messages: list[Message], undone: Sequence[str]) -> list[Message]:
    """The transcript, each result of a call whose effect was undone since saying so: the fork
    goes on in a world without that effect, and its model must not think otherwise."""
    if not undone:
        return messages
    return [
        m.model_copy(update={"content": m.content + UNDONE_SINCE})
        if isinstance(m, ToolResult) and m.tool_call_id in undone
        else m
        for m in messages
    ]


def _result_message(call: ToolCall, result: ToolActivityResult) -> ToolResult:
    """A recorded call's result as the transcript has it."""
    return ToolResult(
        tool_call_id=call.id, tool_name=call.name, content=result.content, is_error=result.is_error
    )


def _submitted_plan(reply: ModelResponse | None) -> list[str] | None:
    """The steps of the plan a reply submitted: its first submit_plan call whose arguments are
    a valid plan, as dispatch takes it (a later one, or an invalid one, is refused)."""
    for call in reply.message.tool_calls if reply is not None else ():
        if call.name != SUBMIT_PLAN:
            continue
        try:
            arguments = json.loads(call.arguments)
        except (ValueError, RecursionError):
            continue
        if isinstance(arguments, dict) and not json_schema.problems(
            SUBMIT_PLAN_PARAMETERS, arguments
        ):
            return [str(step) for step in arguments["steps"]]
    return None


_CLOSED: dict[int, str] = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "cancelled",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed_out",
}
_ACTIVITY_ENDED_WITHOUT_RESULT = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}


async def read_run(client: Client, workflow_id: str) -> RecordedRun:
    """The run (its latest chain) as its history shows it; raises ForkError when there is no
    such run or its history cannot be decoded (a key this client lacks, say)."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except Exception as error:  # RPCError: not found, or the server refused
        raise ForkError(f"run {workflow_id}: {getattr(error, 'message', error)}") from error
    run_id: str | None = description.raw_description.workflow_execution_info.first_run_id
    first_run_id = run_id or description.run_id
    reader = _HistoryReader(client, workflow_id)
    while run_id:
        run_id = await reader.read(run_id)
    return reader.recorded(first_run_id)


class _HistoryReader:
    """The events of each run of a chain, decoded with the client's data converter."""

    def __init__(self, client: Client, workflow_id: str) -> None:
        self._client = client
        self._workflow_id = workflow_id
        self._input: AgentInput | None = None
        self._task_queue = ""
        self._requests: list[tuple[str, ModelRequest, ModelResponse | None]] = []
        """Every step request, in the order scheduled, with its run and its reply."""
        self._calls: list[RecordedCall] = []
        self._legs: list[tuple[ScriptLegInput, ScriptLeg]] = []
        """The legs of run_code's scripts that completed, in order."""
        self._undone: set[str] = set()
        """The idempotency keys of the effects a compensation of the run undid."""
        self._status = "running"
        self._result: AgentResult | None = None
        self._failure: ApplicationError | None = None

    async def _decode(self, payloads: Any, kind: type[Any]) -> Any:
        try:
            (value,) = await self._client.data_converter.decode(payloads.payloads, [kind])
        except Exception as error:  # an unknown key, a payload of another shape
            raise ForkError(
                f"the history of {self._workflow_id} cannot be read here: {type(error).__name__}: "
                f"{error} (an encrypted run needs its keys in AGENT_PAYLOAD_KEYS)"
            ) from error
        return value

    async def read(self, run_id: str) -> str | None:
        """Read one run's history; returns the run id it continued as, if it did."""
        handle = self._client.get_workflow_handle(self._workflow_id, run_id=run_id)
        events = (await handle.fetch_history()).events
        scheduled: dict[int, tuple[str, Any]] = {}
        requests: dict[int, int] = {}
        calls: dict[int, RecordedCall] = {}
        ended: list[tuple[int, Any]] = []
        """Each activity that ended, in order: its result, None when it had none."""
        tool_names: set[str] = set()
        compensations: set[str] = set()
        next_run: str | None = None
        for event in events:
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED and self._input is None:
                started = event.workflow_execution_started_event_attributes
                self._input = await self._decode(started.input, AgentInput)
                self._task_queue = started.task_queue.name
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                asked = event.activity_task_scheduled_event_attributes
                name = asked.activity_type.name
                if name == MODEL_ACTIVITY:
                    request: ModelRequest = await self._decode(asked.input, ModelRequest)
                    tool_names.update(spec.name for spec in request.tools)
                    compensations.update(s.compensation for s in request.tools if s.compensation)
                    if request.purpose == "step":
                        requests[event.event_id] = len(self._requests)
                        self._requests.append((run_id, request, None))
                else:
                    scheduled[event.event_id] = (name, asked.input)
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes
                at = done.scheduled_event_id
                if at in requests:
                    index = requests[at]
                    reply = await self._decode(done.result, ModelResponse)
                    self._requests[index] = (*self._requests[index][:2], reply)
                elif scheduled.get(at, ("",))[0] == RUN_SCRIPT and RUN_SCRIPT not in tool_names:
                    leg_input = await self._decode(scheduled[at][1], ScriptLegInput)
                    self._legs.append((leg_input, await self._decode(done.result, ScriptLeg)))
                else:
                    ended.append((at, done.result))
            elif kind in _ACTIVITY_ENDED_WITHOUT_RESULT:
                failed = getattr(event, _ACTIVITY_ENDED_WITHOUT_RESULT[kind])
                ended.append((failed.scheduled_event_id, None))
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                continued = event.workflow_execution_continued_as_new_event_attributes
                next_run = continued.new_execution_run_id
                self._status = "continued_as_new"
            elif kind in _CLOSED:
                self._status = _CLOSED[kind]
                await self._closed(event)
        # Read once the run's tools are known: a fork inside a script runs tools before its
        # first request names them.
        for at, result in ended:
            name, payloads = scheduled.get(at, ("", None))
            if name in compensations and name not in tool_names and result is not None:
                undone: CompensationInput = await self._decode(payloads, CompensationInput)
                self._undone.add(undone.idempotency_key)
            if (call := await self._tool_call(scheduled, at, tool_names)) is not None:
                if result is None:
                    call.failed = True
                else:
                    call.result = await self._decode(result, ToolActivityResult)
                calls[at] = call
        self._calls.extend(calls.values())
        return next_run

    async def _tool_call(
        self, scheduled: dict[int, tuple[str, Any]], at: int, tool_names: set[str]
    ) -> RecordedCall | None:
        """The tool call an activity made; None for a compensation (not a tool the run had)."""
        if at not in scheduled:
            return None
        name, payloads = scheduled[at]
        if name not in tool_names:
            return None
        return RecordedCall(name, await self._decode(payloads, ToolActivityInput))

    async def _closed(self, event: HistoryEvent) -> None:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            attributes = event.workflow_execution_completed_event_attributes
            self._result = await self._decode(attributes.result, AgentResult)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            error = await self._client.data_converter.decode_failure(failure)
            if isinstance(error, ApplicationError):
                self._failure = error
            else:
                self._failure = ApplicationError(str(error), type=type(error).__name__)

    def recorded(self, first_run_id: str) -> RecordedRun:
        if self._input is None:
            raise ForkError(f"run {self._workflow_id} has no recorded input")
        agent_input = self._input
        contents = {
            history.content_ref(call.result.content): call.result.content
            for call in self._calls
            if call.result is not None
        }
        # A model reply's text is named by hash in the next request too (its call's result).
        contents.update(
            {
                history.content_ref(text): text
                for _, _, reply in self._requests
                if reply is not None and (text := reply.message.content)
            }
        )
        steps: dict[int, RecordedStep] = {}
        seed = agent_input.fork
        if seed is not None and seed.script is not None:
            # A fork inside a script asked no model for its first step: the seed gave it.
            given = ModelResponse(
                message=seed.script.reply, usage=Usage(), model=agent_input.model.model
            )
            first = seed.origin.step
            steps[first] = RecordedStep(
                first, first_run_id, list(seed.messages), given, resumed=seed.script
            )
        tools: dict[str, ToolSpec] = {}
        offered: dict[int, list[str]] = {}
        last_sent: list[Message] = []
        last_tools: list[ToolSpec] = []
        last_run = ""
        for run_id, request, reply in self._requests:
            if run_id != last_run:  # each run's first request names nothing sent before it
                last_sent, last_tools, last_run = [], [], run_id
            tools.update({spec.name: spec for spec in request.tools})
            # A tools_ref names the list the run's previous step request sent (model_gateway).
            if request.tools or request.tools_ref is None:
                last_tools = request.tools
            offered[request.step] = [spec.name for spec in last_tools]
            sent = self._whole(request, last_sent, contents)
            last_sent = sent
            step = steps.setdefault(request.step, RecordedStep(request.step, run_id, sent))
            step.sent = sent
            if reply is not None:
                step.reply, step.run_id = reply, run_id
        for call in self._calls:
            if call.request.tool_call_id and call.request.step in steps:
                steps[call.request.step].calls[call.request.tool_call_id] = call
        for leg_input, leg in self._legs:
            if leg_input.step in steps:
                legs = steps[leg_input.step].scripts.setdefault(leg_input.tool_call_id, [])
                legs.append((leg_input, leg))
        return RecordedRun(
            workflow_id=self._workflow_id,
            first_run_id=first_run_id,
            input=agent_input,
            steps=[steps[n] for n in sorted(steps) if steps[n].reply is not None],
            sent={n: step.sent for n, step in steps.items()},
            tools=tools,
            status=self._status,
            task_queue=self._task_queue,
            result=self._result,
            failure=self._failure,
            offered=offered,
            undone=frozenset(self._undone),
        )

    def _whole(
        self, request: ModelRequest, last_sent: list[Message], contents: dict[str, str]
    ) -> list[Message]:
        """The messages a request stood for: what its prefix reference names, then its own,
        each tool result and model reply named by content hash given its text again."""
        head: list[Message] = []
        if request.prefix_ref is not None:
            head = last_sent[: request.prefix_count]
            refs = history.chain_refs(head)
            if len(head) != request.prefix_count or not refs or refs[-1] != request.prefix_ref:
                raise ForkError(
                    f"the history of {self._workflow_id} does not hold what the request of step "
                    f"{request.step} names by reference"
                )
        own: list[Message] = []
        for position, message in enumerate(request.messages):
            ref = request.content_refs.get(position)
            if ref is not None:
                if ref not in contents:
                    raise ForkError(
                        f"the history of {self._workflow_id} lacks the content that the "
                        f"request of step {request.step} names as {ref}"
                    )
                message = message.model_copy(update={"content": contents[ref]})
            own.append(message)
        return [*head, *own]


# --- comparing two runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class CallView:
    name: str
    arguments: str
    result: str | None
    """None: no result in the history (the run ended there)."""
    is_error: bool = False


@dataclass(frozen=True)
class StepView:
    """One step as the transcript shows it: the model's text and its calls with their results."""

    text: str | None
    calls: tuple[CallView, ...]

    def same_as(self, other: StepView) -> bool:
        return self == other


@dataclass(frozen=True)
class Outcome:
    """How a run ended, and what it took."""

    workflow_id: str
    status: str
    answer: str | None
    error: str | None
    steps: int
    inherited_steps: int
    usage: Usage
    """Its own model calls."""
    inherited_usage: Usage
    forked_from: str | None

    @property
    def whole_usage(self) -> Usage:
        """As if the run had made every step itself: comparable with a run that did."""
        return self.inherited_usage + self.usage


def steps_of(messages: Sequence[Message]) -> list[StepView]:
    """The transcript cut into steps: each assistant message and the results of its calls."""
    steps: list[StepView] = []
    for index, message in enumerate(messages):
        if not isinstance(message, AssistantMessage):
            continue
        results = {m.tool_call_id: m for m in messages[index + 1 :] if isinstance(m, ToolResult)}
        calls = tuple(
            CallView(
                call.name,
                call.arguments,
                results[call.id].content if call.id in results else None,
                results[call.id].is_error if call.id in results else False,
            )
            for call in message.tool_calls
        )
        steps.append(StepView(message.content, calls))
    return steps


def outcome_of(run: RecordedRun) -> Outcome:
    origin = run.input.fork.origin if run.input.fork is not None else None
    inherited = origin.usage if origin is not None else Usage()
    error = None
    if run.failure is not None:
        error = f"{run.failure.type or 'Error'}: {run.failure.message}"
    if run.result is not None:
        usage = run.result.usage
        steps = run.result.steps
    elif run.failure is not None:
        details = FailureDetails.of_error(run.failure)
        usage, steps = details.usage, max(details.steps, run.step_count)
    else:
        usage = run.usage_through(run.step_count) if origin is None else Usage()
        steps = run.step_count
    return Outcome(
        workflow_id=run.workflow_id,
        status=run.status,
        answer=run.result.answer if run.result is not None else None,
        error=error,
        steps=steps,
        inherited_steps=run.inherited_steps,
        usage=usage,
        inherited_usage=inherited,
        forked_from=f"{origin.workflow_id} at step {origin.step}" if origin else None,
    )


@dataclass(frozen=True)
class StepDiff:
    step: int
    a: StepView | None
    b: StepView | None

    @property
    def same(self) -> bool:
        return self.a is not None and self.b is not None and self.a.same_as(self.b)


@dataclass(frozen=True)
class RunDiff:
    a: Outcome
    b: Outcome
    steps: list[StepDiff]

    @property
    def diverged_at(self) -> int | None:
        """The first step the two transcripts differ at; None when they do not."""
        return next((d.step for d in self.steps if not d.same), None)

    def as_json(self) -> dict[str, Any]:
        def side(view: StepView | None) -> dict[str, Any] | None:
            if view is None:
                return None
            return {
                "text": view.text,
                "calls": [
                    {
                        "name": c.name,
                        "arguments": c.arguments,
                        "result": c.result,
                        "is_error": c.is_error,
                    }
                    for c in view.calls
                ],
            }

        def outcome(o: Outcome) -> dict[str, Any]:
            return {
                "workflow_id": o.workflow_id,
                "status": o.status,
                "answer": o.answer,
                "error": o.error,
                "steps": o.steps,
                "inherited_steps": o.inherited_steps,
                "usage": o.usage.model_dump(),
                "inherited_usage": o.inherited_usage.model_dump(),
                "forked_from": o.forked_from,
            }

        return {
            "a": outcome(self.a),
            "b": outcome(self.b),
            "diverged_at": self.diverged_at,
            "steps": [
                {"step": d.step, "same": d.same, "a": side(d.a), "b": side(d.b)} for d in self.steps
            ],
        }


def diff(a: RecordedRun, b: RecordedRun) -> RunDiff:
    """Where two runs' transcripts diverge, step by step, and how each ended."""
    left, right = steps_of(a.transcript()), steps_of(b.transcript())
    steps = [
        StepDiff(
            n + 1,
            left[n] if n < len(left) else None,
            right[n] if n < len(right) else None,
        )
        for n in range(max(len(left), len(right)))
    ]
    return RunDiff(outcome_of(a), outcome_of(b), steps)


def forked_from_memo(origin: ForkOrigin) -> dict[str, Any]:
    """The `forked_from` memo of a fork: plain JSON, so the Web UI and `temporal` show it."""
    memo = {"workflow_id": origin.workflow_id, "run_id": origin.run_id, "step": origin.step}
    return memo if origin.call is None else {**memo, "call": origin.call}


def arguments_text(arguments: str) -> str:
    """Arguments as one compact line (they are JSON text as the model wrote them)."""
    try:
        return json.dumps(json.loads(arguments), separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return arguments
