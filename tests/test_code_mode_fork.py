"""Forks of a run in code mode, on a real dev server: a fork at the step whose reply was a
run_code call, or at a step after it, begins with the script's result in its transcript (every
call answered, run_code's too), runs none of the script's calls again (counted by the tools' own
effects), inherits the script's side effects as it inherits a direct call's (listed, never
undone), and goes on with its own replies, its own scripts included."""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

import tests.tools_for_tests as test_tools
from durable_agent.client.agent_client import AgentClient, AgentRunFailed
from durable_agent.client.forking import ForkError, read_run, scripted_from
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import AgentInput, CodeMode, Limits
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.transcript import Transcript
from tests.helpers import (
    FAST_MODEL_RETRY,
    TEST_WORKER_OPTIONS,
    TRUSTED,
    call,
    chain_histories,
    eventually,
    scripted_input,
    turn,
)
from tests.test_fork_cli import starter
from tests.test_replay import replayer

TOOLS = ["keyed_effect", "count_me"]


def script_code(tag: str, key: str) -> str:
    """Two effects with a read between them, in two legs' worth of calls."""
    return textwrap.dedent(
        f"""
        a = await keyed_effect(label="{tag}-a")
        n = await count_me(key="{key}")
        b = await keyed_effect(label="{tag}-b")
        print(a["label"], b["label"], n)
        """
    )


async def tool_activities(handle) -> list[str]:  # type: ignore[no-untyped-def]
    names = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            if name not in ("call_model", "run_script"):
                names.append(name)
    return names


def labels_run(tag: str) -> list[str]:
    return [label for label, _, _ in test_tools.keys_seen if label.startswith(tag)]


async def test_a_fork_at_a_script_step_inherits_the_script_and_goes_on_with_its_own(
    client: Client, task_queue: str
) -> None:
    tag, key, later = f"t-{uuid.uuid4()}", f"k-{uuid.uuid4()}", f"l-{uuid.uuid4()}"
    agents = AgentClient(client, task_queue)
    original_script = [
        turn(call("run_code", id="script_1", code=script_code(tag, key))),
        turn(call("count_me", key=later), expect=f"{tag}-b"),
        turn(text="done: {last_tool_result}"),
    ]
    original_input = scripted_input(original_script, tools=TOOLS, code_mode=CodeMode())
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(original_input)
        assert (await original.result()).answer == f"done: {later} has run 1 times"
        original_transcript = await original.transcript()
        assert labels_run(tag) == [f"{tag}-a", f"{tag}-b"]

        # At step 1, whose reply was run_code: the fork's own step 2 is a script of its own,
        # under the same call id (renamed, as any repeated id is), which changes data too.
        at_script = await agents.fork(
            original.id,
            step=1,
            model=ModelSettings(
                script=scripted_from(
                    1,
                    [
                        turn(
                            call(
                                "run_code",
                                id="script_1",
                                code=f'await keyed_effect(label="{tag}-c")',
                            ),
                            expect=f"{tag}-b",  # it read the inherited script's result
                        ),
                        turn(text="forked: {last_tool_result}"),
                    ],
                ),
                retry=FAST_MODEL_RETRY,
            ),
            tool_approval=TRUSTED,
        )
        at_script_result = await at_script.result()
        at_script_transcript = await at_script.transcript()

        # At step 2, after the script: the fork's own step 3 changes data and then the fork
        # runs out of steps, undoing its own effect and none of the script's.
        test_tools.undone.clear()
        after = await agents.fork(
            original.id,
            step=2,
            model=ModelSettings(
                script=scripted_from(
                    2,
                    [
                        turn(call("keyed_effect", label=f"{tag}-d"), expect=f"{later} has run"),
                        turn(text="never reached"),
                    ],
                ),
                retry=FAST_MODEL_RETRY,
            ),
            limits=Limits(max_steps=1),
            tool_approval=TRUSTED,
        )
        with pytest.raises(AgentRunFailed) as failed:
            await after.result()
        after_transcript = await after.transcript()
        after_seed = (await read_run(client, after.id)).input.fork

    # Each fork's transcript is one a provider takes: every call answered, run_code's included.
    for transcript in (at_script_transcript, after_transcript):
        assert Transcript(messages=transcript).is_complete()
    assert at_script_transcript[:3] == original_transcript[:3]  # the prompt, run_code, its result
    assert after_transcript[:5] == original_transcript[:5]
    # The script's calls ran once, in the original: not in either fork.
    assert test_tools.executions[key] == 1 and test_tools.executions[later] == 1
    assert labels_run(tag) == [f"{tag}-a", f"{tag}-b", f"{tag}-c", f"{tag}-d"]
    assert await tool_activities(at_script.handle) == ["keyed_effect"]
    assert await tool_activities(after.handle) == ["keyed_effect", "undo_keyed_effect"]

    # The fork at the script's step went on with its own replies, its own script included.
    assert at_script_result.answer.startswith("forked: ") and "-c" in at_script_result.answer
    assert [r.step for r in at_script_result.step_records] == [2, 3]
    records = at_script_result.step_records[0].tool_calls
    (own_script,) = [r.id for r in records if r.name == "run_code"]
    assert own_script != "script_1"  # renamed: the inherited transcript holds script_1
    assert [(r.id, r.script) for r in records] == [
        (f"{own_script}.1", own_script),
        (own_script, None),
    ]
    assert [e.call.tool_call_id for e in at_script_result.side_effects] == [f"{own_script}.1"]

    # Both inherited the script's effects, as a fork inherits a direct call's: listed in
    # forked_from, in the order they happened, never undone.
    assert after_seed is not None
    for fork in (at_script_result.forked_from, after_seed.origin):
        assert fork is not None
        inherited = [(e.call.tool_call_id, e.call.result, e.compensation) for e in fork.effects]
        assert inherited == [
            ("script_1.1", {"label": f"{tag}-a"}, "undo_keyed_effect"),
            ("script_1.3", {"label": f"{tag}-b"}, "undo_keyed_effect"),
        ]
    assert failed.value.type == "AgentStepLimitExceeded"
    compensations = failed.value.details.compensations
    assert [(c.tool, c.status) for c in compensations] == [("keyed_effect", "completed")]
    assert test_tools.undone == [f"{tag}-d"]


