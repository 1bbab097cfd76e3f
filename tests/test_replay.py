"""Determinism: recorded histories replay through today's workflow code without a mismatch.

A change to the workflow that would break runs already in flight fails here, not in production.
`RECORD_HISTORIES=1 pytest tests/test_replay.py` records the histories that are missing (a new
scenario; a file deleted to record it again). Keep the old ones: they are what runs started by
older code look like, and a change versioned with `workflow.patched` must still replay them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from temporalio import workflow
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.worker import Replayer

import durable_agent.workflows.registry as registry
import durable_agent.workflows.tool_catalog as tool_catalog
import durable_agent.workflows.versioning as versioning
import tests.guardrails_for_tests  # noqa: F401  (the guardrails scenario's, and read_note)
from durable_agent.client.forking import scripted_from
from durable_agent.demo.script import DEMO_PROMPT, support_demo_script
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.activity_io import ModelResponse
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.decisions import (
    ApprovalCriteria,
    AutoModeChange,
    CallbackAnswer,
    PlanDecision,
    PlanState,
    ToolCallDecision,
)
from durable_agent.workflows.events import EVENTS_TOPIC, AgentEvent
from durable_agent.workflows.guardrail_data import GuardrailPolicy
from durable_agent.workflows.inputs import (
    AgentInput,
    AgentResult,
    AutoMode,
    CallbackTool,
    CodeMode,
    ForkOrigin,
    ForkSeed,
    Limits,
    ToolApprovalPolicy,
)
from durable_agent.workflows.model_gateway import ModelGateway
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall
from durable_agent.workflows.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from tests.helpers import TEST_WORKER_OPTIONS, call, chain_histories, scripted_input, turn

HISTORIES = Path(__file__).parent / "histories"

Handle = WorkflowHandle[Any, AgentResult]
OLDER_THAN_THE_PATCH = ["support_demo", "loop_and_errors", "step_limit", "limit_with_compensation"]


@dataclass
class Scenario:
    agent_input: AgentInput
    drive: Callable[[Handle], Awaitable[None]] | None = None
    """What a person does while the run is going (signals, updates); None: nothing."""
    runs: int = 1
    """How many runs the workflow id goes through: each continue-as-new starts a new history."""
    ends: Literal["completed", "failed"] = "completed"
    """How the last run ends."""
    workflow_id: str | None = None
    """The run's workflow id, for a run whose commands name it (a sub-agent's id is its
    parent's, a slash and the delegate call's): its name, under which its committed history
    replays. None: a fresh id."""

    def files(self, name: str) -> list[str]:
        """The history files, one per run: `name.json`, then `name.run2.json`, ..."""
        return [name] + [f"{name}.run{n}" for n in range(2, self.runs + 1)]


async def plan_waiting(handle: Handle, version: int) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        status = await handle.query(AgentWorkflow.status)
        if status.status == "awaiting_approval" and status.plan and status.plan.version == version:
            return
        assert asyncio.get_running_loop().time() < deadline, f"plan v{version} never waited"
        await asyncio.sleep(0.05)


async def reject_by_update_then_approve_by_signal(handle: Handle) -> None:
    await plan_waiting(handle, version=1)
    rejection = PlanDecision(approve=False, version=1, comment="do not cancel; refund instead")
    await handle.execute_update(AgentWorkflow.decide_plan, rejection)
    await plan_waiting(handle, version=2)
    await handle.signal(AgentWorkflow.approve_plan, "go ahead")


async def decide_the_calls_while_watching(handle: Handle) -> None:
    """A subscriber follows the progress stream (its polls are updates in the history) while a
    person approves a call by update, remembering it for the tool, and denies one by signal."""
    stream = WorkflowStreamClient(handle)
    asked: list[str] = []
    async for item in stream.subscribe(EVENTS_TOPIC):
        event = AgentEvent.model_validate(item.data)
        if event.kind == "approval_requested":
            asked.append(event.call_id or "")
            if asked == ["call_1_1"]:
                decision = ToolCallDecision(call_id="call_1_1", approve=True, remember=True)
                await handle.execute_update(AgentWorkflow.decide_tool_call, decision)
            else:
                denial = ToolCallDecision(call_id=asked[-1], approve=False, reason="no email")
                await handle.signal("decide_tool_call", denial)
    assert asked == ["call_1_1", "call_2_2"], asked


async def turn_finished(handle: Handle, number: int) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        talk = (await handle.query(AgentWorkflow.status)).conversation
        if talk is not None and talk.turn == number and not talk.working:
            return
        assert asyncio.get_running_loop().time() < deadline, f"turn {number} never finished"
        await asyncio.sleep(0.05)


async def talk_twice_then_end(handle: Handle) -> None:
    """A conversation: the second message by update, the end by signal."""
    await turn_finished(handle, 1)
    assert await handle.execute_update(AgentWorkflow.send_message, "second question") == 2
    await turn_finished(handle, 2)
    await handle.signal("end_conversation")


async def answer_one_callback(handle: Handle) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not (await handle.query(AgentWorkflow.status)).pending_callbacks:
        assert asyncio.get_running_loop().time() < deadline, "no callback waited"
        await asyncio.sleep(0.05)
    answer = CallbackAnswer(call_id="call_1_1", result={"text": "hello"})
    await handle.execute_update(AgentWorkflow.answer_callback, answer)


async def asked_of_a_person(handle: Handle, call_id: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        status = await handle.query(AgentWorkflow.status)
        if any(a.call_id == call_id and not a.judging for a in status.approvals):
            return
        assert asyncio.get_running_loop().time() < deadline, f"{call_id} never went to a person"
        await asyncio.sleep(0.05)


async def judged_then_off(handle: Handle) -> None:
    """Auto mode: the judge approves one call and is not sure of the next, which a person
    approves after an operator turned auto mode off; the third call asks a person at once."""
    await asked_of_a_person(handle, "call_1_2")
    await handle.execute_update(AgentWorkflow.set_auto_mode, AutoModeChange(off=True))
    for call_id in ("call_1_2", "call_2_1"):
        await asked_of_a_person(handle, call_id)
        decision = ToolCallDecision(call_id=call_id, approve=True)
        await handle.execute_update(AgentWorkflow.decide_tool_call, decision)


async def approve_what_waits(handle: Handle) -> None:
    """Approve each call that waits for a person, the run's own or its sub-agent's, until the
    run ends: a scenario recorded by older code, where fewer calls wait, drives both."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        status = await handle.query(AgentWorkflow.status)
        if status.status in ("completed", "failed"):
            return
        for waiting in [*status.approvals, *status.sub_agent_approvals]:
            if waiting.status == "awaiting_approval" and not waiting.judging:
                decision = ToolCallDecision(call_id=waiting.call_id, approve=True)
                with contextlib.suppress(WorkflowUpdateFailedError):  # decided meanwhile
                    await handle.execute_update(AgentWorkflow.decide_tool_call, decision)
        assert asyncio.get_running_loop().time() < deadline, f"the run never ended: {status}"
        await asyncio.sleep(0.05)


