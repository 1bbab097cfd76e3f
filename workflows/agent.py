"""AgentWorkflow: the ReAct loop of seed 000, one activity per model call and per tool call.

Deterministic code only: no clock but `workflow.now()`, no I/O. The transcript lives here, in
workflow state, and every append goes through the pairing rule.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    RetryState,
    TimeoutError,
)

with workflow.unsafe.imports_passed_through():
    import jsonschema

    # Imported by its full name, so the sandbox hands over the worker's module: its registry
    # of approval predicates is filled outside the sandbox. (`from workflows import approval`
    # would load a fresh, empty copy inside it.)
    import workflows.approval as approval
    from activities.model_call import call_model
    from activities.result_store import READ_RESULT
    from activities.tools import tool_specs
    from workflows import compaction, history
    from workflows.budget import Budget, estimate_message_tokens
    from workflows.errors import (
        FATAL_ERROR_TYPES,
        AgentApprovalTimeout,
        AgentBudgetExceeded,
        AgentConfigurationError,
        AgentError,
        AgentFatalToolError,
        AgentProviderError,
    )
    from workflows.loop_detection import LoopDetector, call_key
    from workflows.models import (
        AGENT_STATUS,
        AGENT_STEP,
        EVENTS_TOPIC,
        AgentEvent,
        AgentEventKind,
        AgentInput,
        AgentResult,
        AgentStatus,
        AppliedEffect,
        CarriedState,
        CompactionRecord,
        CompensationInput,
        CompensationRecord,
        CompensationStatus,
        DecidedBy,
        FailureDetails,
        Limits,
        ModelRequest,
        ModelResponse,
        PlanDecision,
        PlanState,
        RunStatus,
        StepRecord,
        ToolActivityInput,
        ToolActivityResult,
        ToolApproval,
        ToolCallDecision,
        ToolCallRecord,
        ToolOutcome,
        ToolSpec,
        TranscriptPage,
        TranscriptPageRequest,
    )
    from workflows.transcript import (
        AssistantMessage,
        Message,
        ToolCall,
        ToolResult,
        Transcript,
        UserMessage,
    )

FINISH = "finish"
SUBMIT_PLAN = "submit_plan"
DELEGATE = "delegate"
_DELEGATE_DESCRIPTION = (
    "Hand a self-contained subtask to a sub-agent that starts with a fresh context and returns "
    "only its conclusion. Use it for work whose details you do not need to see (reading many "
    "records to answer one question), to keep your own context small. Say everything the "
    "sub-agent needs in the task; it cannot see this conversation. Returns the sub-agent's "
    "answer, or an error saying why it failed. Its cost counts against your budget."
)
_DELEGATE_PARAMETERS = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 1, "description": "The subtask, complete."},
        "tools": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tools the sub-agent may use (default: the ones you have).",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}
_SUBMIT_PLAN_DESCRIPTION = (
    "Submit your plan before doing anything that changes data: the steps you will take, in "
    "order, one short sentence each. A person reviews it; the run waits for their decision. If "
    "they approve, the tools that change data become available and you carry the plan out; if "
    "they reject it, their feedback comes back to you and you plan again. Read-only tools may be "
    "used before it to gather what the plan needs."
)
_SUBMIT_PLAN_PARAMETERS = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "description": "The plan's steps, in order.",
        }
    },
    "required": ["steps"],
    "additionalProperties": False,
}
_FINISH_DESCRIPTION = (
    "Give your final answer and end the run. Call it once, when you are done; nothing you call "
    "after it runs. Its arguments are checked, and a mismatch comes back to you as an error."
)
_ANSWER_RECORDED = "Answer recorded; the run ends here."
_EMPTY_REPLY_NUDGE = (
    "Your reply was empty. Call a tool, or answer in text (or with finish) if you are done."
)
_SCHEMA_NUDGE = (
    "This run needs its final answer as a call to finish, with arguments matching its schema; "
    "plain text does not end it."
)


# What the loop does with one requested call: a small union, matched exhaustively.
@dataclass(frozen=True)
class _Execute:
    spec: ToolSpec
    arguments: dict[str, Any]

    __match_args__ = ("spec",)


@dataclass(frozen=True)
class _Refuse:
    content: str
    outcome: ToolOutcome


@dataclass(frozen=True)
class _Finish:
    arguments: dict[str, Any]


@dataclass(frozen=True)
class _SubmitPlan:
    steps: list[str]


_Disposition = _Execute | _Refuse | _Finish | _SubmitPlan


@workflow.defn
class AgentWorkflow:
    @workflow.init
    def __init__(self, agent_input: AgentInput) -> None:
        self._input = agent_input
        self._transcript = Transcript()
        self._budget = Budget(agent_input.limits, workflow.now())
        self._loops = LoopDetector()
        self._tools: dict[str, ToolSpec] = {}
        self._call_ids: set[str] = set()
        self._effects: list[AppliedEffect] = []
        """The compensation log: side effects that succeeded, newest last."""
        self._compensations: list[CompensationRecord] = []
        self._status: AgentStatus = "running"
        self._details = "starting"
        self._reports_status = False
        self._step_reported = 0
        self._plan: PlanState | None = None
        self._decision: PlanDecision | None = None
        # Compaction: the model is sent messages[0], the note, then messages[cut:].
        self._cut = 1
        self._note: UserMessage | None = None
        self._compactions: list[CompactionRecord] = []
        self._read_result: ToolSpec | None = None
        self._externalised = False
        self._runs = 1
        # Linear history: what the last model call sent, and the chain reference naming it.
        self._last_sent: list[Message] = []
        self._last_ref = ""
        self._last_tools: list[ToolSpec] = []
        self._stored_contents: set[str] = set()
        """Tool results the workers were asked to keep (the next call names them)."""
        # Per-tool approval: every call that asked a person, by call id, and the decisions a
        # person asked to remember, by tool.
        self._release_2 = False
        """Set for runs started since RELEASE_2: per-tool approval, bounded dispatch, and
        AgentStep every AGENT_STEP_EVERY steps. Runs recorded before replay without them."""
        self._approvals: dict[str, ToolApproval] = {}
        self._remembered: dict[str, ToolCallDecision] = {}
        self._waiting_for_people = 0
        self._reported_calls: set[str] = set()
        """Calls of the response being run whose tool_call_finished event is out already."""
        carried = agent_input.carried
        # The progress stream: publishing is workflow state only (no commands), so runs recorded
        # before it existed replay unchanged. Its log goes along on continue-as-new.
        self._stream = WorkflowStream(prior_state=carried.stream if carried else None)
        self._events = self._stream.topic(EVENTS_TOPIC, type=AgentEvent)
        if carried is not None:
            self._restore(carried)

    def _restore(self, carried: CarriedState) -> None:
        self._transcript = Transcript(messages=carried.messages)
        self._budget = Budget(self._input.limits, carried.started_at)
        self._budget.restore(
            carried.steps,
            carried.usage,
            carried.step_records,
            carried.paused_seconds,
            carried.last_context_tokens,
        )
        self._loops.counts.update(carried.loop_counts)
        self._call_ids = set(carried.call_ids)
        self._effects = list(carried.effects)
        self._cut, self._note = carried.cut, carried.note
        self._compactions = list(carried.compactions)
        self._plan = carried.plan
        self._externalised = carried.externalised
        self._runs = carried.runs
        self._approvals = {a.call_id: a for a in carried.approvals}
        self._remembered = dict(carried.remembered)

    def _carry(self, stream: WorkflowStreamState, view_only: bool = False) -> CarriedState:
        """The state to continue as new with. `view_only`: instead of the whole transcript, only
        what the model is sent after the compactions (the first message, the note, the newest
        groups); the rest stays in the earlier runs' histories."""
        messages = self._transcript.messages
        if view_only:
            messages = compaction.view(messages, self._cut, self._note)
        return CarriedState(
            messages=list(messages),
            steps=self._budget.steps,
            usage=self._budget.usage,
            step_records=self._budget.step_records,
            started_at=self._budget.started_at,
            paused_seconds=self._budget.paused_seconds,
            last_context_tokens=self._budget.last_context_tokens,
            loop_counts=dict(self._loops.counts),
            call_ids=sorted(self._call_ids),
            effects=self._effects,
            cut=1 if view_only else self._cut,
            note=None if view_only else self._note,
            compactions=self._compactions,
            plan=self._plan,
            externalised=self._externalised,
            runs=self._runs + 1,
            remembered=self._remembered,
            approvals=list(self._approvals.values()),
            stream=stream,
        )

    def _should_continue_as_new(self, steps_this_run: int) -> bool:
        """At a step boundary only (every call has its result), with no handler mid-way."""
        limit = self._input.continue_as_new_after_steps
        wanted = workflow.info().is_continue_as_new_suggested() or (
            limit is not None and steps_this_run >= limit
        )
        # Handlers still running (a subscriber's poll, say) are waited for in _continue_as_new.
        return wanted and self._transcript.is_complete()

    async def _continue_as_new(self, agent_input: AgentInput) -> None:
        """Hand everything to a new run: the transcript (or its compacted view when the whole
        would not fit in a workflow input), the budget, the approvals and the progress stream."""
        self._publish("continued_as_new", text=f"run {self._runs + 1} of this workflow starts")
        # Subscribers' polls return now and follow the chain to the next run.
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        stream = self._stream.get_state()
        if len(stream.log) > _MAX_CARRIED_EVENTS:
            # Subscribers further behind resume at the oldest event kept.
            self._stream.truncate(stream.base_offset + len(stream.log) - _MAX_CARRIED_EVENTS)
            stream = self._stream.get_state()
        carried = agent_input.model_copy(update={"carried": self._carry(stream)})
        size = len(carried.model_dump_json())
        if size > _MAX_CARRIED_BYTES and self._note is not None:
            # Too large whole (a workflow input may have 2 MB): carry the compacted view.
            carried = agent_input.model_copy(update={"carried": self._carry(stream, True)})
            size = len(carried.model_dump_json())
        if size > _MAX_CARRIED_BYTES:
            # A continue-as-new that cannot be sent would leave the run stuck forever.
            raise AgentBudgetExceeded(
                f"the run cannot continue as new: its state is {size:,} bytes, over the "
                f"{_MAX_CARRIED_BYTES:,} a workflow input may have; turn on compaction "
                "(with max_context_tokens) or bound the tools' results",
                self._budget.details(),
            )
        workflow.logger.info("continuing as new after step %d", self._budget.steps)
        workflow.continue_as_new(carried)

    def _publish(self, kind: AgentEventKind, **fields: Any) -> None:
        """Append an event to the run's progress stream (workflow state; no history event)."""
        fields.setdefault("step", self._budget.steps)
        self._events.publish(AgentEvent(kind=kind, at=workflow.now(), **fields))

    @workflow.query
    def transcript(self) -> list[Message]:
        """The whole transcript: plain JSON for the CLI; over 2 MB, use transcript_page."""
        return list(self._transcript.messages)

    @workflow.query
    def transcript_page(self, request: TranscriptPageRequest) -> TranscriptPage:
        """The transcript from `start`, as many messages as fit in `max_bytes` of JSON (one at
        least), so a transcript of any size can be read, page by page."""
        messages = self._transcript.messages
        page: list[Message] = []
        size = 0
        for message in messages[request.start :]:
            size += len(message.model_dump_json())
            if page and size > request.max_bytes:
                break
            page.append(message)
        return TranscriptPage(messages=page, start=request.start, total=len(messages))

    @workflow.query
    def trace(self) -> list[StepRecord]:
        """One record per step: the model call and every tool call it led to."""
        return self._budget.step_records

    @workflow.query
    def status(self) -> RunStatus:
        return RunStatus(
            status=self._status,
            details=self._details,
            step=self._budget.steps,
            usage=self._budget.usage,
            limits=self._input.limits,
            step_records=self._budget.step_records,
            pending_tool_calls=[call.id for call in self._transcript.pending_calls()],
            plan=self._plan,
            approvals=self._awaiting(),
        )

    # Plain JSON strings, so `temporal workflow signal --input '"..."'` and the Web UI's signal
    # dialog can decide without any Python.
    @workflow.signal
    def approve_plan(self, comment: str | None = None) -> None:
        """Approve the plan that is waiting; the optional comment is passed on to the model."""
        self._take_signal_decision(PlanDecision(approve=True, comment=comment))

    @workflow.signal
    def reject_plan(self, feedback: str) -> None:
        """Reject the plan that is waiting; the feedback becomes the person's next message."""
        self._take_signal_decision(PlanDecision(approve=False, comment=feedback))

    @workflow.update
    def decide_plan(self, decision: PlanDecision) -> PlanState:
        """Approve or reject the waiting plan in one round trip; answers the plan as decided."""
        return self._apply_decision(decision)

    def _apply_decision(self, decision: PlanDecision) -> PlanState:
        assert self._plan is not None  # the validator saw to it
        self._decision = decision
        self._plan = self._plan.model_copy(
            update={
                "status": "approved" if decision.approve else "rejected",
                "comment": decision.comment,
            }
        )
        return self._plan

    @decide_plan.validator
    def _validate_plan_decision(self, decision: PlanDecision) -> None:
        waiting = self._plan if self._plan and self._plan.status == "awaiting_approval" else None
        if waiting is None or self._decision is not None:
            raise ValueError("no plan is waiting for a decision")
        if decision.version is not None and decision.version != waiting.version:
            raise ValueError(
                f"plan version {decision.version} is not the one waiting: "
                f"version {waiting.version} is"
            )
        if not decision.approve and not (decision.comment or "").strip():
            raise ValueError("a rejection needs feedback for the model")

    def _take_signal_decision(self, decision: PlanDecision) -> None:
        try:
            self._validate_plan_decision(decision)
        except ValueError as refused:
            # A signal cannot be refused to its sender; the run's log says why it was ignored.
            workflow.logger.warning("plan decision ignored: %s", refused)
            return
        self._apply_decision(decision)

    @workflow.run
    async def run(self, agent_input: AgentInput) -> AgentResult:
        """Run the loop; a run that ends without an answer undoes its side effects, then fails."""
        # Runs recorded before the search attributes existed replay without their upserts.
        self._reports_status = workflow.patched("agent-status-search-attributes")
        # One patch for the changes released together (each patch costs every new run a marker
        # and a TemporalChangeVersion upsert). Runs recorded before it ran every call without
        # asking (no per-tool approval), could run a call that came after finish or one whose
        # arguments were nested too deep to send, and upserted AgentStep at every step.
        self._release_2 = workflow.patched(RELEASE_2)
        self._set_status("running", "starting")
        try:
            result = await self._loop(agent_input)
        except AgentError as error:
            self._close_pending_calls(f"Not run: the run stopped ({error.type}).")
            await self._compensate()
            self._set_status("failed", f"failed: {error.type}")
            final = self._with_compensations(error)
            self._publish(
                "failed", usage=self._budget.usage, outcome=error.type, text=final.message
            )
            await self._close_stream()
            raise final from None
        except asyncio.CancelledError:
            # Activities started after catching the cancellation are not cancelled: the
            # compensations run to the end before the run reports itself cancelled.
            self._close_pending_calls("Not run: the run was cancelled.")
            await self._compensate()
            self._set_status("failed", "cancelled")
            self._publish("failed", usage=self._budget.usage, outcome="cancelled", text="cancelled")
            await self._close_stream()
            raise
        self._set_status("completed", f"completed in {result.steps} steps")
        self._publish("completed", usage=result.usage, text=result.answer)
        await self._close_stream()
        return result

    async def _close_stream(self) -> None:
        """Release subscribers' polls before the run closes; they read what is left of the
        stream from the closed run, by query, and end."""
        self._stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    def _set_status(self, status: AgentStatus, details: str) -> None:
        """Keep the search attributes, the current details (the run's page in the Web UI) and the
        `status` query saying what the run is doing. No transcript content goes here."""
        if self._release_2:
            # Every upsert is a history event and a visibility write: AgentStep moves with the
            # status and at least every AGENT_STEP_EVERY steps; the status query has the step.
            step_due = self._budget.steps - self._step_reported >= AGENT_STEP_EVERY
        else:
            step_due = status == self._status == "running"
        if self._reports_status and (status != self._status or details == "starting" or step_due):
            workflow.upsert_search_attributes(
                [AGENT_STATUS.value_set(status), AGENT_STEP.value_set(self._budget.steps)]
            )
            self._step_reported = self._budget.steps
        self._status = status
        self._details = details
        workflow.set_current_details(details)

    async def _loop(self, agent_input: AgentInput) -> AgentResult:
        self._resolve_tools(agent_input)
        if agent_input.carried is None:
            self._transcript.append(UserMessage(content=agent_input.prompt))
        # messages[:sent_until] were in the previous model request
        sent_until = len(self._transcript.messages) if agent_input.carried else 0
        first_step_of_run = self._budget.steps

        while True:
            if self._should_continue_as_new(self._budget.steps - first_step_of_run):
                await self._continue_as_new(agent_input)
            offered = self._offered()
            step = self._budget.steps + 1
            context = self._context_estimate(offered, sent_until)
            limit = agent_input.limits.max_context_tokens
            if limit is not None and context > limit and agent_input.compaction != "none":
                target = int(limit * agent_input.compaction_target_ratio)
                if await self._compact(context - target, step):
                    context = self._context_estimate(offered, sent_until)
            self._budget.check_before_model_call(workflow.now(), context)
            started = workflow.now()
            self._set_status("running", f"step {step}: waiting for {agent_input.model.model}")
            self._publish("step_started", step=step, model=agent_input.model.model)
            sent = compaction.view(self._transcript.messages, self._cut, self._note)
            records = self._budget.step_records
            previous_input = records[-1].usage.input_tokens if records else 0
            response = await self._call_model(offered, step, sent)
            sent_until = len(self._transcript.messages)
            self._budget.record_model_call(response.usage)
            self._account_cache_loss(response, previous_input)
            record = StepRecord(
                step=step,
                provider=agent_input.model.provider,
                model=response.model,
                messages_sent=len(sent),
                model_latency_ms=_ms_since(started),
                model_attempts=response.attempt,
                usage=response.usage,
                finish_reason=response.finish_reason,
            )
            self._budget.step_records.append(record)
            self._publish(
                "step_finished",
                model=response.model,
                usage=response.usage,
                latency_ms=record.model_latency_ms,
                attempts=response.attempt,
                outcome=response.finish_reason,
                text=", ".join(c.name for c in response.message.tool_calls) or None,
            )
            workflow.logger.info(
                "step %d: %s replied (%s) with %d tool calls: %s",
                step,
                response.model,
                response.finish_reason,
                len(response.message.tool_calls),
                ", ".join(f"{c.name} {c.id}" for c in response.message.tool_calls) or "-",
            )

            # Append BEFORE executing: if the worker dies mid-tool, the intent is on record.
            message = _with_unique_call_ids(response.message, step, self._call_ids)
            self._call_ids.update(call.id for call in message.tool_calls)
            self._transcript.append(message)
            # A budget this reply overran stops the run before its answer or its tools count.
            self._budget.check_spend(workflow.now())
            if not message.tool_calls:
                if agent_input.output_schema is None and (message.content or "").strip():
                    return self._result(message.content or "", None)
                self._transcript.append(
                    UserMessage(
                        content=_SCHEMA_NUDGE
                        if agent_input.output_schema is not None
                        else _EMPTY_REPLY_NUDGE
                    )
                )
                continue

            answer = await self._run_tool_calls(message.tool_calls, record)
            if answer is not None:
                return answer

    def _offered(self) -> list[ToolSpec]:
        """What the model may call now: until a plan is approved, read-only tools and
        submit_plan; then every tool and finish."""
        tools = list(self._tools.values())
        if self._input.sub_agents:
            tools.append(self._delegate_spec)
        if self._read_result is not None and self._externalised:
            tools.append(self._read_result)  # offered once there is something to read
        if self._input.plan and not (self._plan and self._plan.status == "approved"):
            read_only = [spec for spec in tools if not spec.side_effects]
            return [*read_only, self._submit_plan_spec]
        return [*tools, self._finish_spec(self._input)]

    # Side-effecting: a sub-agent may change data, so it runs alone and only after approval.
    _delegate_spec = ToolSpec(
        name=DELEGATE,
        description=_DELEGATE_DESCRIPTION,
        parameters=_DELEGATE_PARAMETERS,
        side_effects=True,
        # The sub-agent asks for its own calls, under this run's policy.
        needs_approval=False,
    )

    _submit_plan_spec = ToolSpec(
        name=SUBMIT_PLAN, description=_SUBMIT_PLAN_DESCRIPTION, parameters=_SUBMIT_PLAN_PARAMETERS
    )

    def _resolve_tools(self, agent_input: AgentInput) -> None:
        try:
            specs = tool_specs(agent_input.tools)
        except KeyError as error:
            raise AgentConfigurationError(f"the run asks for tools {error.args[0]}") from None
        if agent_input.output_schema is not None:
            try:
                jsonschema.Draft202012Validator.check_schema(agent_input.output_schema)
            except jsonschema.SchemaError as error:
                raise AgentConfigurationError(
                    f"output_schema is not a valid JSON schema: {error.message}"
                ) from None
        if unknown := approval.unknown_predicates(agent_input.tool_approval):
            raise AgentConfigurationError(
                f"the run's approval policy names predicates that are not registered: {unknown}"
            )
        self._tools = {spec.name: spec for spec in specs}
        if agent_input.tools is None or READ_RESULT not in agent_input.tools:
            # Not part of the run's tool set: offered only after a result was externalised.
            self._tools.pop(READ_RESULT, None)
            self._read_result = tool_specs([READ_RESULT])[0]

    @staticmethod
    def _finish_spec(agent_input: AgentInput) -> ToolSpec:
        parameters = agent_input.output_schema or {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer."}},
            "required": ["answer"],
            "additionalProperties": False,
        }
        return ToolSpec(name=FINISH, description=_FINISH_DESCRIPTION, parameters=parameters)

    def _context_estimate(self, offered: list[ToolSpec], sent_until: int) -> int:
        messages = self._transcript.messages
        return self._budget.context_estimate(
            self._input.system,
            offered,
            compaction.view(messages, self._cut, self._note),
            messages[sent_until:],
        )

    async def _compact(self, tokens_to_free: int, step: int) -> bool:
        """Shrink the view sent to the model by whole groups; False when it cannot."""
        messages = self._transcript.messages
        previous_note = self._note.content if self._note else ""
        # The note is rewritten, so what it held is freed too and must not be counted twice.
        cut = compaction.choose_cut(messages, self._cut, tokens_to_free)
        if cut is None:
            return False
        removed = messages[self._cut : cut]
        policy = self._input.compaction
        if policy == "summary":
            summary = await self._summarise(removed, step)
            note = f"[{cut - 1} earlier messages summarised]\n{summary}"
        else:
            note = f"[{cut - 1} earlier messages dropped to fit the context window]"
        freed = (
            estimate_message_tokens(removed)
            + estimate_message_tokens([UserMessage(content=previous_note)]) * bool(previous_note)
            - estimate_message_tokens([UserMessage(content=note)])
        )
        self._cut, self._note = cut, UserMessage(content=note)
        self._budget.forget_reported_context()
        self._compactions.append(
            CompactionRecord(
                step=step,
                policy="summary" if policy == "summary" else "window",
                messages_removed=cut - 1,
                tokens_removed=freed,
            )
        )
        workflow.logger.info("compaction before step %d: %s, %d messages", step, policy, cut - 1)
        self._publish("compaction", outcome=self._compactions[-1].policy, text=note.split("\n")[0])
        return True

    async def _summarise(self, removed: list[Message], step: int) -> str:
        previous = self._note.content.split("\n", 1)[-1] if self._note else None
        settings = self._input.model
        request = ModelRequest(
            settings=settings,
            system=compaction.SUMMARY_SYSTEM,
            messages=[UserMessage(content=compaction.render_for_summary(removed, previous))],
            tools=[],
            step=step,
            purpose="summary",
        )
        response = await self._execute_model_call(request, f"summarise {len(removed)} messages")
        self._budget.record_side_call(response.usage)
        return response.message.content or ""

    def _account_cache_loss(self, response: ModelResponse, previous_input: int) -> None:
        """The first call after a compaction: how much of the previous call's prefix, which an
        append-only transcript would have let the cache serve, it did not read from cache."""
        pending = [c for c in self._compactions if c.cached_tokens_lost is None]
        for record in pending:
            lost = max(previous_input - response.usage.cached_input_tokens, 0)
            record.cached_tokens_lost = lost

    async def _call_model(
        self, offered: list[ToolSpec], step: int, messages: list[Message]
    ) -> ModelResponse:
        settings = self._input.model
        request = ModelRequest(
            settings=settings,
            system=self._input.system,
            messages=messages,
            tools=offered,
            step=step,
        )
        summary = f"model {settings.model}, step {step}"
        by_reference = self._by_reference(request)
        response: ModelResponse | None = None
        if by_reference is not None:
            try:
                response = await self._execute_model_call(by_reference, summary)
            except _StoreMiss:
                workflow.logger.info("store miss at step %d: sending the whole request", step)
        if response is None:
            response = await self._execute_model_call(request, summary)
        # Either way the worker now holds this request: the next call may name it.
        if by_reference is not None and by_reference.prefix_ref is not None:
            new = messages[by_reference.prefix_count :]
            self._last_ref = history.chain_refs(new, self._last_ref)[-1] if new else self._last_ref
        else:
            self._last_ref = history.chain_refs(messages)[-1]
        self._last_sent, self._last_tools = messages, offered
        return response

    def _by_reference(self, request: ModelRequest) -> ModelRequest | None:
        """The request with what earlier calls sent named by reference: the previous request
        when it is a prefix of this one, and any tool result a worker was asked to keep."""
        sent = self._last_sent
        if not self._input.linear_history or not sent:
            return None
        messages = request.messages
        head = messages[: len(sent)]
        # After a compaction rewrote the start, the view goes again, but its results by hash.
        extends = len(head) == len(sent) and all(a is b for a, b in zip(sent, head, strict=True))
        start = len(sent) if extends else 0
        same_tools = self._last_tools == request.tools
        script = request.settings.script
        new: list[Message] = []
        content_refs: dict[int, str] = {}
        for position, message in enumerate(messages[start:]):
            ref = history.content_ref(message.content) if isinstance(message, ToolResult) else ""
            if ref in self._stored_contents:
                content_refs[position] = ref
                message = message.model_copy(update={"content": ""})
            new.append(message)
        return request.model_copy(
            update={
                "content_refs": content_refs,
                "settings": request.settings.model_copy(update={"script": []}),
                "script_ref": history.script_ref(script) if script else None,
                "prefix_ref": self._last_ref if extends else None,
                "prefix_count": start,
                "messages": new,
                "tools_ref": history.tools_ref(request.tools) if same_tools else None,
                "tools": [] if same_tools else request.tools,
            }
        )

    async def _execute_model_call(self, request: ModelRequest, summary: str) -> ModelResponse:
        settings = request.settings
        try:
            return await workflow.execute_activity(
                call_model,
                request,
                start_to_close_timeout=timedelta(seconds=settings.timeout_seconds),
                schedule_to_close_timeout=self._remaining_wall_time(),
                retry_policy=settings.retry.to_policy(FATAL_ERROR_TYPES),
                heartbeat_timeout=self._heartbeat_timeout(),
                summary=summary,
            )
        except ActivityError as error:
            cause = error.cause
            if isinstance(cause, ApplicationError) and cause.type == history.STORE_MISS:
                raise _StoreMiss from None
            self._budget.check_spend(workflow.now())  # a wall-time cut says so, by name
            limit = self._input.limits.max_wall_seconds
            if error.retry_state == RetryState.TIMEOUT and limit is not None:
                # The schedule-to-close timeout is what was left of max_wall_seconds: the
                # retries ran out of the run's time, which is the budget's failure.
                raise AgentBudgetExceeded(
                    f"max_wall_seconds={limit:g} ran out while the model call was being "
                    f"retried; its last failure: {_describe_failure(cause)}",
                    self._budget.details(),
                ) from None
            if isinstance(cause, ApplicationError) and cause.type in FATAL_ERROR_TYPES:
                raise _ERROR_CLASSES.get(cause.type or "", AgentProviderError)(
                    cause.message, self._budget.details()
                ) from None
            raise AgentProviderError(
                f"model call failed after its retries: {_describe_failure(cause)}",
                self._budget.details(),
            ) from None

    def _heartbeat_timeout(self) -> timedelta | None:
        seconds = self._input.heartbeat_timeout_seconds
        return None if seconds is None else timedelta(seconds=seconds)

    def _remaining_wall_time(self) -> timedelta | None:
        remaining = self._budget.remaining_seconds(workflow.now())
        return None if remaining is None else timedelta(seconds=max(remaining, 0.001))

    def _dispose(self, call: ToolCall) -> _Disposition:
        """Decide what to do with a call; what the model can fix becomes a result (seed 003)."""
        specs = {spec.name: spec for spec in self._offered()}
        offered = list(specs)
        if call.name not in specs:
            refused = call.name in self._tools or call.name in (FINISH, SUBMIT_PLAN)
            return _Refuse(self._not_offered(call.name, offered), "refused" if refused else "error")
        parsed = self._parse_arguments(call)
        if isinstance(parsed, _Refuse):
            return parsed
        arguments = parsed
        if call.name == FINISH:
            return _Finish(arguments)
        if call.name == SUBMIT_PLAN:
            problem = _schema_problems(_SUBMIT_PLAN_PARAMETERS, arguments)
            if problem:
                return _Refuse(f"Error: the plan is not valid: {problem}.", "error")
            return _SubmitPlan([str(step) for step in arguments["steps"]])
        times = self._loops.record(call.name, call.arguments)
        if self._loops.is_loop(times):
            return _Refuse(self._loops.feedback(call.name, times), "loop_detected")
        return _Execute(specs[call.name], arguments)

    def _parse_arguments(self, call: ToolCall) -> dict[str, Any] | _Refuse:
        """The call's arguments as an object, or why the model must send them again."""
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except (ValueError, RecursionError) as error:
            reason = "nested too deep to read" if isinstance(error, RecursionError) else error
            return _Refuse(
                f"Error: the arguments for {call.name} are not valid JSON ({reason}). The tool "
                "did not run; send a JSON object that matches its schema.",
                "error",
            )
        if not isinstance(arguments, dict):
            return _Refuse(
                f"Error: the arguments for {call.name} must be a JSON object, not "
                f"{type(arguments).__name__}. The tool did not run.",
                "error",
            )
        depth = _nesting_depth(arguments)
        if depth > MAX_ARGUMENT_DEPTH and self._release_2:
            # Deeper than this no tool needs, and past ~200 levels the activity's input cannot
            # even be encoded: the workflow task would fail again and again.
            return _Refuse(
                f"Error: the arguments for {call.name} are nested {depth} levels deep (at most "
                f"{MAX_ARGUMENT_DEPTH}). The tool did not run; send flatter arguments.",
                "error",
            )
        return arguments

    def _not_offered(self, name: str, offered: list[str]) -> str:
        if self._input.plan and name in self._tools:
            return (
                f"Error: {name} changes data and is not available until a person approves your "
                f"plan; call {SUBMIT_PLAN} first."
            )
        if name == SUBMIT_PLAN and self._input.plan:
            return "Error: your plan is approved already; carry it out."
        if name == FINISH and self._input.plan:
            return f"Error: submit your plan with {SUBMIT_PLAN} first."
        available = ", ".join(sorted(n for n in offered if n not in (FINISH, SUBMIT_PLAN)))
        builtins = ", ".join(n for n in offered if n in (FINISH, SUBMIT_PLAN))
        return (
            f"Error: no tool named {_bounded(repr(name))}. Available tools: {available}, "
            f"{builtins}."
        )

    async def _run_tool_calls(
        self, calls: tuple[ToolCall, ...], record: StepRecord
    ) -> AgentResult | None:
        """Run one response's calls and append one result per call, in call order.

        Read-only calls run concurrently; a side-effecting call runs alone, after everything the
        model asked for before it and before everything after it. One failure never cancels the
        others. Returns the run's result when `finish` was accepted.
        """
        outcomes: dict[str, _Outcome] = {}
        batch: list[tuple[ToolCall, _Execute]] = []
        answer: AgentResult | None = None
        plan: tuple[ToolCall, list[str]] | None = None
        # Every call that needs a person asks at once, before anything runs; each waits for
        # its own decision when its turn comes.
        self._ask_for_approvals(calls)

        async def run_batch() -> None:
            done = await asyncio.gather(*(self._execute_approved(c, e) for c, e in batch))
            outcomes.update({c.id: o for (c, _), o in zip(batch, done, strict=True)})
            batch.clear()

        def fatal() -> str | None:
            return next((o.fatal for o in outcomes.values() if o.fatal), None)

        for call in calls:
            if reason := fatal():
                outcomes[call.id] = _Outcome.refused(
                    call, f"Not run: the run is ending because {reason}", "not_run"
                )
                continue
            if answer is not None and self._release_2:
                # finish promises it: nothing called after it runs.
                outcomes[call.id] = _Outcome.refused(call, _AFTER_FINISH, "not_run")
                continue
            match self._dispose(call):
                case _Refuse(content, kind):
                    outcomes[call.id] = _Outcome.refused(call, content, kind)
                case _Finish(arguments):
                    problem = self._check_answer(arguments)
                    if problem is None:
                        answer = self._result(_answer_text(arguments, self._input), arguments)
                        outcomes[call.id] = _Outcome.done(call, _ANSWER_RECORDED)
                    else:
                        outcomes[call.id] = _Outcome.refused(call, problem, "error")
                case _Execute(spec) as execute if spec.side_effects:
                    await run_batch()
                    if reason := fatal():
                        outcomes[call.id] = _Outcome.refused(
                            call, f"Not run: the run is ending because {reason}", "not_run"
                        )
                    else:
                        outcomes[call.id] = await self._execute_approved(call, execute)
                case _SubmitPlan(steps) if plan is None:
                    plan = (call, steps)
                case _SubmitPlan():
                    outcomes[call.id] = _Outcome.refused(
                        call, "Error: one plan at a time; this one was not submitted.", "error"
                    )
                case _Execute() as execute:
                    batch.append((call, execute))
        await run_batch()
        feedback: str | None = None
        if plan is not None and not fatal():
            plan_call, steps = plan
            decision = await self._await_plan_decision(steps)
            outcomes[plan_call.id] = _Outcome.done(plan_call, _decision_text(decision, self._plan))
            feedback = None if decision.approve else decision.comment
        elif plan is not None:
            outcomes[plan[0].id] = _Outcome.refused(
                plan[0], f"Not run: the run is ending because {fatal()}", "not_run"
            )

        for call in calls:
            outcome = outcomes[call.id]
            self._transcript.append(outcome.result)
            record.tool_calls.append(outcome.record)
            self._report_outcome(outcome)
        self._reported_calls.clear()
        self._withdraw_approvals()
        if reason := fatal():
            raise AgentFatalToolError(reason, self._budget.details())
        if feedback is not None:
            self._transcript.append(UserMessage(content=feedback))
        return answer

    async def _await_plan_decision(self, steps: list[str]) -> PlanDecision:
        """Wait, spending nothing, for a person to approve or reject the plan."""
        version = self._plan.version + 1 if self._plan else 1
        self._plan = PlanState(version=version, steps=steps, status="awaiting_approval")
        self._decision = None
        self._publish("plan_submitted", outcome=f"v{version}", text="\n".join(steps))
        self._set_status(
            "awaiting_approval",
            f"waiting for a person to approve plan v{version} ({_count(len(steps), 'step')}): "
            "signal approve_plan or reject_plan, or update decide_plan",
        )
        timeout = self._input.approval_timeout_seconds
        self._budget.pause(workflow.now())
        try:
            await workflow.wait_condition(
                lambda: self._decision is not None,
                timeout=timedelta(seconds=timeout),
                timeout_summary=f"approval of plan v{version}",
            )
        except builtins.TimeoutError:
            raise AgentApprovalTimeout(
                f"plan v{version} waited {timeout:g} s for a decision (approval_timeout_seconds)",
                self._budget.details(),
            ) from None
        finally:
            self._budget.resume(workflow.now())
        decision = self._decision
        assert decision is not None
        self._set_status("running", f"plan v{version} {self._plan.status}")
        self._publish("plan_decided", outcome=self._plan.status, text=decision.comment)
        return decision

    def _ask_for_approvals(self, calls: tuple[ToolCall, ...]) -> None:
        """Record an approval request for each call the run's policy does not let run at once."""
        if not self._release_2:
            return
        specs = {spec.name: spec for spec in self._offered()}
        plan_approved = self._plan is not None and self._plan.status == "approved"
        repeats: dict[str, int] = {}
        asked = 0
        for call in calls:
            spec = specs.get(call.name)
            if spec is None or call.name in (FINISH, SUBMIT_PLAN):
                continue
            arguments = self._parse_arguments(call)
            if isinstance(arguments, _Refuse):
                continue  # refused before it could run: nobody needs to decide on it
            # A call the loop detector will refuse does not bother a person.
            key = call_key(call.name, call.arguments)
            repeats[key] = repeats.get(key, 0) + 1
            if self._loops.is_loop(self._loops.counts[key] + repeats[key]):
                continue
            if not approval.needs_approval(spec, plan_approved=plan_approved):
                continue
            if approval.approved_by_policy(self._input.tool_approval, call.name, arguments):
                continue
            remembered = self._remembered.get(call.name)
            if remembered is not None and remembered.approve:
                continue
            entry = ToolApproval(
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments[:1000],
                step=self._budget.steps,
                asked_at=workflow.now(),
            )
            self._approvals[call.id] = entry
            self._publish(
                "approval_requested", call_id=call.id, tool=call.name, arguments=entry.arguments
            )
            if remembered is not None:
                self._decide(entry, remembered, "remembered")
            else:
                asked += 1
        if asked:
            self._set_status("awaiting_approval", self._approval_details())

    def _awaiting(self) -> list[ToolApproval]:
        return [a for a in self._approvals.values() if a.status == "awaiting_approval"]

    def _approval_details(self) -> str:
        waiting = self._awaiting()
        calls = "; ".join(f"{a.tool} {a.arguments[:200]} ({a.call_id})" for a in waiting)
        return (
            f"waiting for a person to decide {_count(len(waiting), 'tool call')}: {calls}: "
            "update or signal decide_tool_call"
        )

    def _decide(self, entry: ToolApproval, decision: ToolCallDecision, by: DecidedBy) -> None:
        entry.status = (
            "approved" if decision.approve else "timed_out" if by == "timeout" else "denied"
        )
        entry.reason = decision.reason
        entry.decided_by = by
        self._publish(
            "approval_decided",
            call_id=entry.call_id,
            tool=entry.tool,
            outcome=entry.status,
            text=decision.reason,
        )

    def _withdraw_approvals(self) -> None:
        """Requests left undecided when their calls will not run (a fatal failure, the end)."""
        withdrawn = self._awaiting()
        for entry in withdrawn:
            entry.status = "not_run"
            self._publish(
                "approval_decided", call_id=entry.call_id, tool=entry.tool, outcome="not_run"
            )
        if withdrawn and self._status == "awaiting_approval":
            self._set_status("running", "tool calls withdrawn")

    @workflow.update
    def decide_tool_call(self, decision: ToolCallDecision) -> ToolApproval:
        """Approve or deny a tool call that waits; answers the call's approval as decided."""
        return self._apply_tool_decision(decision)

    @decide_tool_call.validator
    def _validate_tool_decision(self, decision: ToolCallDecision) -> None:
        entry = self._approvals.get(decision.call_id)
        if entry is None:
            waiting = ", ".join(a.call_id for a in self._awaiting()) or "none"
            raise ValueError(
                f"no tool call {decision.call_id!r} asked for approval in this run "
                f"(waiting: {waiting})"
            )
        if entry.status != "awaiting_approval":
            raise ValueError(f"tool call {decision.call_id!r} is decided already: {entry.status}")

    # The same decision as a signal, for `temporal workflow signal --name decide_tool_call
    # --input '{"call_id": "...", "approve": true}'` and the Web UI's signal dialog.
    @workflow.signal(name="decide_tool_call")
    def decide_tool_call_by_signal(self, decision: ToolCallDecision) -> None:
        try:
            self._validate_tool_decision(decision)
        except ValueError as refused:
            workflow.logger.warning("tool call decision ignored: %s", refused)
            return
        self._apply_tool_decision(decision)

    def _apply_tool_decision(self, decision: ToolCallDecision) -> ToolApproval:
        entry = self._approvals[decision.call_id]
        self._decide(entry, decision, "person")
        if decision.remember:
            self._remembered[entry.tool] = decision
            for other in self._awaiting():
                if other.tool == entry.tool:
                    self._decide(other, decision, "remembered")
        if self._awaiting():
            self._set_status("awaiting_approval", self._approval_details())
        else:
            self._set_status("running", f"step {self._budget.steps}: tool calls decided")
        return entry.model_copy()

    async def _await_tool_decision(self, call: ToolCall) -> str | None:
        """Wait, spending nothing, for a person's decision on a call; None when approved, else
        the error result the model gets. No decision in time denies the call."""
        entry = self._approvals[call.id]
        timeout = self._input.approval_timeout_seconds
        if entry.status == "awaiting_approval":
            waited = (workflow.now() - entry.asked_at).total_seconds()
            self._waiting_for_people += 1
            if self._waiting_for_people == 1:
                self._budget.pause(workflow.now())
            try:
                await workflow.wait_condition(
                    lambda: entry.status != "awaiting_approval",
                    timeout=timedelta(seconds=max(timeout - waited, 0.001)),
                    timeout_summary=f"approval of {call.name} {call.id}",
                )
            except builtins.TimeoutError:
                self._decide(entry, ToolCallDecision(call_id=call.id, approve=False), "timeout")
                if not self._awaiting():
                    self._set_status("running", f"step {self._budget.steps}: approval timed out")
            finally:
                self._waiting_for_people -= 1
                if self._waiting_for_people == 0:
                    self._budget.resume(workflow.now())
        if entry.status == "approved":
            return None
        if entry.status == "timed_out":
            return (
                f"Error: no person decided on this call to {call.name} within {timeout:g} s, so "
                "it was denied and did not run. Choose another way, or say in your answer that "
                "it needs a person's approval."
            )
        reason = f": {entry.reason}" if entry.reason else ""
        return (
            f"Error: a person denied this call to {call.name}{reason}. It did not run. Do not "
            "call it again unchanged; choose another way, or explain in your answer."
        )

    async def _execute_approved(self, call: ToolCall, execute: _Execute) -> _Outcome:
        """Run a call once a person approved it (when it asked one), reporting it as it goes."""
        if call.id in self._approvals:
            denial = await self._await_tool_decision(call)
            if denial is not None:
                return _Outcome.refused(call, denial, "denied")
        self._publish(
            "tool_call_started", call_id=call.id, tool=call.name, arguments=call.arguments[:1000]
        )
        outcome = await self._execute(call, execute)
        self._report_outcome(outcome)
        return outcome

    def _report_outcome(self, outcome: _Outcome) -> None:
        record = outcome.record
        if record.id in self._reported_calls:
            return
        self._reported_calls.add(record.id)
        self._publish(
            "tool_call_finished",
            call_id=record.id,
            tool=record.name,
            arguments=record.arguments,
            outcome=record.outcome,
            latency_ms=record.latency_ms,
            attempts=record.attempts,
            text=record.error,
        )

    async def _execute(self, call: ToolCall, execute: _Execute) -> _Outcome:
        if execute.spec.name == DELEGATE:
            return await self._delegate(call, execute.arguments)
        spec = execute.spec
        started = workflow.now()
        info = workflow.info()
        # The first run id tells apart two runs that reuse one workflow id; call ids are unique
        # within a run (see _with_unique_call_ids).
        idempotency_key = f"{info.workflow_id}/{info.first_execution_run_id}/{call.id}"
        try:
            output = await workflow.execute_activity(
                spec.name,
                ToolActivityInput(
                    tool_call_id=call.id,
                    arguments=execute.arguments,
                    idempotency_key=idempotency_key,
                    max_result_chars=spec.max_result_chars,
                    externalise=self._input.externalise_results and spec.name != READ_RESULT,
                    store_content=self._input.linear_history,
                    step=self._budget.steps,
                ),
                result_type=ToolActivityResult,
                start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
                schedule_to_close_timeout=self._remaining_wall_time(),
                retry_policy=spec.retry.to_policy(FATAL_ERROR_TYPES),
                heartbeat_timeout=self._heartbeat_timeout(),
                summary=_call_summary(call),
            )
        except ActivityError as error:
            cause = error.cause
            latency = _ms_since(started)
            attempts = _attempts_made(error, spec)
            if isinstance(cause, ApplicationError) and cause.type in FATAL_ERROR_TYPES:
                reason = f"{spec.name} failed fatally: {cause.message}"
                content = f"Error: {spec.name} failed: {cause.type}"
                return _Outcome.refused(call, content, "error", latency, attempts, fatal=reason)
            if isinstance(cause, TimeoutError):
                content = f"Error: {spec.name} timed out (limit {spec.timeout_seconds:g} s a try)."
            else:
                content = f"Error: {spec.name} failed: {_failure_type(cause)}"
            return _Outcome.refused(call, content, "error", latency, attempts)
        self._externalised = self._externalised or output.externalised_ref is not None
        if output.content_ref is not None:
            self._stored_contents.add(output.content_ref)
        if spec.side_effects and not output.is_error:
            self._effects.append(
                AppliedEffect(
                    call=CompensationInput(
                        tool=spec.name,
                        tool_call_id=call.id,
                        arguments=execute.arguments,
                        result=output.value,
                        idempotency_key=idempotency_key,
                    ),
                    compensation=spec.compensation,
                )
            )
        return _Outcome(
            result=ToolResult(
                tool_call_id=call.id,
                tool_name=call.name,
                content=output.content,
                is_error=output.is_error,
            ),
            record=_call_record(
                call,
                "error" if output.is_error else "ok",
                output.content,
                latency_ms=_ms_since(started),
                attempts=output.attempt,
                truncated=output.omitted_chars > 0,
                externalised=output.externalised_ref is not None,
            ),
        )

    async def _delegate(self, call: ToolCall, arguments: dict[str, Any]) -> _Outcome:
        """Run a subtask as a child AgentWorkflow with a fresh context and what is left of this
        run's budget; only its conclusion comes back."""
        problem = _schema_problems(_DELEGATE_PARAMETERS, arguments)
        if problem:
            return _Outcome.refused(
                call, f"Error: invalid arguments for delegate: {problem}.", "error"
            )
        started = workflow.now()
        limits = self._input.limits
        used = self._budget.usage
        remaining_wall = self._budget.remaining_seconds(workflow.now())
        child_input = AgentInput(
            prompt=str(arguments["task"]),
            system=self._input.system,
            tools=arguments.get("tools") or list(self._tools),
            model=self._input.sub_agent_model or self._input.model,
            limits=Limits(
                max_steps=limits.max_steps,
                max_context_tokens=limits.max_context_tokens,
                max_total_tokens=None
                if limits.max_total_tokens is None
                else max(limits.max_total_tokens - used.total_tokens, 1),
                max_cost_usd=None
                if limits.max_cost_usd is None or used.cost_usd is None
                else max(limits.max_cost_usd - used.cost_usd, 1e-9),
                max_wall_seconds=None if remaining_wall is None else max(remaining_wall, 0.001),
            ),
            compaction=self._input.compaction,
            linear_history=self._input.linear_history,
            externalise_results=self._input.externalise_results,
            heartbeat_timeout_seconds=self._input.heartbeat_timeout_seconds,
            approval_timeout_seconds=self._input.approval_timeout_seconds,
            tool_approval=self._input.tool_approval.model_copy(
                update={
                    "allow": [
                        *self._input.tool_approval.allow,
                        *(tool for tool, d in self._remembered.items() if d.approve),
                    ]
                }
            ),
        )
        try:
            result = await workflow.execute_child_workflow(
                AgentWorkflow.run,
                child_input,
                id=f"{workflow.info().workflow_id}/{call.id}",
                static_summary=f"sub-agent for {call.id}",
            )
        except ChildWorkflowError as error:
            cause = error.cause
            # A failed sub-agent undid its own effects; what it spent still counts here.
            self._budget.record_side_call(FailureDetails.of_error(cause).usage)
            content = f"Error: the sub-agent failed: {_describe_failure(cause)}"
            return _Outcome.refused(call, content[:2000], "error", _ms_since(started), 1)
        self._budget.record_side_call(result.usage)
        self._effects.extend(result.side_effects)
        return _Outcome(
            result=ToolResult(tool_call_id=call.id, tool_name=call.name, content=result.answer),
            record=_call_record(
                call, "ok", result.answer, latency_ms=_ms_since(started), attempts=1
            ),
        )

    def _check_answer(self, arguments: dict[str, Any]) -> str | None:
        """None when `finish`'s arguments satisfy the run's schema, else what is wrong."""
        problems = _schema_problems(self._finish_spec(self._input).parameters, arguments)
        if not problems:
            return None
        return (
            f"Error: the answer does not match the required schema: {problems}. "
            "Call finish again with corrected arguments."
        )

    async def _compensate(self) -> None:
        """Undo the run's side effects, newest first, each as its own activity.

        A compensation that still fails after its retries is recorded, and the others still run.
        No wall-time deadline applies: undoing is what a run that ran out of time needs most.
        """
        if self._effects:
            self._set_status("compensating", f"undoing {_count(len(self._effects), 'side effect')}")
        for effect in reversed(self._effects):
            call = effect.call
            if effect.compensation is None:
                self._compensations.append(
                    CompensationRecord(
                        tool=call.tool, tool_call_id=call.tool_call_id, status="not_undone"
                    )
                )
                continue
            # A sub-agent's effects may come from tools this run was not offered.
            spec = self._tools.get(call.tool) or tool_specs([call.tool])[0]
            try:
                await workflow.execute_activity(
                    effect.compensation,
                    call,
                    start_to_close_timeout=timedelta(seconds=spec.compensation_timeout_seconds),
                    retry_policy=spec.compensation_retry.to_policy(FATAL_ERROR_TYPES),
                    heartbeat_timeout=self._heartbeat_timeout(),
                    summary=f"undo {call.tool} {call.tool_call_id}",
                )
                status: CompensationStatus = "completed"
                error = None
                self._mark_compensated(call.tool_call_id)
            except ActivityError as failure:
                status, error = "failed", _describe_failure(failure.cause)
            self._compensations.append(
                CompensationRecord(
                    tool=call.tool,
                    tool_call_id=call.tool_call_id,
                    status=status,
                    compensation=effect.compensation,
                    error=error,
                )
            )
            self._publish(
                "compensation",
                call_id=call.tool_call_id,
                tool=call.tool,
                outcome=status,
                text=effect.compensation if error is None else error,
            )

    def _mark_compensated(self, tool_call_id: str) -> None:
        for step in self._budget.step_records:
            for index, record in enumerate(step.tool_calls):
                if record.id == tool_call_id:
                    step.tool_calls[index] = record.model_copy(update={"outcome": "compensated"})

    def _with_compensations(self, error: AgentError) -> AgentError:
        """The error that ends the run, saying what was undone and what was not."""
        details = self._budget.details()
        details.compensations = self._compensations
        message = error.message
        if self._compensations:
            outcomes = "; ".join(_describe_compensation(r) for r in self._compensations)
            message += f". Side effects undone newest first: {outcomes}"
        return type(error)(message, details)

    def _close_pending_calls(self, content: str) -> None:
        """Give every call still waiting a result, so the transcript stays valid to the end."""
        self._withdraw_approvals()
        for call in self._transcript.pending_calls():
            self._transcript.append(
                ToolResult(
                    tool_call_id=call.id, tool_name=call.name, content=content, is_error=True
                )
            )

    def _result(self, answer: str, output: dict[str, Any] | None) -> AgentResult:
        return AgentResult(
            answer=answer,
            output=output if self._input.output_schema is not None else None,
            steps=self._budget.steps,
            usage=self._budget.usage,
            step_records=self._budget.step_records,
            compactions=self._compactions,
            side_effects=self._effects,
        )


