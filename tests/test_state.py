"""The run's state as pure code: one model that the rooms share and continue-as-new hands on.

No server. The committed history of a continued run holds a real carried state: today's RunState
must still load it, or runs in flight could not continue."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from durable_agent.workflows.budget import Budget
from durable_agent.workflows.inputs import AgentInput, AgentResult, Limits
from durable_agent.workflows.loop_detection import LoopDetector, call_key
from durable_agent.workflows.state import FailureDetails, RunState, StepRecord, ToolCallRecord
from durable_agent.workflows.status import SubAgentReport
from durable_agent.workflows.transcript import Transcript, UserMessage
from durable_agent.workflows.usage import Usage

HISTORIES = Path(__file__).parent / "histories"
START = datetime(2026, 12, 1, tzinfo=UTC)


def carried_in_history() -> dict[str, Any]:
    """The `carried` JSON that a run recorded when it continued as new."""
    history = json.loads((HISTORIES / "continue_as_new.run2.json").read_text())
    started = history["events"][0]["workflowExecutionStartedEventAttributes"]
    payload = started["input"]["payloads"][0]
    carried: dict[str, Any] = json.loads(base64.b64decode(payload["data"]))["carried"]
    return carried


def test_a_carried_state_recorded_by_an_earlier_release_still_loads() -> None:
    recorded = carried_in_history()
    state = RunState.model_validate(recorded)
    assert state.steps == recorded["steps"] > 0
    assert len(state.messages) == len(recorded["messages"])
    Transcript(messages=state.messages)  # still obeys the pairing rule
    # What the earlier release did not carry starts from its default.
    assert state.approvals == [] and state.remembered == {} and state.stream is None


def test_every_field_added_since_has_a_default() -> None:
    """A field without a default would fail every run in flight at its next continue-as-new."""
    recorded = set(carried_in_history())
    added = {name: f for name, f in RunState.model_fields.items() if name not in recorded}
    assert added, "the history predates approvals and the stream"
    assert all(not field.is_required() for field in added.values()), sorted(added)
    assert recorded <= set(RunState.model_fields), "a carried field was renamed or dropped"


def test_the_state_goes_whole_through_a_workflow_input_and_back() -> None:
    state = RunState.start(START)
    state.messages.append(UserMessage(content="hi"))
    state.loop_counts["get_order\n{}"] = 2
    state.call_ids.append("c1")
    agent_input = AgentInput(prompt="hi", carried=state)
    again = AgentInput.model_validate_json(agent_input.model_dump_json()).carried
    assert again == state


def test_the_rooms_write_into_the_state_itself() -> None:
    state = RunState.start(START)
    budget = Budget(Limits(max_steps=5), state)
    budget.record_model_call(Usage(input_tokens=10, output_tokens=2))
    budget.pause(START)
    budget.resume(START + timedelta(seconds=3))
    LoopDetector(state.loop_counts).record("get_order", "{}")
    assert state.steps == 1 and state.usage.total_tokens == 12
    assert state.last_context_tokens == 12
    assert state.paused_seconds == 3.0
    assert budget.elapsed_seconds(START + timedelta(seconds=10)) == 7.0
    assert state.loop_counts == {call_key("get_order", "{}"): 1}
    transcript = Transcript(messages=state.messages)
    state.messages = transcript.messages
    transcript.append(UserMessage(content="hello"))
    assert state.messages[-1].content == "hello"


def test_undoing_marks_the_trace_and_a_failure_carries_what_was_spent() -> None:
    state = RunState.start(START)
    record = ToolCallRecord(id="c1", name="cancel_order", arguments="{}", outcome="ok")
    state.step_records.append(
        StepRecord(step=1, model="m", model_latency_ms=1, usage=Usage(), tool_calls=[record])
    )
    state.mark_compensated("c1")
    assert state.step_records[0].tool_calls[0].outcome == "compensated"
    details = state.failure_details()
    assert details.steps == 0 and details.step_records == state.step_records


def ended(history: Path) -> list[tuple[str, Payload]]:
    """What a history's run handed back as it ended: its result, or its failure's details."""
    found = []
    for event in json.loads(history.read_text()).get("events", []):
        attributes = event.get("workflowExecutionCompletedEventAttributes")
        payloads = (attributes or {}).get("result", {}).get("payloads", [])
        found += [("result", json_format.ParseDict(p, Payload())) for p in payloads]
        failure = event.get("workflowExecutionFailedEventAttributes", {}).get("failure", {})
        details = failure.get("applicationFailureInfo", {}).get("details", {})
        found += [
            ("failure", json_format.ParseDict(p, Payload())) for p in details.get("payloads", [])
        ]
    return found


def test_what_every_committed_run_handed_back_still_reads() -> None:
    """A client reads a run that ended (AgentRun.result(): its AgentResult, or the
    FailureDetails its AgentRunFailed carries) with today's models, whichever release recorded
    it: the oldest recorded their tool calls without their arguments, and their results and
    failures could not be read (AgentRun.result() raised a ValidationError)."""
    read = {"result": 0, "failure": 0}
    converter = pydantic_data_converter.payload_converter
    for history in sorted(HISTORIES.glob("**/*.json")):
        for kind, payload in ended(history):
            model = AgentResult if kind == "result" else FailureDetails
            (value,) = converter.from_payloads([payload], [model])
            assert isinstance(value, model), history
            read[kind] += 1
    assert read["result"] > 10 and read["failure"] >= 3, read
    old = HISTORIES / "limit_with_compensation.json"
    ((_, payload),) = ended(old)
    (details,) = converter.from_payloads([payload], [FailureDetails])
    assert [(c.tool, c.status, c.outcome_unknown) for c in details.compensations] == [
        ("send_email", "completed", False),
        ("cancel_order", "completed", False),
    ]
    assert details.step_records[0].tool_calls[0].arguments == ""


def test_an_approval_recorded_before_its_parsed_arguments_keeps_its_bytes() -> None:
    """A waiting call as 0.3.0 reported it to its parent (the sub_agent_approvals signal's
    input): it reads without parsed_arguments, and is written back byte for byte."""
    history = HISTORIES / "releases" / "0.3.0" / "sub_agent_waiting~c1.json"
    for event in json.loads(history.read_text())["events"]:
        signal = event.get("signalExternalWorkflowExecutionInitiatedEventAttributes")
        if signal is not None:
            payload = json_format.ParseDict(signal["input"]["payloads"][0], Payload())
            break
    converter = pydantic_data_converter.payload_converter
    (report,) = converter.from_payloads([payload], [SubAgentReport])
    assert [a.parsed_arguments for a in report.approvals] == [None]
    assert converter.to_payloads([report])[0].data == payload.data


def test_a_failure_that_carries_something_else_reads_as_one_that_carried_nothing() -> None:
    """`durable-agent result` (AgentRun.result()) on a workflow of another kind, whose failure
    carries a dict of its own: the reader gets a failure with no details, not a ValidationError
    raised from inside the client (or from a parent's workflow code, for a sub-agent's)."""
    foreign = ApplicationError("the order service is down", {"order": 7}, type="OrderError")
    assert FailureDetails.of_error(foreign) == FailureDetails(steps=0, usage=Usage())
    spent = FailureDetails(steps=3, usage=Usage(input_tokens=10))
    ours = ApplicationError("limit", spent.model_dump(mode="json"), type="AgentBudgetExceeded")
    assert FailureDetails.of_error(ours) == spent