async def off_while_a_sub_agent_runs(handle: Handle) -> None:
    """Auto mode turned off while the sub-agent's first call waits for a person. Recorded by
    code from before the change reached the sub-agent: its judge approved its second call;
    today's sub-agent asks a person, whom the drive stands for."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        status = await handle.query(AgentWorkflow.status)
        if any(a.call_id == "call_1_1/call_1_1" for a in status.sub_agent_approvals):
            break
        assert asyncio.get_running_loop().time() < deadline, "the sub-agent's call never waited"
        await asyncio.sleep(0.05)
    await handle.execute_update(AgentWorkflow.set_auto_mode, AutoModeChange(off=True))
    await approve_what_waits(handle)


def judged_by(*verdicts: Any) -> ToolApprovalPolicy:
    return ToolApprovalPolicy(
        auto_mode=AutoMode(
            judge=ModelSettings(script=[turn(verdict) for verdict in verdicts]),
            criteria={"effects": ApprovalCriteria(effect="records a label")},
            default="effects",
        )
    )


OVERSIZED = "x" * 32_001
"""Over input_limits.MAX_MESSAGE_CHARS (literally: the committed history was recorded before
the bound, by code that took it)."""


async def signal_handled(handle: Handle) -> None:
    """A workflow task has completed since the newest signal: the run has handled it."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        history = (await handle.fetch_history()).events
        kinds = [event.WhichOneof("attributes") for event in history]
        signalled = max(
            i for i, kind in enumerate(kinds) if kind.endswith("_signaled_event_attributes")
        )
        if "workflow_task_completed_event_attributes" in kinds[signalled:]:
            return
        assert asyncio.get_running_loop().time() < deadline, "the signal was never handled"
        await asyncio.sleep(0.05)


