"""A conversation's events as AG-UI's (serving/ag_ui.py, docs/agent-protocols.md#ag-ui): one
AG-UI run is a stretch of the conversation's event stream, from where the client's input took
effect to the first event at which the conversation waits for the client again (its turn
answered, a client tool's call, a person's decision) or ends.

    run = AgUiRun(thread_id, run_id, workflow_id)
    run.started()                       # RUN_STARTED
    run.event(offset, agent_event)      # what it adds: steps, text, tool calls; `finished` set
    run.delta(written)                  # the model's text as it streams
    run.ended_without_end()             # the run is gone: RUN_ERROR
    run.recall(agent_event)             # an event before the stretch: a result it holds

A call whose result the run's tool-result guardrails check after its tool_call_finished gets
its TOOL_CALL_RESULT at their verdicts, with what the model read: the result once all passed,
the refusal when one tripped. A stretch that ends before them (the run failed, was cancelled,
is gone) shows that the result was not checked; one that ends waiting for the client (a client
tool's call, a person) leaves it to the next stretch, which recalls the call from the events
before it. A client never sees a result no guardrail passed.

Where a stretch ends depends on its events alone, never on timing or on what a server holds, so
that a client that resumes from an event's offset (Last-Event-ID), with any serve process, gets
the rest of the same stretch: nothing lost, nothing twice. Each AG-UI event that closes what one
of the run's events adds, and each piece of text, carries the position after it as its SSE `id`
(`position`): the offset of the last of the conversation's events shown, and how much of an open
text message the client has. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from ..workflows.events import AgentEvent
from .streams import Written

APPROVAL = "tool_call_approval"
"""The `reason` of the interrupt a call that waits for a person's decision ends its run with."""
PLAN = "plan_approval"
"""The `reason` of the interrupt a plan that waits for a person ends its run with."""
DECISION_SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approve"],
}
"""What a resume entry's `payload` answers an interrupt with (a `cancelled` entry denies)."""
NOT_CHECKED = (
    "Not shown: the run's tool-result guardrails had not checked this result when it ended."
)
"""The TOOL_CALL_RESULT of a call whose result was to be checked when the stretch ended for good
(the run failed, was cancelled, is gone)."""
PASSED = "The result passed the run's tool-result guardrails."
"""The TOOL_CALL_RESULT of a checked call whose verdicts carry no result (none should)."""
ARGUMENTS_CUT = 1_000
"""A tool_call_started event carries at most this many characters of the arguments: a call's
whose may be cut is read whole before it is shown (serving/ag_ui.py)."""

_encoder = EventEncoder()


def approval_interrupt_id(call_id: str) -> str:
    return f"approval:{call_id}"


def plan_interrupt_id() -> str:
    return "plan"


@dataclass
class _Text:
    """A text message the run shows: the model's text of one step's attempt."""

    message_id: str
    attempt: int
    client_end: int
    """How much of the call's text (characters) the client has: what it got before it
    resumed, and what this run showed it."""


@dataclass
class _Checking:
    """A call whose TOOL_CALL_RESULT waits for its tool-result guardrails' verdicts."""

    tool: str
    checks: int
    verdicts: list[AgentEvent] = field(default_factory=list)


