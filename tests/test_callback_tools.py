"""Callback tools (workflows/callbacks.py, docs/tools.md#callback-tools) on a real dev server with
the scripted model: a call is published and waits, spending nothing, until a client answers it;
a wrong answer is refused to its sender and the call keeps waiting; a second answer is refused;
an unanswered call times out into an error the model reads; arguments that do not match never
reach a client; the approval policy comes first; a cancel while it waits keeps the transcript's
pairs. Declared in the run's input (any language) and by `@callback_tool` on a worker."""

from __future__ import annotations

import asyncio
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from durable_agent.activities.tools import make_callback_tool
from durable_agent.client.agent_client import AgentClient, AgentRun, AgentRunFailed
from durable_agent.workflows.decisions import PendingCallback
from durable_agent.workflows.inputs import CallbackTool, ToolApprovalPolicy
from durable_agent.workflows.status import AGENT_STATUS
from tests.helpers import call, eventually, scripted_input, turn
from tests.test_agent_client import serving
from tests.test_sub_agents import child_model

READ_FILE = CallbackTool(
    name="read_local_file",
    description="Read a file on the user's laptop.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    result={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    timeout_seconds=120,
)
REPO = Path(__file__).resolve().parent.parent


async def waiting_callback(run: AgentRun) -> PendingCallback:
    pending: list[PendingCallback] = []

    async def published() -> bool:
        pending[:] = await run.pending_callbacks()
        return bool(pending)

    await eventually(published, what="a callback to wait")
    return pending[0]


async def test_a_callback_waits_refuses_a_wrong_answer_and_takes_one_answer_once(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("read_local_file", path="notes.txt")),
        turn(text="The file says: {last_tool_result.text}", expect="hello from the"),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(
            scripted_input(script, tools=[], callback_tools=[READ_FILE], prompt="read my notes")
        )
        pending = await waiting_callback(run)
        assert (pending.tool, pending.arguments) == ("read_local_file", {"path": "notes.txt"})
        status = await run.status()
        assert status.status == "running" and "waiting for a client to answer" in status.details
        assert pending.call_id in status.details

        with pytest.raises(WorkflowUpdateFailedError) as wrong:
            await run.answer_callback(pending.call_id, {"txt": "hello"})
        assert "does not match read_local_file's result" in str(wrong.value.cause)
        assert "text" in str(wrong.value.cause)
        assert [p.call_id for p in await run.pending_callbacks()] == [pending.call_id]

        # Two clients answer at once: one answer is taken, the other refused, never both.
        texts = ["hello from the laptop", "hello from the phone"]
        answers = await asyncio.gather(
            *(run.answer_callback(pending.call_id, {"text": text}) for text in texts),
            return_exceptions=True,
        )
        taken = [i for i, answer in enumerate(answers) if isinstance(answer, PendingCallback)]
        assert len(taken) == 1, answers
        other = answers[1 - taken[0]]
        if isinstance(other, WorkflowUpdateFailedError):
            assert "waits for an answer" in str(other.cause)
        else:  # the run had ended by the time it came
            assert isinstance(other, RPCError) and "completed" in other.message, other
        result = await run.result()

        assert result.answer == f"The file says: {texts[taken[0]]}"
        transcript = await run.transcript()
        answered = next(m for m in transcript if m.role == "tool")
        assert not answered.is_error and answered.content == f'{{"text": "{texts[taken[0]]}"}}'
        kinds = [item.data.kind async for item in run.events()]
        assert kinds.index("callback_requested") < kinds.index("callback_answered")
        assert result.step_records[0].tool_calls[0].outcome == "ok"