async def an_oversized_message_by_signal(handle: Handle) -> None:
    """A message over the bound, by signal, then one in bounds by update: code from before the
    bounds took the first (it started turn 2, and the second started turn 3); today's ignores
    it, and the second starts turn 2."""
    await turn_finished(handle, 1)
    await handle.signal("send_message", OVERSIZED)
    await signal_handled(handle)
    talk = (await handle.query(AgentWorkflow.status)).conversation
    assert talk is not None
    if talk.turn == 2:
        await turn_finished(handle, 2)
    assert await handle.execute_update(AgentWorkflow.send_message, "next") == talk.turn + 1
    await turn_finished(handle, talk.turn + 1)
    await handle.signal("end_conversation")


async def answer_then_fail(handle: Handle) -> None:
    """Turn 1 applies an effect and answers; the second message's turn fails fatally."""
    await turn_finished(handle, 1)
    await handle.signal("send_message", "second question")


DRAFT_07_ANSWER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
"""An output schema that declares another dialect: recorded by 0.3.0, which read it with the
engine's own draft-07 meta-schema and completed; refused as the run starts since."""


CODE_MODE_SCRIPT = """
import asyncio
orders = await asyncio.gather(get_order(order_id=104999), get_order(order_id=104998))
done = [await keyed_effect(label="x")]
try:
    done.append(await keyed_effect(label="y"))
except PermissionError:
    print("y denied")
print(sum(o["total"]["amount"] for o in orders) > 0, len(done))
"""


async def decide_the_scripts_calls(handle: Handle) -> None:
    """Code mode: approve the script's first effect, deny its second (which it catches)."""
    for call_id, approve in (("script_1.3", True), ("script_1.4", False)):
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            status = await handle.query(AgentWorkflow.status)
            if any(
                a.call_id == call_id and a.status == "awaiting_approval" for a in status.approvals
            ):
                break
            assert asyncio.get_running_loop().time() < deadline, f"{call_id} never waited"
            await asyncio.sleep(0.05)
        decision = ToolCallDecision(call_id=call_id, approve=approve)
        await handle.execute_update(AgentWorkflow.decide_tool_call, decision)