class _StoreMiss(Exception):
    """The worker's message store lacked what a request named; the request goes again whole."""


@dataclass(frozen=True)
class _Outcome:
    result: ToolResult
    record: ToolCallRecord
    fatal: str | None = None
    """Set when the call failed in a way that must end the run."""

    @classmethod
    def done(cls, call: ToolCall, content: str) -> _Outcome:
        return cls(
            ToolResult(tool_call_id=call.id, tool_name=call.name, content=content),
            _call_record(call, "ok", content),
        )

    @classmethod
    def refused(
        cls,
        call: ToolCall,
        content: str,
        outcome: ToolOutcome,
        latency_ms: int = 0,
        attempts: int = 0,
        *,
        fatal: str | None = None,
    ) -> _Outcome:
        return cls(
            ToolResult(tool_call_id=call.id, tool_name=call.name, content=content, is_error=True),
            _call_record(call, outcome, content, latency_ms=latency_ms, attempts=attempts),
            fatal,
        )


def _call_record(
    call: ToolCall,
    outcome: ToolOutcome,
    content: str,
    *,
    latency_ms: int = 0,
    attempts: int = 0,
    truncated: bool = False,
    externalised: bool = False,
) -> ToolCallRecord:
    return ToolCallRecord(
        id=call.id,
        name=call.name,
        arguments=call.arguments[:1000],
        outcome=outcome,
        error=None if outcome == "ok" else content[:300],
        result_chars=len(content),
        truncated=truncated,
        externalised=externalised,
        attempts=attempts,
        latency_ms=latency_ms,
    )


