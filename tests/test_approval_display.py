"""What a person approves is what the tool runs (issue 38).

A `send_email` whose arguments opened with `"to": "a@b.com"`, padded the body and ended with
`"to": "attacker@evil.example"` was shown for approval as the raw text cut at 1,000 characters
(an email to a@b.com) and ran on `json.loads` of the whole text, where the later key wins: the
email went to the attacker. Repeated keys are refused before anyone is asked, and every place a
person decides from shows the parsed arguments the tool will get, each field cut on its own.
And a `finish` beside a call that did not succeed no longer ends the run with an answer that
claims it did.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

import tests.tools_for_tests as test_tools
from durable_agent.demo import tools as demo_tools
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import ToolApprovalPolicy
from durable_agent.workflows.model_settings import ScriptedCall
from durable_agent.workflows.shown_arguments import FIELD_CHARS, NOT_WHOLE
from tests.helpers import TEST_WORKER_OPTIONS, call, run_agent, scripted_input, turn
from tests.test_tool_approval import finish, start, until
from tests.test_web_ui_cli import temporal_cli

REPO = Path(__file__).resolve().parent.parent
ATTACKER = "attacker@evil.example"
BODY = "Your refund is on its way. " * 200  # 5,400 characters


async def test_arguments_with_a_key_twice_are_refused_before_anyone_is_asked(
    client: Client, task_queue: str
) -> None:
    raw = json.dumps({"to": "a@b.com", "subject": "Refund", "body": BODY})[:-1]
    raw += f', "to": "{ATTACKER}"}}'
    script = [
        turn(ScriptedCall(name="send_email", id="mail", arguments=raw)),
        turn(text="I sent nothing.", expect="have the key 'to' more than once"),
    ]
    agent_input = scripted_input(script, tools=["send_email"], tool_approval=ToolApprovalPolicy())
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        result, transcript = await finish(agent_run)
        events = await until(agent_run, "completed")

    assert result.answer == "I sent nothing."
    assert not [e for e in events if e.kind == "approval_requested"], "nobody may be asked"
    assert demo_tools.outbox() == []
    refusal = next(m for m in transcript if m.role == "tool")
    assert refusal.is_error and "The tool did not run; send each key once." in refusal.content


async def test_a_person_is_shown_every_field_the_tool_gets_each_cut_on_its_own(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    # The model writes the long body first: a prefix of its text would hide the recipient.
    arguments = {"subject": "Refund", "body": BODY, "to": ATTACKER}
    script = [
        turn(call("send_email", id="mail", **arguments)),
        turn(text="Denied.", expect="not that address"),
    ]
    agent_input = scripted_input(script, tools=["send_email"], tool_approval=ToolApprovalPolicy())
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        requested = [e for e in await until(agent_run, "approval_requested")][-1]
        (waiting,) = await agent_run.pending_tool_calls()
        status = await agent_run.status()
        # The Web UI's page shows the run's current details, as `temporal workflow metadata` does.
        metadata = await temporal_cli(temporal_env, "workflow", "metadata", "-w", agent_run.id)
        calls = await cli(
            "calls", agent_run.id, "--address", client.service_client.config.target_host
        )
        await agent_run.decide_tool_call("mail", approve=False, reason="not that address")
        await finish(agent_run)

    body_chars = len(json.dumps(BODY))
    for shown in (waiting.arguments, requested.arguments or "", status.details, calls):
        assert f'"to": "{ATTACKER}"' in shown, shown
        assert shown.count(NOT_WHOLE) == 1 and f'"body" has {body_chars:,} characters' in shown
        assert BODY[:1_000] not in shown  # never a prefix of the raw text
    assert [f.name for f in waiting.fields] == ["subject", "body", "to"]
    body = waiting.fields[1]
    assert (len(body.value), body.chars) == (FIELD_CHARS, body_chars)
    assert waiting.fields[2].value == json.dumps(ATTACKER)
    # Too large to carry as data too: the transcript has the call whole.
    assert waiting.parsed_arguments is None and status.approvals[0].parsed_arguments is None
    assert ATTACKER in metadata and NOT_WHOLE in metadata
    assert demo_tools.outbox() == []


async def test_finish_beside_a_denied_call_is_not_taken(client: Client, task_queue: str) -> None:
    """One reply: write_thing and finish("Done: written"); a person denies the write. The run
    must not end claiming it: finish gets a result saying why, and the model answers again."""
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="w1"), call("finish", answer="Done: w1 is written.")),
        turn(text="I could not write w1: a person denied it.", expect="finish was not taken"),
    ]
    agent_input = scripted_input(script, tools=["write_thing"], tool_approval=ToolApprovalPolicy())
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        await until(agent_run, "approval_requested")
        await agent_run.decide_tool_call("call_1_1", approve=False, reason="not now")
        result, transcript = await finish(agent_run)

    assert result.answer == "I could not write w1: a person denied it."
    refused = {m.tool_call_id: m.content for m in transcript if m.role == "tool"}["call_1_2"]
    assert refused.startswith(
        "Error: finish was not taken, because calls before it in this reply did not succeed: "
        "write_thing (call_1_1) was denied."
    )
    outcomes = [c.outcome for c in result.step_records[0].tool_calls]
    assert outcomes == ["denied", "error"]
    assert not test_tools.events


async def test_finish_beside_calls_that_succeeded_ends_the_run(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("count_me", key="beside-finish"), call("finish", answer="counted"))]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["count_me"]))

    assert run.result is not None and run.result.answer == "counted"


async def cli(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "starter.py"),
        *argv,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != "TEMPORAL_ADDRESS"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    return out.decode()