def scenarios() -> dict[str, Scenario]:
    return {
        # A script of four calls: two at once, then two that wait for a person, one denied.
        "code_mode": Scenario(
            scripted_input(
                [
                    turn(call("run_code", id="script_1", code=CODE_MODE_SCRIPT)),
                    turn(text="Done.", expect="y denied"),
                ],
                tools=["get_order", "keyed_effect"],
                code_mode=CodeMode(),
                tool_approval=ToolApprovalPolicy(),
            ),
            decide_the_scripts_calls,
        ),
        # Guardrails (issue 51): the prompt checked beside the model call, a tool's result
        # withheld, an answer sent back to be revised.
        "guardrails": Scenario(
            scripted_input(
                [
                    turn(call("read_note", key="k1")),
                    turn(text="A stupid question."),
                    turn(text="The note is withheld."),
                ],
                tools=["read_note"],
                guardrails=GuardrailPolicy(
                    input=["no_injection", "slow_pass"],
                    output=["polite"],
                    tool_results=["no_secrets"],
                ),
            )
        ),
        # Its second step runs two read-only tools in one workflow task (parallel tools).
        "support_demo": Scenario(scripted_input(support_demo_script(), prompt=DEMO_PROMPT)),
        "foreign_dialect": Scenario(
            scripted_input(
                [turn(call("finish", answer="delivered"))],
                tools=[],
                output_schema=DRAFT_07_ANSWER,
            ),
            ends="failed",
        ),
        "loop_and_errors": Scenario(
            scripted_input(
                [
                    turn(call("count_me", key="r"), call("typed", order_id="x", note="n")),
                    turn(call("count_me", key="r"), call("nope")),
                    turn(call("count_me", key="r"), call("finish", answer=1)),
                    turn(call("finish", answer="stuck on count_me"), expect="3 times"),
                ],
                tools=["count_me", "typed"],
            )
        ),
        "step_limit": Scenario(
            scripted_input(
                [turn(call("count_me", key=f"s{i}")) for i in range(3)],
                tools=["count_me"],
                limits=Limits(max_steps=2),
            ),
            ends="failed",
        ),
        "limit_with_compensation": Scenario(
            scripted_input(
                [
                    turn(call("cancel_order", order_id=104999, reason="asked")),
                    turn(call("send_email", to="a@b.com", subject="s", body="b")),
                    turn(text="never reached"),
                ],
                tools=["cancel_order", "send_email"],
                limits=Limits(max_steps=2),
            ),
            ends="failed",
        ),
        # Recorded before the faults release: the failed side-effecting call is not undone.
        "failed_effect_then_limit": Scenario(
            scripted_input(
                [
                    turn(call("failing_effect", label="e")),
                    turn(call("count_me", key="after-failure")),
                    turn(text="never reached"),
                ],
                tools=["failing_effect", "count_me"],
                limits=Limits(max_steps=2),
            ),
            ends="failed",
        ),
        # Recorded before an exception after a side effect was an unknown outcome: replays
        # the charge as having changed nothing, not undone (today's run undoes it, and records
        # the patch's marker as it logs the effect).
        "side_effect_then_value_error": Scenario(
            scripted_input(
                [
                    turn(call("charge_card", label="replayed")),
                    turn(call("count_me", key="after-charge")),
                    turn(text="never reached"),
                ],
                tools=["charge_card", "count_me"],
                limits=Limits(max_steps=2),
            ),
            ends="failed",
        ),
        "plan_approval": Scenario(
            scripted_input(
                [
                    turn(call("get_order", order_id=1042), call("submit_plan", steps=["Cancel"])),
                    turn(call("submit_plan", steps=["Refund 10"]), expect="refund instead"),
                    turn(call("issue_refund", order_id=1042, amount=10), expect="approved plan v2"),
                    turn(text="Refunded."),
                ],
                tools=["get_order", "cancel_order", "issue_refund"],
                plan=True,
            ),
            drive=reject_by_update_then_approve_by_signal,
        ),
        "continue_as_new": Scenario(
            scripted_input(
                [*[turn(call("count_me", key=f"can-{i}")) for i in range(3)], turn(text="ok")],
                tools=["count_me"],
                continue_as_new_after_steps=2,
            ),
            runs=2,
        ),
        "tool_approval": Scenario(
            scripted_input(
                [
                    turn(call("issue_refund", order_id=1042, amount=5)),
                    turn(
                        call("issue_refund", order_id=1041, amount=5),
                        call("send_email", to="a@b.com", subject="Refunds", body="Done."),
                    ),
                    turn(text="Refunded twice; no email.", expect="no email"),
                ],
                tools=["issue_refund", "send_email"],
                tool_approval=ToolApprovalPolicy(),
            ),
            drive=decide_the_calls_while_watching,
        ),
        "conversation": Scenario(
            scripted_input(
                [
                    turn(call("count_me", key="talk")),
                    turn(text="one"),
                    turn(text="two", expect="second question"),
                ],
                tools=["count_me"],
                conversation=True,
            ),
            drive=talk_twice_then_end,
        ),
        # Recorded before workflows/input_limits.py: replays taking the oversized message.
        "oversized_signal_message": Scenario(
            scripted_input(
                [turn(text="one"), turn(text="two"), turn(text="three")],
                conversation=True,
            ),
            drive=an_oversized_message_by_signal,
        ),
        # Recorded before a failed conversation kept its answered turns' effects: replays
        # undoing turn 1's too (today's run keeps it, and records the patch's marker).
        "failed_conversation": Scenario(
            scripted_input(
                [
                    turn(call("keyed_effect", label="turn-1")),
                    turn(text="one"),
                    turn(call("keyed_effect", label="turn-2"), expect="second question"),
                    turn(call("bad_credential")),
                    turn(text="never"),
                ],
                tools=["keyed_effect", "bad_credential"],
                conversation=True,
            ),
            drive=answer_then_fail,
            ends="failed",
        ),
        # A fork at step 1 (forking.py): it starts from a seed transcript, at step 2.
        "fork": Scenario(
            scripted_input(
                scripted_from(1, [turn(call("count_me", key="fork")), turn(text="forked")]),
                tools=["count_me"],
                fork=ForkSeed(
                    origin=ForkOrigin(workflow_id="replay-original", run_id="run-1", step=1),
                    messages=[
                        UserMessage(content="where is order 1042"),
                        AssistantMessage(
                            tool_calls=(ToolCall(id="call_1_1", name="count_me", arguments="{}"),)
                        ),
                        ToolResult(tool_call_id="call_1_1", tool_name="count_me", content="1"),
                    ],
                ),
            )
        ),
        # A fork of a plan-mode run after its plan was approved (issue 38): the seeded approval
        # lets a call that changes data run at once, with tool approval on and nobody asked.
        # Callback tools (issue 41): one answered by update, one that times out unanswered.
        "callbacks": Scenario(
            scripted_input(
                [
                    turn(call("read_local_file", path="a.txt"), call("read_fast", path="b.txt")),
                    turn(text="{last_tool_result}"),
                ],
                tools=[],
                callback_tools=[
                    CallbackTool(name="read_local_file", description="Read a local file."),
                    CallbackTool(name="read_fast", description="Read it.", timeout_seconds=0.5),
                ],
            ),
            drive=answer_one_callback,
        ),
        # Auto-mode approvals (issue 41): a judge's verdicts, then an operator turns it off.
        "auto_mode": Scenario(
            scripted_input(
                [
                    turn(call("keyed_effect", label="a"), call("keyed_effect", label="b")),
                    turn(call("keyed_effect", label="c")),
                    turn(text="wrote three"),
                ],
                tools=["keyed_effect"],
                tool_approval=ToolApprovalPolicy(
                    auto_mode=AutoMode(
                        judge=ModelSettings(
                            script=[
                                turn(
                                    call(
                                        "verdict",
                                        decision="approve",
                                        confidence=0.95,
                                        reason="fine",
                                    )
                                ),
                                turn(
                                    call(
                                        "verdict",
                                        decision="approve",
                                        confidence=0.5,
                                        reason="unsure",
                                    )
                                ),
                            ]
                        ),
                        criteria={"effects": ApprovalCriteria(effect="records a label")},
                        default="effects",
                    )
                ),
            ),
            drive=judged_then_off,
        ),
        # Issue 47, each recorded by the code before its fix (each replays its patch's old
        # branch): a model-chosen call id with a '/' (kept then, renamed now)...
        "slashed_call_id": Scenario(
            scripted_input(
                [
                    turn(
                        call("delegate", id="call_1_1/call_2_1", task="count", tools=["count_me"])
                    ),
                    turn(text="ok"),
                ],
                tools=["count_me"],
                sub_agents=True,
                sub_agent_model=ModelSettings(
                    script=[turn(call("count_me", key="slash")), turn(text="counted")]
                ),
            ),
            workflow_id="slashed_call_id",
        ),
        # ... a verdict with a key twice (approved then by its last value, a person's now) ...
        "verdict_repeated_key": Scenario(
            scripted_input(
                [turn(call("keyed_effect", label="v")), turn(text="wrote it")],
                tools=["keyed_effect"],
                tool_approval=judged_by(
                    ScriptedCall(
                        name="verdict",
                        arguments='{"decision": "escalate", "confidence": 0.9, '
                        '"reason": "unsure", "decision": "approve"}',
                    )
                ),
            ),
            drive=approve_what_waits,
        ),
        # ... and auto mode turned off while a sub-agent runs (not forwarded then).
        "auto_mode_off_with_a_sub_agent": Scenario(
            scripted_input(
                [turn(call("delegate", task="write a and b")), turn(text="wrote two")],
                tools=["keyed_effect"],
                sub_agents=True,
                sub_agent_model=ModelSettings(
                    script=[
                        turn(call("keyed_effect", label="a")),
                        turn(call("keyed_effect", label="b")),
                        turn(text="wrote a and b"),
                    ]
                ),
                tool_approval=judged_by(
                    call("verdict", decision="escalate", confidence=0.9, reason="a person"),
                    call("verdict", decision="approve", confidence=0.95, reason="fine"),
                ),
            ),
            drive=off_while_a_sub_agent_runs,
            workflow_id="auto_mode_off_with_a_sub_agent",
        ),
        "plan_fork": Scenario(
            scripted_input(
                scripted_from(
                    1, [turn(call("keyed_effect", label="plan-fork")), turn(text="forked")]
                ),
                tools=["keyed_effect"],
                plan=True,
                tool_approval=ToolApprovalPolicy(),
                fork=ForkSeed(
                    origin=ForkOrigin(workflow_id="replay-original", run_id="run-1", step=1),
                    messages=[
                        UserMessage(content="where is order 1042"),
                        AssistantMessage(
                            tool_calls=(
                                ToolCall(
                                    id="call_1_1",
                                    name="submit_plan",
                                    arguments='{"steps":["Record it"]}',
                                ),
                            )
                        ),
                        ToolResult(
                            tool_call_id="call_1_1",
                            tool_name="submit_plan",
                            content="A person approved plan v1. Carry it out now.",
                        ),
                    ],
                    plan=PlanState(version=1, steps=["Record it"], status="approved"),
                ),
            )
        ),
    }