def _attempts_made(error: ActivityError, spec: ToolSpec) -> int:
    """Attempts of a failed activity: all of them when its retries ran out, else at least one."""
    if error.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
        return spec.retry.maximum_attempts
    return 1


RELEASE_2 = "approvals-bounded-dispatch-coarse-step"
"""The patch id of the second release's behaviour (see `run`)."""
AGENT_STEP_EVERY = 10
"""The AgentStep search attribute is brought up to date at least this often (and whenever the
status changes): a step then costs no search-attribute upsert of its own."""
MAX_ARGUMENT_DEPTH = 32
"""Nesting a tool's arguments may have (the object itself is level 1)."""
MAX_QUOTED_CHARS = 200
"""A tool name or schema message from the model is quoted back no longer than this."""
_AFTER_FINISH = "Not run: finish came before it; the run ended with that answer."
_MAX_CARRIED_BYTES = 1_800_000
_MAX_CARRIED_EVENTS = 2_000
"""Progress events carried across continue-as-new; older ones stay in the earlier run."""
"""Under Temporal's 2 MB payload limit, with room for the encoding around it."""

_ERROR_CLASSES: dict[str, type[AgentError]] = {
    cls.__name__: cls for cls in AgentError.__subclasses__()
}


def _answer_text(arguments: dict[str, Any], agent_input: AgentInput) -> str:
    if agent_input.output_schema is None:
        return str(arguments["answer"])
    return json.dumps(arguments, ensure_ascii=False)


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def _schema_problems(schema: dict[str, Any], instance: dict[str, Any]) -> str:
    """Every way `instance` fails `schema`, path by path, in a stable order; '' if none."""
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(instance),
        key=lambda e: [str(part) for part in e.absolute_path],
    )
    return "; ".join(
        f"{_bounded('.'.join(str(p) for p in e.absolute_path)) or '(answer)'}: "
        f"{_bounded(e.message)}"
        for e in errors[:10]
    )