ENDINGS = {
    "a value": ('n = await count_me(key="{key}")\nprint("read", n)\n{{"n": n}}', CodeMode()),
    "an exception": (
        'n = await count_me(key="{key}")\nprint("read", n)\nraise ValueError("no")',
        CodeMode(),
    ),
    "output past its bound": (
        'n = await count_me(key="{key}")\nfor i in range(300):\n    print("line", i, n)\nn',
        CodeMode(max_output_chars=1000),
    ),
}


async def test_a_fork_at_a_last_step_that_ran_a_script_reads_its_result_from_the_legs(
    client: Client, task_queue: str
) -> None:
    """A run that stopped right after its script (a limit, here) made no request that holds
    run_code's result: the fork reads it from the script's legs, as the model read it."""
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        for what, (template, mode) in ENDINGS.items():
            key = f"k-{uuid.uuid4()}"
            code = template.format(key=key)
            original = await agents.start(
                scripted_input(
                    [turn(call("run_code", id="script_1", code=code)), turn(text="never")],
                    tools=TOOLS,
                    code_mode=mode,
                    limits=Limits(max_steps=1),
                )
            )
            with pytest.raises(AgentRunFailed, match="max_steps=1 reached"):
                await original.result()
            original_transcript = await original.transcript()

            forked = await agents.fork(
                original.id,
                step=1,
                model=ModelSettings(
                    script=scripted_from(1, [turn(text="read: {last_tool_result}")]),
                    retry=FAST_MODEL_RETRY,
                ),
                tool_approval=TRUSTED,
            )
            result = await forked.result()
            transcript = await forked.transcript()

            assert transcript[:3] == original_transcript[:3], what
            assert result.answer == f"read: {original_transcript[2].content}", what
            assert test_tools.executions[key] == 1, what
            # Each ending as the model read it in the original: ok, stopped, cut.
            read = original_transcript[2]
            assert read.is_error is (what == "an exception"), what
            assert ("more characters printed, not shown" in read.content) is (
                what == "output past its bound"
            ), what


def gathered_code(tag: str) -> str:
    """An effect, three reads at once (one batch), another effect: five calls in four legs."""
    return textwrap.dedent(
        f"""
        import asyncio
        a = await keyed_effect(label="{tag}-a")
        print("effect", a["label"])
        reads = await asyncio.gather(*(count_me(key=f"{tag}-{{i}}") for i in (1, 2, 3)))
        b = await keyed_effect(label="{tag}-b")
        print(a["label"], reads[0], b["label"])
        len(reads)
        """
    )