async def record(client: Client, task_queue: str, scenario: Scenario) -> list[WorkflowHistory]:
    """Run the scenario to its end; the histories of all its runs, first to last."""
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            scenario.agent_input,
            id=scenario.workflow_id or f"replay-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        if scenario.drive is not None:
            await scenario.drive(handle)
        with contextlib.suppress(WorkflowFailureError):  # the limit scenarios end failed
            await handle.result()
    return await chain_histories(client, handle.id, handle.first_execution_run_id)


def replayer(workflow_class: type = AgentWorkflow) -> Replayer:
    return Replayer(workflows=[workflow_class], data_converter=pydantic_data_converter)


@pytest.mark.parametrize("name", sorted(scenarios()))
async def test_a_fresh_history_replays(client: Client, task_queue: str, name: str) -> None:
    scenario = scenarios()[name]
    histories = await record(client, task_queue, scenario)

    assert len(histories) == scenario.runs
    last_event = histories[-1].events[-1]
    assert (
        last_event.WhichOneof("attributes")
        == f"workflow_execution_{scenario.ends}_event_attributes"
    )
    for history in histories:
        result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None
    if os.environ.get("RECORD_HISTORIES"):
        for file, history in zip(scenario.files(name), histories, strict=True):
            path = HISTORIES / f"{file}.json"
            # Only what is missing: a history made by older code is worth more than a new one.
            if not path.exists():
                path.write_text(history.to_json())