def _bounded(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """What the model wrote, quoted back no longer than `limit` (it has the original)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def _nesting_depth(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest


def _decision_text(decision: PlanDecision, plan: PlanState | None) -> str:
    version = plan.version if plan else "?"
    if decision.approve:
        comment = f" Their comment: {decision.comment}" if decision.comment else ""
        return (
            f"A person approved plan v{version}.{comment} Carry it out now; the tools that "
            "change data are available."
        )
    return f"A person rejected plan v{version}; their feedback follows. Plan again."


def _describe_compensation(record: CompensationRecord) -> str:
    what = f"{record.tool} {record.tool_call_id}"
    if record.status == "not_undone":
        return f"{what} not undone (it has no compensation)"
    if record.status == "failed":
        return f"{what} FAILED to undo ({record.error})"
    return f"{what} undone by {record.compensation}"


def _with_unique_call_ids(
    message: AssistantMessage, step: int, earlier: set[str]
) -> AssistantMessage:
    """Models sometimes repeat or omit call ids; every call of a run needs its own, for its
    result and for its idempotency key."""
    ids = [call.id for call in message.tool_calls]
    if all(ids) and len(set(ids)) == len(ids) and not earlier.intersection(ids):
        return message
    seen = set(earlier)
    calls = []
    for position, call in enumerate(message.tool_calls):
        call_id = call.id
        if not call_id or call_id in seen:
            call_id = f"call_{step}_{position + 1}"
            while call_id in seen:
                call_id += "_"
        seen.add(call_id)
        calls.append(call.model_copy(update={"id": call_id}))
    return message.model_copy(update={"tool_calls": tuple(calls)})


def _call_summary(call: ToolCall) -> str:
    summary = f"{call.name} {call.arguments}"
    return summary if len(summary) <= 120 else summary[:117] + "..."


def _failure_type(cause: BaseException | None) -> str:
    if isinstance(cause, ApplicationError) and cause.type:
        return cause.type
    return type(cause).__name__ if cause is not None else "unknown error"


def _describe_failure(cause: BaseException | None) -> str:
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'ApplicationError'}: {cause.message}"
    return str(cause) if cause is not None else "unknown error"


def _ms_since(started: Any) -> int:
    return int((workflow.now() - started).total_seconds() * 1000)