async def test_a_fork_inside_a_script_resumes_it_at_a_call_and_runs_the_rest_afresh(
    client: Client, task_queue: str
) -> None:
    tag = f"t-{uuid.uuid4()}"
    agents = AgentClient(client, task_queue)
    original_script = [
        turn(call("run_code", id="script_1", code=gathered_code(tag))),
        turn(text="done: {last_tool_result}"),
    ]
    test_tools.undone.clear()
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(
            scripted_input(original_script, tools=TOOLS, code_mode=CodeMode())
        )
        original_result = await original.result()
        original_transcript = await original.transcript()

        # Inside the batch of three reads, at the second: the first effect and the first read
        # keep the original's results; the second and third reads and the last effect run.
        inside = await agents.fork(
            original.id,
            step=1,
            call="script_1.3",
            model=ModelSettings(
                script=scripted_from(1, [turn(text="forked: {last_tool_result}")]),
                retry=FAST_MODEL_RETRY,
            ),
            tool_approval=TRUSTED,
        )
        result = await inside.result()
        transcript = await inside.transcript()

        # At the last call, in a fork that then runs out of steps: it undoes its own effect,
        # the script's last, and not the one it inherited.
        at_last = await agents.fork(
            original.id,
            step=1,
            call="script_1.5",
            model=ModelSettings(
                script=scripted_from(1, [turn(call("count_me", key=f"{tag}-x")), turn(text="no")]),
                retry=FAST_MODEL_RETRY,
            ),
            limits=Limits(max_steps=1),
            tool_approval=TRUSTED,
        )
        with pytest.raises(AgentRunFailed) as failed:
            await at_last.result()

        # Forks of the fork: after its step 1, and inside its script again, at its last call.
        after_it = await agents.fork(
            inside.id,
            step=1,
            model=ModelSettings(script=scripted_from(1, [turn(text="again")])),
            tool_approval=TRUSTED,
        )
        after_it_result = await after_it.result()
        inside_it = await agents.fork(
            inside.id,
            step=1,
            call="script_1.5",
            model=ModelSettings(script=scripted_from(1, [turn(text="again")])),
            tool_approval=TRUSTED,
        )
        inside_it_result = await inside_it.result()
        inside_it_transcript = await inside_it.transcript()
        recorded = await read_run(client, inside.id)
        with pytest.raises(ForkError, match=f"fork {original.id} at script_1.4$"):
            await agents.fork(inside.id, step=1, call="script_1.4")

        with pytest.raises(ForkError, match=r"made no call 'script_1\.6' \(it made 5"):
            await agents.fork(original.id, step=1, call="script_1.6")
        with pytest.raises(ForkError, match="a fork inside a script needs a step whose reply"):
            await agents.fork(original.id, step=2, call="script_1.1")

    # What the model read of the script is what it read in the original: the script got the
    # inherited read's result, and the rest ran again (the reads count their runs).
    assert transcript[:3] == original_transcript[:3]
    assert Transcript(messages=transcript).is_complete()
    assert result.answer == "forked: " + original_transcript[2].content
    assert [test_tools.executions[f"{tag}-{i}"] for i in (1, 2, 3)] == [1, 2, 2]
    assert [label for label, _, _ in test_tools.keys_seen if label.startswith(tag)] == [
        f"{tag}-a",
        f"{tag}-b",
        f"{tag}-b",  # the fork inside the batch
        f"{tag}-b",  # the fork at the last call
        f"{tag}-b",  # the fork of the fork, at the last call
    ]
    # The fork's step 1 is the original's reply, not asked again, paid for by the original;
    # its trace holds the calls it ran, numbered as in the original.
    assert [r.step for r in result.step_records] == [1, 2]
    first = result.step_records[0]
    assert first.usage.input_tokens == 0
    assert [(r.id, r.name) for r in first.tool_calls] == [
        ("script_1.3", "count_me"),
        ("script_1.4", "count_me"),
        ("script_1.5", "keyed_effect"),
        ("script_1", "run_code"),
    ]
    origin = result.forked_from
    assert origin is not None and (origin.step, origin.call) == (1, "script_1.3")
    assert origin.usage == original_result.step_records[0].usage
    assert [e.call.tool_call_id for e in origin.effects] == ["script_1.1"]
    assert [e.call.tool_call_id for e in result.side_effects] == ["script_1.5"]

    assert failed.value.type == "AgentStepLimitExceeded"
    assert "max_steps=1 reached: the run made 1 model calls" in failed.value.message
    assert [(c.tool_call_id, c.status) for c in failed.value.details.compensations] == [
        ("script_1.5", "completed")
    ]
    assert test_tools.undone == [f"{tag}-b"]

    # A fork of the fork inherits from both: the original's first effect, the fork's last.
    assert after_it_result.forked_from is not None
    assert [e.call.tool_call_id for e in after_it_result.forked_from.effects] == [
        "script_1.1",
        "script_1.5",
    ]
    assert await tool_activities(after_it.handle) == []
    # Inside the fork's own script: what the script printed in the original's legs and in the
    # fork's goes on, so the model reads what it read in the original.
    assert inside_it_transcript[:3] == original_transcript[:3]
    assert inside_it_result.forked_from is not None
    assert [e.call.tool_call_id for e in inside_it_result.forked_from.effects] == ["script_1.1"]
    assert [e.call.tool_call_id for e in inside_it_result.side_effects] == ["script_1.5"]
    # And read back from the fork's history, its script's result is the one the model read.
    given = recorded.step(1)
    assert given is not None and given.reply is not None
    assert given.result_of(given.reply.message.tool_calls[0]) == transcript[2]