def committed() -> list[Path]:
    return sorted(HISTORIES.glob("*.json"))


@pytest.mark.parametrize("path", committed(), ids=lambda p: p.stem)
async def test_a_committed_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())

    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)

    assert result.replay_failure is None


def test_the_committed_histories_are_there() -> None:
    expected = {file for name, s in scenarios().items() for file in s.files(name)}
    assert {p.stem for p in committed()} == expected


def events(path: Path) -> list[Any]:
    return list(WorkflowHistory.from_json(path.stem, path.read_text()).events)


def test_the_committed_histories_cover_what_they_are_named_for() -> None:
    def scheduled_per_task(path: Path) -> list[int]:
        """Activities scheduled by each workflow task, in order."""
        counts: list[int] = []
        for event in events(path):
            if event.HasField("workflow_task_completed_event_attributes"):
                counts.append(0)
            elif event.HasField("activity_task_scheduled_event_attributes"):
                counts[-1] += 1
        return counts

    def kinds(path: Path) -> set[str]:
        return {event.WhichOneof("attributes") for event in events(path)}

    def patched(path: Path) -> bool:
        return "marker_recorded_event_attributes" in kinds(path)

    assert max(scheduled_per_task(HISTORIES / "support_demo.json")) == 2
    # Recorded before the search attributes' patch, so they replay its old branch.
    assert not any(patched(HISTORIES / f"{name}.json") for name in OLDER_THAN_THE_PATCH)
    assert patched(HISTORIES / "plan_approval.json")
    plan = kinds(HISTORIES / "plan_approval.json")
    assert {
        "workflow_execution_signaled_event_attributes",
        "workflow_execution_update_accepted_event_attributes",
        "workflow_execution_update_completed_event_attributes",
    } <= plan
    # One callback answered by update, one waited out on its timer.
    assert {
        "workflow_execution_update_accepted_event_attributes",
        "timer_fired_event_attributes",
    } <= kinds(HISTORIES / "callbacks.json")
    talk = kinds(HISTORIES / "conversation.json")
    assert {
        "marker_recorded_event_attributes",
        "workflow_execution_update_accepted_event_attributes",
        "workflow_execution_signaled_event_attributes",
        "workflow_execution_completed_event_attributes",
    } <= talk
    # Each kind of guardrail ran as its own activity, named after it; the input's beside the
    # first model call, in the workflow task that scheduled it.
    guarded = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events(HISTORIES / "guardrails.json")
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert guarded[:3] == ["call_model", "guardrail:no_injection", "guardrail:slow_pass"]
    assert {"guardrail:no_secrets", "guardrail:polite"} <= set(guarded)
    assert scheduled_per_task(HISTORIES / "guardrails.json")[0] == 3
    # Failed by code from before answered turns' effects were kept: both turns' undone.
    failed = events(HISTORIES / "failed_conversation.json")
    undos = [
        e
        for e in failed
        if e.activity_task_scheduled_event_attributes.activity_type.name == "undo_keyed_effect"
    ]
    assert len(undos) == 2
    assert failed[-1].HasField("workflow_execution_failed_event_attributes")
    # Failed by code from before an exception after a side effect was an unknown outcome: the
    # charge was not undone.
    charged = events(HISTORIES / "side_effect_then_value_error.json")
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in charged]
    assert "charge_card" in scheduled and "refund_charge" not in scheduled
    assert charged[-1].HasField("workflow_execution_failed_event_attributes")
    # Taken by code from before the bounds: the oversized message went to the model, and no
    # marker of the bounds' patch (the same run today records one and ignores the message).
    oversized = events(HISTORIES / "oversized_signal_message.json")
    model_inputs = [
        e.SerializeToString()
        for e in oversized
        if e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    ]
    assert OVERSIZED.encode() in model_inputs[1]
    assert not any(
        versioning.SIGNAL_INPUT_BOUNDS.encode() in e.SerializeToString() for e in oversized
    )
    first = kinds(HISTORIES / "continue_as_new.json")
    assert "workflow_execution_continued_as_new_event_attributes" in first
    assert "workflow_execution_completed_event_attributes" in kinds(
        HISTORIES / "continue_as_new.run2.json"
    )
    # A fork seeded with an approved plan ran the call that changes data with nobody asked.
    plan_fork = events(HISTORIES / "plan_fork.json")
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in plan_fork
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["call_model", "keyed_effect", "call_model"]
    assert not kinds(HISTORIES / "plan_fork.json") & {
        "workflow_execution_signaled_event_attributes",
        "workflow_execution_update_accepted_event_attributes",
    }
    # Issue 47's, by the code before each fix: no marker of its patch, and what it did then.
    issue_47 = {
        "slashed_call_id": versioning.SLASHED_CALL_IDS,
        "verdict_repeated_key": versioning.VERDICT_DUPLICATE_KEYS,
        "auto_mode_off_with_a_sub_agent": versioning.AUTO_MODE_FOR_THE_TREE,
    }
    for name, patch_id in issue_47.items():
        recorded = b"".join(e.SerializeToString() for e in events(HISTORIES / f"{name}.json"))
        assert patch_id.encode() not in recorded, name

    def tool_inputs(name: str) -> list[bytes]:
        return [
            e.activity_task_scheduled_event_attributes.input.payloads[0].data
            for e in events(HISTORIES / f"{name}.json")
            if e.activity_task_scheduled_event_attributes.activity_type.name
            not in ("", "call_model")
        ]

    # The sub-agent's workflow id was made of the call id as the model wrote it.
    started = [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in events(HISTORIES / "slashed_call_id.json")
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert started == ["slashed_call_id/call_1_1/call_2_1"]
    # The judge's repeated key read as approve: the call ran, nobody was asked.
    assert len(tool_inputs("verdict_repeated_key")) == 1
    assert "workflow_execution_update_accepted_event_attributes" not in kinds(
        HISTORIES / "verdict_repeated_key.json"
    )
    # set_auto_mode while the sub-agent ran, and only a decision signalled to it.
    off = events(HISTORIES / "auto_mode_off_with_a_sub_agent.json")
    updates = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for e in off
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert updates == ["set_auto_mode", "decide_tool_call"]
    forwarded = [
        e.signal_external_workflow_execution_initiated_event_attributes.signal_name
        for e in off
        if e.HasField("signal_external_workflow_execution_initiated_event_attributes")
    ]
    assert forwarded == ["decide_tool_call"]


def with_tool_result(path: Path, tool: str, **fields: Any) -> WorkflowHistory:
    """The history in `path` with `fields` set in the result of `tool`'s activity: what a newer
    worker that ran the tool would have sent to the workflow."""
    data = json.loads(path.read_text())
    scheduled = {
        event["eventId"]: event["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for event in data["events"]
        if "activityTaskScheduledEventAttributes" in event
    }
    changed = 0
    for event in data["events"]:
        completed = event.get("activityTaskCompletedEventAttributes")
        if completed is None or scheduled[completed["scheduledEventId"]] != tool:
            continue
        payload = completed["result"]["payloads"][0]
        result = json.loads(base64.b64decode(payload["data"])) | fields
        payload["data"] = base64.b64encode(json.dumps(result).encode()).decode()
        changed += 1
    assert changed, f"no result of {tool} in {path.name}"
    return WorkflowHistory.from_json(path.stem, data)


async def test_an_unknown_outcome_from_a_newer_worker_replays_as_the_run_ran() -> None:
    """A fleet mid-upgrade: a newer worker ran the charge and said its outcome is unknown, and
    an older one ran the workflow, which did not read that and failed the run without undoing
    it. Today's code replays that history as it ran: without the patch's marker, nothing is
    logged, and no refund is scheduled where the history has the run's failure."""
    history = with_tool_result(
        HISTORIES / "side_effect_then_value_error.json", "charge_card", outcome_unknown=True
    )

    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)

    assert result.replay_failure is None, str(result.replay_failure)[:2000]


# Not sandboxed: the sandbox would re-import this test module and all it imports. What is
# checked here is the replayer's matching of commands to events, which does not need it.
@workflow.defn(name="AgentWorkflow", sandboxed=False)
class UnsandboxedAgentWorkflow(AgentWorkflow):
    @workflow.run
    async def run(self, agent_input: AgentInput) -> AgentResult:
        return await super().run(agent_input)


_MODEL_CALL = ModelGateway._execute


def looking_up_before_each_model_call(*, versioned: bool) -> Any:
    """The model gateway with one change: an extra activity (a look-up of the customer) before
    each model call, behind `workflow.patched` or not. A history recorded before it has the
    model call where this code now schedules the look-up."""

    async def execute(self: ModelGateway, request: Any, summary: str) -> ModelResponse:
        if not versioned or workflow.patched("look-up-before-each-model-call"):
            await workflow.execute_activity(
                "get_customer", {"email": "a@b.com"}, start_to_close_timeout=timedelta(seconds=5)
            )
        return await _MODEL_CALL(self, request, summary)

    return execute


async def test_an_unversioned_change_fails_the_replay_and_a_patched_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = HISTORIES / "support_demo.json"
    history = WorkflowHistory.from_json(path.stem, path.read_text())

    monkeypatch.setattr(
        ModelGateway, "_execute", looking_up_before_each_model_call(versioned=False)
    )
    with pytest.raises(workflow.NondeterminismError) as failure:
        await replayer(UnsandboxedAgentWorkflow).replay_workflow(history)
    assert "get_customer" in str(failure.value) and "call_model" in str(failure.value)
    monkeypatch.setattr(ModelGateway, "_execute", looking_up_before_each_model_call(versioned=True))
    await replayer(UnsandboxedAgentWorkflow).replay_workflow(history)


async def test_a_tool_redeployed_with_other_specs_does_not_change_what_a_run_replays(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The specs are recorded when the run starts (the resolve_tools local activity), so a
    worker whose registry now says the tool changes data (and so waits for a person) still
    replays the run as it ran."""
    script = [turn(call("count_me", key=f"redeploy-{uuid.uuid4()}")), turn(text="done")]
    agent_input = scripted_input(script, tools=["count_me"], tool_approval=ToolApprovalPolicy())
    (history,) = await record(client, task_queue, Scenario(agent_input))
    markers = [e for e in history.events if e.HasField("marker_recorded_event_attributes")]
    assert any(
        m.marker_recorded_event_attributes.marker_name == "core_local_activity" for m in markers
    )

    spec = tool_catalog.get("count_me")
    assert spec is not None and not spec.side_effects
    monkeypatch.setitem(
        registry.tool_specs, "count_me", {**spec.model_dump(), "side_effects": True}
    )
    await replayer().replay_workflow(history)