@dataclass
class AgUiRun:
    """The AG-UI events of one stretch of a conversation's stream, as its events come."""

    thread_id: str
    run_id: str
    message_prefix: str
    """Makes the ids of the messages this run shows unique in the thread (the run's id: a
    resumed run sends the same, and shows the same message under the same id)."""
    resumed_text: tuple[int, int, int] | None = None
    """A resumed run's text message the client has begun: its step, attempt, characters."""
    finished: bool = False
    _offset: int = -1
    _steps: set[int] = field(default_factory=set)
    _texts: dict[int, _Text] = field(default_factory=dict)
    """The open text message of each step."""
    _voided: set[tuple[int, int]] = field(default_factory=set)
    _whole: set[int] = field(default_factory=set)
    """The steps whose reply is whole (it made calls): later text of theirs was shown."""
    _client_answered: set[str] = field(default_factory=set)
    """The client's tools' calls it answered: it has their results already."""
    _checking: dict[str, _Checking] = field(default_factory=dict)
    """The calls whose result waits for the run's tool-result guardrails, by call id."""
    _judged: dict[str, AgentEvent] = field(default_factory=dict)
    """The approval_requested events of the calls auto mode's judge reviews, by call id: a
    call goes to a person (an interrupt) only if the judge escalates it or an operator hands it
    over (its verdict is then late, with no decision before it)."""

    def started(self, offset: int) -> str:
        """RUN_STARTED, with the offset before the stretch's first event as its id: a client
        dropped before any other event resumes from there. A resumed run begins again the text
        message the client was getting."""
        self._offset = offset
        events: list[BaseEvent] = [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)]
        if self.resumed_text is not None:
            step, attempt, chars = self.resumed_text
            text = self._texts[step] = _Text(self._message_id(step, attempt), attempt, chars)
            events.append(TextMessageStartEvent(message_id=text.message_id, role="assistant"))
        return self._encoded(events)

    def delta(self, written: Written) -> str:
        """The model's streamed text: a message a step's attempt, opened by its first text,
        each piece from where the client's text ends. A void (the attempt failed, and its retry
        writes anew) ends the attempt's message: AG-UI cannot take text back."""
        delta = written.delta
        if delta.kind == "reasoning" or delta.step in self._whole:
            return ""
        if (delta.step, delta.attempt) in self._voided:
            return ""
        if delta.kind == "void":
            self._voided.add((delta.step, delta.attempt))
            return self._encoded(self._end_events(delta.step))
        events: list[BaseEvent] = []
        text = self._texts.get(delta.step)
        if text is None or text.attempt != delta.attempt:
            events += self._end_events(delta.step)
            message_id = self._message_id(delta.step, delta.attempt)
            text = self._texts[delta.step] = _Text(message_id, delta.attempt, 0)
            events.append(TextMessageStartEvent(message_id=message_id, role="assistant"))
        begins = written.end - len(delta.text)
        piece = delta.text[max(text.client_end - begins, 0) :]
        if piece:
            text.client_end = written.end
            events.append(TextMessageContentEvent(message_id=text.message_id, delta=piece))
        return self._encoded(events)

    def event(self, offset: int, event: AgentEvent) -> str:
        """What the conversation's event at `offset` adds, its last AG-UI event with the
        position after it as its SSE id; `finished` once the stretch has ended."""
        events = self._translate(event)
        self._offset = offset
        return self._encoded(events)

    def position(self) -> str:
        """Where a client that got everything so far resumes (its Last-Event-ID): the offset
        of the conversation's last event shown, and the text message it has begun, if one is
        open (`offset:step:attempt:characters`)."""
        if not self._texts:
            return str(self._offset)
        step = max(self._texts)
        text = self._texts[step]
        return f"{self._offset}:{step}:{text.attempt}:{text.client_end}"

    def recall(self, event: AgentEvent) -> None:
        """An event before the stretch's first (serving/ag_ui.py reads them back): a call whose
        result waits for its guardrails' verdicts gets its TOOL_CALL_RESULT in this stretch,
        when they come. Shows nothing."""
        match event.kind:
            case "callback_answered" if event.call_id:
                self._client_answered.add(event.call_id)
            case "tool_call_finished" if not self._by_client(event):
                self._held(event)
            case "guardrail":
                self._checked(event)
            case _:
                pass

    def ended_without_end(self) -> str:
        """The conversation's stream ended with no last event (it was terminated, or is gone)."""
        return self.error("the conversation ended without an answer", "gone", for_good=True)

    def error(self, message: str, code: str, *, for_good: bool = False) -> str:
        """RUN_ERROR, after what is open is closed; `for_good`: the conversation is over, so a
        result that waits for its guardrails is shown as not checked (else a client that
        resumes gets it when they answer)."""
        self.finished = True
        events = [*self._close(for_good), RunErrorEvent(message=message, code=code)]
        return "".join(_sse(e) for e in events)

    def _encoded(self, events: list[BaseEvent]) -> str:
        if not events:
            return ""
        last = _sse(events[-1], self.position())
        return "".join(_sse(e) for e in events[:-1]) + last

    def _message_id(self, step: int, attempt: int) -> str:
        return f"{self.message_prefix}-{step}-{attempt}"

    def _translate(self, event: AgentEvent) -> list[BaseEvent]:
        match event.kind:
            case "step_started":
                self._steps.add(event.step)
                return [StepStartedEvent(step_name=_step_name(event.step))]
            case "step_finished":
                out: list[BaseEvent] = []
                if event.text:  # the reply made calls: its text is whole
                    self._whole.add(event.step)
                    out += self._end_events(event.step)
                if event.step in self._steps:
                    self._steps.discard(event.step)
                    out.append(StepFinishedEvent(step_name=_step_name(event.step)))
                return out
            case "tool_call_started" if event.call_id and event.tool:
                return [
                    ToolCallStartEvent(tool_call_id=event.call_id, tool_call_name=event.tool),
                    ToolCallArgsEvent(tool_call_id=event.call_id, delta=event.arguments or "{}"),
                    ToolCallEndEvent(tool_call_id=event.call_id),
                ]
            case "callback_answered" if event.call_id:
                self._client_answered.add(event.call_id)
                return []
            case "tool_call_finished" if event.call_id:
                if self._by_client(event) or self._held(event):
                    return []
                if event.outcome == "ok":
                    content = "ok" if event.result is None else event.result
                else:
                    content = event.text or str(event.outcome)
                return [self._result(event.call_id, content)]
            case "callback_requested" if event.call_id:
                return self._finish(
                    RunFinishedSuccessOutcome(pending_tool_call_ids=[event.call_id]),
                    for_good=False,
                )
            case "approval_requested" if event.call_id and event.outcome == "judge":
                self._judged[event.call_id] = event
                return []
            case "approval_requested" if event.call_id and event.outcome is None:
                return self._asked(event)
            case "approval_decided" if event.call_id:
                self._judged.pop(event.call_id, None)  # decided by a person, elsewhere
                return []
            case "plan_submitted":
                interrupt = Interrupt(
                    id=plan_interrupt_id(),
                    reason=PLAN,
                    message=event.text,
                    response_schema=DECISION_SCHEMA,
                    metadata={"version": event.outcome},
                )
                return self._finish(
                    RunFinishedInterruptOutcome(interrupts=[interrupt]), for_good=False
                )
            case "turn_finished" | "completed":
                return self._answered(event)
            case "failed" if event.outcome == "cancelled":
                return self._finish(RunFinishedCancelledOutcome(), for_good=True)
            case "failed":
                self.finished = True
                error = RunErrorEvent(message=event.text or "failed", code=event.outcome)
                return [*self._close(for_good=True), error]
            case "judge_verdict" | "guardrail" | "compensation" | "retry":
                # What a front end may show beside the run, by name (docs/agent-protocols.md).
                value = event.model_dump(mode="json", exclude_none=True)
                shown: list[BaseEvent] = [
                    CustomEvent(name=f"durable_agent.{event.kind}", value=value)
                ]
                verdict = event.kind == "judge_verdict"
                judged = self._judged.pop(event.call_id or "", None) if verdict else None
                # Late with no decision before it: an operator handed the call to a person.
                if judged is not None and event.outcome in ("escalated", "late"):
                    return shown + self._asked(judged)
                return shown + self._checked(event)
            case _:
                return []

    def _asked(self, event: AgentEvent) -> list[BaseEvent]:
        """A call that waits for a person: the run ends with an interrupt that resume decides."""
        interrupt = Interrupt(
            id=approval_interrupt_id(event.call_id or ""),
            reason=APPROVAL,
            message=f"{event.tool} wants to run with {event.arguments}",
            tool_call_id=event.call_id,
            response_schema=DECISION_SCHEMA,
            metadata={"tool": event.tool, "arguments": event.arguments},
        )
        return self._finish(RunFinishedInterruptOutcome(interrupts=[interrupt]), for_good=False)

    def _by_client(self, event: AgentEvent) -> bool:
        """A client's tool's call the client answered: it has the result, it sent it."""
        return event.call_id in self._client_answered and event.outcome == "ok"

    def _held(self, event: AgentEvent) -> bool:
        """A call's end whose result the run's tool-result guardrails check next: its
        TOOL_CALL_RESULT is held for their verdicts (`_checked`)."""
        if not event.checks or not event.call_id:
            return False
        self._checking[event.call_id] = _Checking(event.tool or "", event.checks)
        return True

    def _checked(self, event: AgentEvent) -> list[BaseEvent]:
        """A tool-result guardrail's verdict; at a call's last, its TOOL_CALL_RESULT: what the
        model read, which the verdict that tells it carries (the last, once all passed; the
        first that tripped, with the refusal)."""
        call_id = event.call_id or ""
        checking = self._checking.get(call_id) if event.kind == "guardrail" else None
        if checking is None:
            return []
        checking.verdicts.append(event)
        if len(checking.verdicts) < checking.checks:
            return []
        del self._checking[call_id]
        tripped = next((v for v in checking.verdicts if v.outcome == "tripped"), None)
        carried = next((v.result for v in checking.verdicts if v.result is not None), None)
        if carried is not None:
            content = carried
        elif tripped is not None:
            content = f"Error: the result of {checking.tool} was withheld: {tripped.text}"
        else:
            content = PASSED
        return [self._result(call_id, content)]

    def _result(self, call_id: str, content: str) -> ToolCallResultEvent:
        result_id = f"{self.message_prefix}-result-{call_id}"
        return ToolCallResultEvent(message_id=result_id, tool_call_id=call_id, content=content)

    def _answered(self, event: AgentEvent) -> list[BaseEvent]:
        """The turn's (or the conversation's) answer: what the client does not have of it (all
        of it, for a model that does not stream), then the end."""
        answer = event.text or ""
        out: list[BaseEvent] = []
        streamed = self._texts.get(event.step)
        if streamed is not None:
            if rest := answer[streamed.client_end :]:
                out.append(TextMessageContentEvent(message_id=streamed.message_id, delta=rest))
        elif answer:
            message_id = f"{self.message_prefix}-answer-{event.step}"
            out += [
                TextMessageStartEvent(message_id=message_id, role="assistant"),
                TextMessageContentEvent(message_id=message_id, delta=answer),
                TextMessageEndEvent(message_id=message_id),
            ]
        return out + self._finish(RunFinishedSuccessOutcome(), result=answer or None, for_good=True)

    def _finish(
        self,
        outcome: RunFinishedSuccessOutcome
        | RunFinishedInterruptOutcome
        | RunFinishedCancelledOutcome,
        result: str | None = None,
        *,
        for_good: bool,
    ) -> list[BaseEvent]:
        """The stretch's end; `for_good` unless the conversation waits for the client."""
        self.finished = True
        finished = RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, result=result
        )
        return [*self._close(for_good), finished]

    def _close(self, for_good: bool) -> list[BaseEvent]:
        """What is open ends before the run does: AG-UI refuses a run finished with a text
        message or a step still open. A call whose result waits for its guardrails gets its
        result if the conversation will not check it (`for_good`); else it waits for the next
        stretch, which recalls it."""
        out: list[BaseEvent] = []
        if for_good:
            out += [self._result(call_id, NOT_CHECKED) for call_id in self._checking]
            self._checking.clear()
        for step in list(self._texts):
            out += self._end_events(step)
        out += [StepFinishedEvent(step_name=_step_name(step)) for step in sorted(self._steps)]
        self._steps.clear()
        return out

    def _end_events(self, step: int) -> list[BaseEvent]:
        opened = self._texts.pop(step, None)
        return [] if opened is None else [TextMessageEndEvent(message_id=opened.message_id)]


def recalled(event: AgentEvent) -> bool:
    """An event before a stretch that AgUiRun.recall reads (serving/ag_ui.py keeps only these)."""
    checked = event.kind == "tool_call_finished" and bool(event.checks)
    verdict = event.kind == "guardrail" and event.call_id is not None
    return checked or verdict or event.kind == "callback_answered"


def _step_name(step: int) -> str:
    return f"step {step}"


def _sse(event: BaseEvent, event_id: str | None = None) -> str:
    """The protocol's encoding, with the conversation's offset as the SSE id where one is
    given (AG-UI's clients read the data lines; a reconnecting one sends the id back)."""
    encoded = _encoder.encode(event)
    return encoded if event_id is None else f"id: {event_id}\n{encoded}"