async def test_fork_call_on_the_command_line_forks_inside_the_script(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    tag = f"t-{uuid.uuid4()}"
    agents = AgentClient(client, task_queue)
    script = [
        turn(call("run_code", id="script_1", code=gathered_code(tag))),
        turn(text="done: {last_tool_result}"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(scripted_input(script, tools=TOOLS, code_mode=CodeMode()))
        answer = (await original.result()).answer
        fork_of = ("fork", original.id, "--step", "1", "--approve-all", "--json")
        code, out, err = await starter(temporal_env, *fork_of, "--call", "script_1.4")
        refused = await starter(temporal_env, *fork_of, "--call", "script_9.1")
        forked = json.loads(out) if code == 0 else {}
        described = await client.get_workflow_handle(forked["workflow_id"]).describe()

    assert code == 0, err
    # Without --script, the scripted fork plays the original's replies from step 2: the same
    # answer, from the same output of the script, whose last read and effect ran again.
    assert forked["status"] == "completed" and forked["answer"] == answer
    memo = await described.memo_value("forked_from")
    assert (memo["step"], memo["call"]) == (1, "script_1.4")
    assert [test_tools.executions[f"{tag}-{i}"] for i in (1, 2, 3)] == [1, 1, 2]
    code, out, err = refused
    assert code == 1 and out == ""
    assert err.splitlines() == [
        f"fork {original.id}: step 1 of {original.id} has no script whose call is 'script_9.1': "
        "a fork inside a script needs a step whose reply is one run_code call, and its reply "
        "made run_code script_1"
    ]


async def test_a_fork_inside_a_script_asks_for_approval_continues_as_new_and_replays(
    client: Client, task_queue: str
) -> None:
    """The calls a fork runs afresh are its own: the one that changes data waits for a person
    under the fork's policy (approval is on in a fork). The fork continues as new after its
    given step as any run does, without the seed's script, and its histories replay."""
    tag = f"t-{uuid.uuid4()}"
    agents = AgentClient(client, task_queue)
    script = [
        turn(call("run_code", id="script_1", code=gathered_code(tag))),
        turn(text="done: {last_tool_result}"),
    ]
    original_input = scripted_input(
        script, tools=TOOLS, code_mode=CodeMode(), continue_as_new_after_steps=1
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(original_input)
        answer = (await original.result()).answer
        forked = await agents.fork(original.id, step=1, call="script_1.5")

        async def waiting() -> list[str]:
            status = await forked.status()
            return [a.call_id for a in status.approvals if a.status == "awaiting_approval"]

        await eventually(waiting, what="the fork's effect to wait for a person")
        assert await waiting() == ["script_1.5"]
        await forked.decide_tool_call("script_1.5", approve=True)
        result = await forked.result()
        first = (await forked.handle.describe()).raw_description.workflow_execution_info
        histories = await chain_histories(client, forked.id, first.first_run_id)

    assert result.answer == answer
    assert [label for label, _, _ in test_tools.keys_seen if label.startswith(tag)] == [
        f"{tag}-a",
        f"{tag}-b",
        f"{tag}-b",
    ]
    assert [e.call.tool_call_id for e in result.side_effects] == ["script_1.5"]
    # Handed on after the given step: the next run has the origin, not the seed's script.
    assert len(histories) == 2
    started = histories[1].events[0].workflow_execution_started_event_attributes
    (handed,) = await client.data_converter.decode(started.input.payloads, [AgentInput])
    assert handed.fork is not None and handed.fork.script is None and handed.fork.messages == []
    assert handed.fork.origin.call == "script_1.5"
    for history in histories:
        replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None
