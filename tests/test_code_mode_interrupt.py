"""A conversation's interrupt while its turn runs a script (docs/code-mode.md): the script stops
where it is, with no leg after the interrupt; its calls in flight end as a reply's do (a read-only
one is cancelled, one that changes data and has started finishes, one that waits for a person is
withdrawn and not run); run_code gets exactly one result, which names what ran; nothing runs
twice; and the conversation goes on."""

from __future__ import annotations

import textwrap
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

import tests.tools_for_tests as test_tools
from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import CodeMode, ToolApprovalPolicy
from durable_agent.workflows.transcript import Transcript
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, turn
from tests.test_conversation import _started_activities, conversation, start


async def scheduled(run: AgentRun) -> list[str]:
    history = await run.handle.fetch_history()
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def results(run: AgentRun) -> dict[str, str]:
    transcript = await run.transcript()
    assert Transcript(messages=transcript).is_complete()
    return {m.tool_call_id: m.content for m in transcript if m.role == "tool"}


async def test_an_interrupt_mid_batch_stops_the_script_and_lets_its_started_effect_finish(
    client: Client, task_queue: str
) -> None:
    label, after = f"slow-{uuid.uuid4()}", f"after-{uuid.uuid4()}"
    test_tools.slow_effect_started.clear()
    code = textwrap.dedent(
        f"""
        import asyncio
        try:
            await asyncio.gather(slow_effect(label="{label}", seconds=2.0), block(seconds=30))
        except RuntimeError as stopped:
            print("caught", stopped)
        await count_me(key="{after}")
        """
    )
    script = [
        turn(call("run_code", id="script_1", code=code)),
        turn(text="It was interrupted.", expect="interrupted"),
    ]
    agent_input = conversation(
        script, tools=["slow_effect", "block", "count_me"], code_mode=CodeMode()
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)

        async def both_started() -> bool:
            return test_tools.slow_effect_started.is_set() and (
                await _started_activities(run, "block") == 1
            )

        await eventually(both_started, what="the script's two calls started")
        assert await run.interrupt() == 1
        assert (await run.turn(1)).outcome == "interrupted"

        # run_code has its one result: the script stopped, and what ran is named.
        assert (await results(run)) == {
            "script_1": "Error: the script was stopped: the user interrupted the turn (its last "
            "calls: script_1.1 slow_effect ran, script_1.2 block cancelled). It made 2 tool "
            "calls; their effects stand."
        }
        # The effect that had started finished, once; no leg ran after the interrupt, so the
        # script neither caught the cancel nor made its next call.
        assert list(test_tools.applied.values()).count(label) == 1
        assert test_tools.executions[after] == 0
        types = await scheduled(run)
        assert (types.count("slow_effect"), types.count("block")) == (1, 1)
        assert types.count("run_script") == 1 and "count_me" not in types
        records = [c for record in await run.trace() for c in record.tool_calls]
        outcomes = [(r.id, r.outcome) for r in records]
        assert outcomes == [("script_1.1", "ok"), ("script_1.2", "error"), ("script_1", "error")]

        # The conversation goes on; ending it undoes the interrupted turn's effect, as any.
        assert (await run.send("what happened?")).answer == "It was interrupted."
        result = await run.end()
    assert [e.call.tool_call_id for e in result.side_effects] == ["script_1.1"]


async def test_an_interrupt_while_a_scripts_call_waits_for_a_person_withdraws_it(
    client: Client, task_queue: str
) -> None:
    label, after = f"gated-{uuid.uuid4()}", f"after-{uuid.uuid4()}"
    code = textwrap.dedent(
        f"""
        try:
            await write_thing(label="{label}")
        except (PermissionError, RuntimeError) as stopped:
            print("caught", stopped)
        await count_me(key="{after}")
        """
    )
    script = [
        turn(call("run_code", id="script_1", code=code)),
        turn(text="Nothing was written.", expect="interrupted"),
    ]
    agent_input = conversation(
        script,
        tools=["write_thing", "count_me"],
        code_mode=CodeMode(),
        tool_approval=ToolApprovalPolicy(),
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)

        async def waits() -> bool:
            return [a.call_id for a in await run.pending_tool_calls()] == ["script_1.1"]

        await eventually(waits, what="script_1.1 waits for a person")
        assert (await run.status()).status == "awaiting_approval"
        assert await run.interrupt() == 1
        assert (await run.turn(1)).outcome == "interrupted"

        assert (await results(run)) == {
            "script_1": "Error: the script was stopped: the user interrupted the turn (its last "
            "calls: script_1.1 write_thing not run). It made 1 tool call; their effects stand."
        }
        status = await run.status()
        assert status.status != "awaiting_approval" and await run.pending_tool_calls() == []
        assert ("start", label) not in test_tools.events
        assert test_tools.executions[after] == 0
        assert "write_thing" not in await scheduled(run)
        assert (await run.send("what happened?")).answer == "Nothing was written."
        result = await run.end()
        events = [e.data async for e in run.events() if e.data.call_id == "script_1.1"]
    assert result.side_effects == []
    # The withdrawal, then the call's end, each named by its script.
    assert [(e.kind, e.outcome, e.script) for e in events] == [
        ("approval_requested", None, "script_1"),
        ("approval_decided", "not_run", "script_1"),
        ("tool_call_finished", "not_run", "script_1"),
    ]


async def test_an_interrupt_during_a_leg_stops_the_script_before_the_calls_it_asks_for(
    client: Client, task_queue: str
) -> None:
    after = f"after-{uuid.uuid4()}"
    # A leg of a few seconds (about 5 million steps a second in the sandbox): long enough that
    # the interrupt lands while it runs, and the calls it then asks for are never made.
    code = textwrap.dedent(
        f"""
        x = 0
        for i in range(15_000_000):
            x += i
        print("counted")
        await count_me(key="{after}")
        """
    )
    script = [
        turn(call("run_code", id="script_1", code=code)),
        turn(text="Stopped.", expect="interrupted"),
    ]
    agent_input = conversation(script, tools=["count_me"], code_mode=CodeMode(max_cpu_seconds=60))
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)

        async def leg_runs() -> bool:
            return await _started_activities(run, "run_script") == 1

        await eventually(leg_runs, what="the script's first leg runs")
        assert await run.interrupt() == 1
        assert (await run.turn(1)).outcome == "interrupted"
        assert (await results(run)) == {
            "script_1": "Error: the script was stopped: the user interrupted the turn before it "
            "could make 1 more call. It made 0 tool calls.\ncounted"
        }
        assert test_tools.executions[after] == 0
        types = await scheduled(run)
        assert types.count("run_script") == 1 and "count_me" not in types
        assert [c.id for record in await run.trace() for c in record.tool_calls] == ["script_1"]
        assert (await run.send("what happened?")).answer == "Stopped."
        await run.end()