async def test_an_unanswered_callback_times_out_and_the_model_is_told(
    client: Client, task_queue: str
) -> None:
    hasty = READ_FILE.model_copy(update={"timeout_seconds": 1.0})
    script = [
        turn(call("read_local_file", path="notes.txt")),
        turn(text="I could not read it.", expect="timed out"),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(scripted_input(script, tools=[], callback_tools=[hasty]))
        result = await run.result()
        refusal = next(m for m in await run.transcript() if m.role == "tool")
        assert refusal.is_error and "no client answered the call within 1 s" in refusal.content
        assert result.answer == "I could not read it."
        assert await run.pending_callbacks() == []


@pytest.mark.parametrize(
    ("names", "clash"),
    [
        (["get_order"], "callback tool 'get_order': one of the worker's tools has that name"),
        (["finish"], "callback tool 'finish': a built-in tool of every run has that name"),
        (["note", "note"], "callback tool 'note': another callback tool has that name"),
    ],
)
async def test_a_callback_tool_named_as_another_tool_of_the_run_fails_it_as_it_starts(
    client: Client, task_queue: str, names: list[str], clash: str
) -> None:
    """The rule AG-UI's door refuses a client's tools by (run_setup.check_callback_names):
    the providers refuse two tools of one name."""
    declared = [READ_FILE.model_copy(update={"name": name}) for name in names]
    async with serving(client, task_queue) as agents:
        agent_input = scripted_input(
            [turn(text="never asked")], tools=["get_order"], callback_tools=declared
        )
        run = await agents.start(agent_input)
        with pytest.raises(AgentRunFailed) as failed:
            await run.result()
    assert failed.value.type == "AgentConfigurationError"
    assert clash in failed.value.message


async def test_arguments_that_do_not_match_never_reach_a_client(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("read_local_file", path=42)),
        turn(text="Sorry.", expect="invalid arguments for read_local_file"),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(scripted_input(script, tools=[], callback_tools=[READ_FILE]))
        await run.result()
        kinds = [item.data.kind async for item in run.events()]
        assert "callback_requested" not in kinds


async def test_a_side_effecting_callback_waits_for_a_person_first(
    client: Client, task_queue: str
) -> None:
    send = READ_FILE.model_copy(update={"name": "send_from_laptop", "side_effects": True})
    script = [
        turn(call("send_from_laptop", path="invoice.pdf")),
        turn(text="Sent.", expect="sent it"),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(
            scripted_input(
                script, tools=[], callback_tools=[send], tool_approval=ToolApprovalPolicy()
            )
        )

        async def asked() -> bool:
            return bool(await run.pending_tool_calls())

        await eventually(asked, what="the call to wait for a person")
        assert await run.pending_callbacks() == []  # nothing published before a person decides
        (waiting,) = await run.pending_tool_calls()
        await run.decide_tool_call(waiting.call_id, approve=True)
        pending = await waiting_callback(run)
        await run.answer_callback(pending.call_id, {"text": "sent it"})
        assert (await run.result()).answer == "Sent."
        # Its answer is the effect the saga would undo, as an activity's result is.
        effects = (await run.result()).side_effects
        assert [e.call.result for e in effects] == [{"text": "sent it"}]


async def test_a_cancel_while_a_callback_waits_ends_the_run_with_its_pairs_whole(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("read_local_file", path="notes.txt")), turn(text="unreached")]
    async with serving(client, task_queue) as agents:
        run = await agents.start(scripted_input(script, tools=[], callback_tools=[READ_FILE]))
        pending = await waiting_callback(run)
        await run.handle.cancel()
        with pytest.raises(AgentRunFailed):
            await run.result()
        transcript = await run.transcript()
        calls = [c.id for m in transcript if m.role == "assistant" for c in m.tool_calls]
        results = [m.tool_call_id for m in transcript if m.role == "tool"]
        assert calls == results == [pending.call_id]


def test_callback_tool_declares_its_arguments_and_result_and_no_activity() -> None:
    from tests import callback_app

    made = make_callback_tool(callback_app.user_location)
    spec = made.spec
    assert spec.callback and made.activity is None and spec.timeout_seconds == 300
    assert spec.description == "Where the user's browser is."
    assert spec.parameters["properties"]["precision"]["description"] == '"city" or "street".'
    assert spec.result is not None and spec.result["required"] == ["city", "accuracy_m"]


async def test_a_worker_serves_an_apps_callback_tool_and_a_client_answers_it(
    client: Client, task_queue: str
) -> None:
    """`@callback_tool` in an app's module, served by `durable-agent worker --tools MODULE` in
    a process of its own (which has no activity for it), answered from this process."""
    address = client.service_client.config.target_host
    cli = str(Path(sysconfig.get_path("scripts")) / "durable-agent")
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": str(REPO)}
    worker = await asyncio.create_subprocess_exec(
        cli, "worker", "--address", address, "--task-queue", task_queue,
        "--tools", "tests.callback_app", env=env, cwd=REPO, stderr=sys.stderr,
    )  # fmt: skip
    try:
        script = [
            turn(call("user_location", precision="city")),
            turn(text="You are in {last_tool_result.city}.", expect="Lisbon"),
        ]
        run = await AgentClient(client, task_queue).start(
            scripted_input(script, tools=["user_location"])
        )
        pending = await asyncio.wait_for(waiting_callback(run), 60)
        with pytest.raises(WorkflowUpdateFailedError) as wrong:
            await run.answer_callback(pending.call_id, {"city": "Lisbon"})
        assert "accuracy_m" in str(wrong.value.cause)
        await run.answer_callback(pending.call_id, {"city": "Lisbon", "accuracy_m": 5000})
        assert (await run.result()).answer == "You are in Lisbon."
    finally:
        worker.terminate()
        await worker.wait()


async def test_the_cli_lists_a_waiting_callback_and_answers_it(
    client: Client, task_queue: str
) -> None:
    address = client.service_client.config.target_host
    cli = str(Path(sysconfig.get_path("scripts")) / "durable-agent")

    async def durable_agent(*words: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            cli, *words, "--address", address,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    script = [turn(call("read_local_file", path="notes.txt")), turn(text="{last_tool_result}")]
    async with serving(client, task_queue) as agents:
        run = await agents.start(scripted_input(script, tools=[], callback_tools=[READ_FILE]))
        pending = await waiting_callback(run)
        code, out, _ = await durable_agent("callbacks", run.id)
        assert code == 0 and f'{pending.call_id}  read_local_file {{"path": "notes.txt"}}' in out

        code, _, err = await durable_agent(
            "answer-callback", run.id, pending.call_id, "--result", '{"text": 7}'
        )
        assert code == 1 and "does not match read_local_file's result" in err
        code, _, err = await durable_agent(
            "answer-callback", run.id, pending.call_id, "--result", "{text"
        )
        assert code == 2 and "not JSON" in err and err.count("\n") == 1
        code, out, _ = await durable_agent(
            "answer-callback", run.id, pending.call_id, "--result", '{"text": "hi"}'
        )
        assert code == 0 and f"{pending.call_id} (read_local_file) answered" in out
        assert (await run.result()).answer == '{"text": "hi"}'


async def test_an_interrupt_while_a_callback_waits_ends_the_turn_with_its_pairs_whole(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("read_local_file", path="notes.txt")), turn(text="unreached")]
    async with serving(client, task_queue) as agents:
        run = await agents.start(
            scripted_input(script, tools=[], callback_tools=[READ_FILE], conversation=True)
        )
        pending = await waiting_callback(run)
        await run.interrupt()
        record = await run.turn(1)
        assert record.outcome == "interrupted", record
        assert await run.pending_callbacks() == []
        with pytest.raises(WorkflowUpdateFailedError):
            await run.answer_callback(pending.call_id, {"text": "too late"})
        transcript = await run.transcript()
        calls = [c.id for m in transcript if m.role == "assistant" for c in m.tool_calls]
        results = [m for m in transcript if m.role == "tool"]
        assert calls == [r.tool_call_id for r in results] == [pending.call_id]
        assert results[0].is_error
        await run.end()


async def test_a_run_that_waits_for_a_person_says_so_while_a_callback_waits_beside(
    client: Client, task_queue: str
) -> None:
    guarded = READ_FILE.model_copy(update={"name": "read_secret_file", "needs_approval": True})
    script = [
        turn(
            call("read_local_file", path="a.txt"),
            call("read_secret_file", path="b.txt"),
        ),
        turn(text="Both read."),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(
            scripted_input(
                script,
                tools=[],
                callback_tools=[READ_FILE, guarded],
                tool_approval=ToolApprovalPolicy(),
            )
        )
        first = await waiting_callback(run)
        assert first.tool == "read_local_file"
        status = await run.status()
        # Listed as waiting for a person (the search attribute too), not "running".
        assert status.status == "awaiting_approval" and len(status.approvals) == 1
        described = await run.handle.describe()
        assert described.typed_search_attributes.get(AGENT_STATUS) == "awaiting_approval"

        await run.decide_tool_call(status.approvals[0].call_id, approve=True)

        async def both() -> bool:
            return len(await run.pending_callbacks()) == 2

        await eventually(both, what="both callbacks to wait")
        status = await run.status()
        assert status.status == "running"
        assert "read_local_file" in status.details and "read_secret_file" in status.details
        for pending in await run.pending_callbacks():
            await run.answer_callback(pending.call_id, {"text": pending.arguments["path"]})
        assert (await run.result()).answer == "Both read."


async def test_a_sub_agent_of_a_run_with_declared_callbacks_gets_the_workers_tools(
    client: Client, task_queue: str
) -> None:
    """The input's callback tools are the app's: a sub-agent, whose tools default to its
    parent's, is not given them (its worker could not resolve them, and it would not start)."""
    child = [turn(call("get_order", order_id=1042)), turn(text="Delivered.")]
    script = [
        turn(call("delegate", task="Where is order 1042?")),
        turn(text="It was delivered.", expect="Delivered."),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(
            scripted_input(
                script,
                tools=["get_order"],
                callback_tools=[READ_FILE],
                sub_agents=True,
                sub_agent_model=child_model(*child),
            )
        )
        assert (await run.result()).answer == "It was delivered."
