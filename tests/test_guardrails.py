"""Guardrails as durable steps (issue 51, docs/guardrails.md), on a real dev server: an input
tripwire stops the step before its calls run and undoes the run's effects; an output tripwire
makes the model revise, and fails the run past the limit; a tool-result guardrail keeps a secret
out of every later model request; a guardrail that breaks fails closed; a conversation can
refuse one message and stay open."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

import tests.guardrails_for_tests as guards
from durable_agent import (
    AgentClient,
    AgentInput,
    AgentRun,
    AgentRunFailed,
    GuardrailPolicy,
    ModelSettings,
    ScriptedTurn,
    ToolApprovalPolicy,
)
from durable_agent.activities.providers.scripted import recorded_requests
from durable_agent.demo import tools as demo_tools
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.guardrail_data import GuardrailJudge, GuardrailRef
from tests import fake_openai
from tests.helpers import (
    FAST_MODEL_RETRY,
    TEST_WORKER_OPTIONS,
    call,
    chain_histories,
    eventually,
    run_agent,
    scripted_input,
    turn,
)

REPO = Path(__file__).resolve().parent.parent
ORDER = 104999
"""A demo order that is processing, which cancel_order cancels and its undo reinstates."""


def trace_guardrails(trace: list) -> list[tuple[str, str, bool]]:
    return [(g.name, g.kind, g.tripped) for step in trace for g in step.guardrails]


async def test_an_input_tripwire_discards_the_reply_and_undoes_the_turn(
    client: Client, task_queue: str, openai: fake_openai.FakeOpenAI
) -> None:
    """A message that arrives while step 1's call runs is checked with step 2's model call. It
    trips: step 2's refund never runs (the refund is still there), step 1's cancellation is
    undone, and the run fails typed, naming the guardrail."""
    refund = demo_tools.get_order(1042)["refundable"]["amount"]
    openai.script = [
        fake_openai.Slow(
            3.0,  # long enough for the message to be queued on a loaded machine
            fake_openai.Reply(
                tool_calls=[("call_a", "cancel_order", json.dumps({"order_id": ORDER}))]
            ),
        ),
        fake_openai.Reply(
            tool_calls=[("call_b", "issue_refund", json.dumps({"order_id": 1042, "amount": 5}))]
        ),
    ]
    agent_input = AgentInput(
        prompt="cancel my order",
        model=ModelSettings(provider="openai", model="gpt-fake-mini", retry=FAST_MODEL_RETRY),
        conversation=True,
        tools=["cancel_order", "issue_refund"],
        tool_approval=ToolApprovalPolicy(approve_all=True),
        guardrails=GuardrailPolicy(input=["no_injection", "slow_pass"]),
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await AgentClient(client, task_queue).start(
            agent_input, workflow_id=f"g-{uuid.uuid4()}"
        )

        async def model_called() -> bool:
            return len(openai.requests) >= 1

        await eventually(model_called, what="step 1's model call")
        await run.post(guards.INJECTION)
        with pytest.raises(AgentRunFailed) as failed:
            await run.result()
        trace = await run.handle.query(AgentWorkflow.trace)

    error = failed.value
    assert error.type == "AgentGuardrailTripped"
    assert "input guardrail no_injection tripped: the message asks to ignore rules" in error.message
    assert error.details.guardrail is not None and error.details.guardrail.name == "no_injection"
    assert demo_tools.get_order(ORDER)["status"] == "processing", "the cancellation stays"
    assert demo_tools.get_order(1042)["refundable"]["amount"] == refund, "the refund ran"
    assert [c.name for step in trace for c in step.tool_calls] == ["cancel_order"]
    assert trace_guardrails(trace) == [
        ("no_injection", "input", False),
        ("slow_pass", "input", False),
        ("no_injection", "input", True),
        ("slow_pass", "input", False),
    ]


async def test_a_blocking_input_guardrail_trips_before_the_model_is_called(
    client: Client, task_queue: str
) -> None:
    guardrails = GuardrailPolicy(input=[GuardrailRef(name="no_injection", blocking=True)])
    agent_input = scripted_input(
        [turn(text="never asked")], prompt=guards.INJECTION, guardrails=guardrails
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentGuardrailTripped"
    assert run.trace == [], "the model was called"
    details = run.failure.details[0]
    assert details["steps"] == 0 and details["guardrail"]["name"] == "no_injection"


async def test_a_blocking_input_guardrail_that_passes_is_in_the_steps_trace(
    client: Client, task_queue: str
) -> None:
    refs = [GuardrailRef(name="no_injection", blocking=True), GuardrailRef(name="slow_pass")]
    agent_input = scripted_input([turn(text="Hello.")], guardrails=GuardrailPolicy(input=refs))
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None
    assert trace_guardrails(run.trace) == [
        ("no_injection", "input", False),
        ("slow_pass", "input", False),
    ]


async def test_an_output_tripwire_makes_the_model_revise(client: Client, task_queue: str) -> None:
    script = [turn(text="Only a stupid person asks that."), turn(text="It ships on Monday.")]
    agent_input = scripted_input(script, guardrails=GuardrailPolicy(output=["polite"]))
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None and run.result.answer == "It ships on Monday."
    told = [m.content for m in run.transcript if m.role == "user"][-1]
    assert "guardrail polite: the answer is rude" in told and "Revise it" in told
    assert trace_guardrails(run.trace) == [("polite", "output", True), ("polite", "output", False)]


async def test_past_its_revisions_an_output_tripwire_fails_the_run_with_no_answer(
    client: Client, task_queue: str
) -> None:
    script = [turn(text="stupid"), turn(text="still stupid"), turn(text="never asked")]
    guardrails = GuardrailPolicy(output=["polite"], max_revisions=1)
    run = await run_agent(client, task_queue, scripted_input(script, guardrails=guardrails))

    assert run.failure.type == "AgentGuardrailTripped"
    assert "output guardrail polite tripped" in run.failure.message
    assert len(run.trace) == 2
    assert "still stupid" not in json.dumps(run.failure.details[0].get("answer"))


@pytest.mark.parametrize(
    ("tool", "outcome"), [("read_note", "ok"), ("open_vault", "error")], ids=["result", "error"]
)
async def test_a_tool_result_guardrail_keeps_a_secret_from_every_later_request(
    client: Client, task_queue: str, openai: fake_openai.FakeOpenAI, tool: str, outcome: str
) -> None:
    """A tool's error is its result too: the model reads it, and so may a stream."""
    openai.script = [
        fake_openai.Reply(tool_calls=[("call_a", tool, json.dumps({"key": "k1"}))]),
        fake_openai.Reply("I could not read the note."),
    ]
    agent_input = AgentInput(
        prompt="read note k1",
        model=ModelSettings(provider="openai", model="gpt-fake-mini", retry=FAST_MODEL_RETRY),
        tools=[tool],
        guardrails=GuardrailPolicy(tool_results=["no_secrets"]),
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None
    assert len(openai.requests) == 2
    assert all(guards.SECRET not in json.dumps(r.body) for r in openai.requests)
    assert guards.SECRET not in json.dumps([m.model_dump() for m in run.transcript])
    result = run.tool_results()["call_a"]
    assert "withheld by guardrail no_secrets: the result holds a secret" in result
    record = run.trace[0].tool_calls[0]
    assert record.guardrail == "no_secrets"
    assert [(g.name, g.call_id, g.tripped) for g in run.trace[0].guardrails] == [
        ("no_secrets", "call_a", True)
    ]
    # Nor does the progress stream show it: its tool_call_finished comes before the check, so a
    # run with tool-result guardrails shows no result there.
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        events = [item.data async for item in AgentRun(run.handle, client).events()]
    assert guards.SECRET not in json.dumps([e.model_dump(mode="json") for e in events])
    (finished,) = [e for e in events if e.kind == "tool_call_finished"]
    assert (finished.outcome, finished.result, finished.text) == (outcome, None, None)


@pytest.mark.parametrize("name", ["broken", "not_registered_anywhere"])
async def test_a_guardrail_that_cannot_answer_fails_closed(
    client: Client, task_queue: str, name: str
) -> None:
    agent_input = scripted_input(
        [turn(call("count_me", key=f"closed-{uuid.uuid4()}")), turn(text="done")],
        tools=["count_me"],
        guardrails=GuardrailPolicy(input=[name]),
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentGuardrailTripped"
    assert f"input guardrail {name} tripped: the guardrail failed" in run.failure.message
    assert run.transcript[-1].role == "user", "a call of the discarded reply ran"
    if name == "broken":
        assert "RuntimeError" in run.failure.message


async def test_a_conversation_refuses_a_message_and_stays_open(
    client: Client, task_queue: str
) -> None:
    script = [turn(text="Hello."), turn(text="discarded"), turn(text="Monday.")]
    guardrails = GuardrailPolicy(input=["no_injection"], refuse_in_conversation=True)
    agent_input = scripted_input(script, prompt="hi", conversation=True, guardrails=guardrails)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await AgentClient(client, task_queue).start(
            agent_input, workflow_id=f"g-{uuid.uuid4()}"
        )
        assert (await run.turn(1)).answer == "Hello."
        await run.post(guards.INJECTION)
        refused = await run.turn(2)
        await run.post("when does it ship?")
        third = await run.turn(3)
        transcript = await run.handle.query(AgentWorkflow.transcript)
        result = await run.end()

    assert refused.outcome == "refused"
    assert refused.answer == "Refused: the message asks to ignore rules"
    assert third.outcome == "answered" and third.answer == "Monday."
    assert all(guards.INJECTION not in (m.content or "") for m in transcript)
    assert [t.outcome for t in result.turns] == ["answered", "refused", "answered"]


def test_the_command_line_runs_guardrails_and_its_trace_shows_each_verdict(
    tmp_path: Path,
) -> None:
    """`--guardrail KIND=NAME`, as a person types it, the module that registers them given to
    the embedded worker with --tools; the trace says what tripped and counts what passed."""
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"calls": [{"name": "read_note", "arguments": {"key": "k1"}}]},
                {"text": "A stupid question."},
                {"text": "The note is withheld."},
            ]
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TEMPORAL_ADDRESS", "OPENAI_API_KEY")}
    env["AGENT_DEMO_DB"] = str(tmp_path / "demo.db")
    guard = ["input=no_injection", "output=polite", "tool_result=no_secrets"]
    done = subprocess.run(
        [sys.executable, "starter.py", "read note k1", "--script", str(script)]
        + ["--tools", "tests.guardrails_for_tests", "--trace"]
        + [arg for kind in guard for arg in ("--guardrail", kind)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "The note is withheld.\n"
    lines = done.stderr.splitlines()
    row = next(line for line in lines if line.lstrip().startswith("1 "))
    assert re.search(r"read_note ok \d+ms \[held\]$", row), row
    assert "[held]: result withheld by a guardrail" in lines
    assert any(
        line.startswith("guardrail no_secrets tripped (tool_result, step 1, call_1_1, ")
        and line.endswith("): the result holds a secret")
        for line in lines
    ), done.stderr
    assert any(line.startswith("guardrail polite tripped (output, step 2, ") for line in lines)
    assert lines[-1] == "guardrails passed: no_injection (input) x1, polite (output) x1"


@pytest.mark.parametrize(
    "given", ["output", "other=polite", "input=", "input=bad/name", "output=a=b"]
)
def test_a_bad_guardrail_on_the_command_line_exits_2_with_one_line(given: str) -> None:
    done = subprocess.run(
        [sys.executable, "starter.py", "hello", "--guardrail", given],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "--guardrail" in done.stderr, done.stderr


def judge(*verdicts: ScriptedTurn) -> GuardrailJudge:
    """A scripted judge: its replies, one a text it judges."""
    return GuardrailJudge(
        criteria="The text holds a secret code.",
        model=ModelSettings(provider="scripted", model="judge", script=list(verdicts)),
    )


def verdict(tripped: object, reason: str = "because") -> ScriptedTurn:
    return turn(call("verdict", tripped=tripped, reason=reason))


async def test_a_judge_guardrail_withholds_a_result_and_its_call_counts_in_the_usage(
    client: Client, task_queue: str
) -> None:
    """A model with criteria as a guardrail: it passes the prompt, trips on the note's result,
    and each of its calls is an activity whose tokens the run's usage counts."""
    guardrails = GuardrailPolicy(
        input=["vault"],
        tool_results=["vault"],
        judges={"vault": judge(verdict(False), verdict(True, "it holds the vault code"))},
    )
    script = [turn(call("read_note", key="k1")), turn(text="I cannot read it.")]
    run = await run_agent(
        client, task_queue, scripted_input(script, tools=["read_note"], guardrails=guardrails)
    )

    assert run.result is not None
    result = run.tool_results()["call_1_1"]
    assert result.endswith("withheld by guardrail vault: it holds the vault code")
    assert [(g.name, g.kind, g.tripped) for g in run.trace[0].guardrails] == [
        ("vault", "input", False),
        ("vault", "tool_result", True),
    ]
    steps = sum(record.usage.input_tokens for record in run.trace)
    assert run.result.usage.input_tokens > steps, "the judge's calls were not counted"
    history = await run.handle.fetch_history()
    models = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert models.count("call_model") == 4  # two steps, two judgements


@pytest.mark.parametrize(
    "reply",
    [turn(text="It looks fine to me."), verdict("yes"), turn(call("verdict", reason="no flag"))],
    ids=["text", "a word for a flag", "no flag"],
)
async def test_a_judge_that_does_not_answer_with_a_verdict_fails_closed(
    client: Client, task_queue: str, reply: ScriptedTurn
) -> None:
    guardrails = GuardrailPolicy(input=["vault"], judges={"vault": judge(reply)})
    run = await run_agent(
        client, task_queue, scripted_input([turn(text="never read")], guardrails=guardrails)
    )

    assert run.failure.type == "AgentGuardrailTripped"
    assert "so it counts as tripped" in run.failure.message


@pytest.mark.usefixtures("scripted_requests")
async def test_a_sub_agent_is_guarded_by_its_parents_guardrails(
    client: Client, task_queue: str
) -> None:
    """The secret a sub-agent's tool hands back reaches neither the child's model nor, through
    the child's answer, the parent's."""
    child = ModelSettings(
        provider="scripted",
        script=[turn(call("read_note", key="k2")), turn(text="The note could not be read.")],
        retry=FAST_MODEL_RETRY,
    )
    script = [
        turn(call("delegate", task="read note k2", tools=["read_note"])),
        turn(text="The sub-agent could not read it."),
    ]
    agent_input = scripted_input(
        script,
        tools=["read_note"],
        sub_agents=True,
        sub_agent_model=child,
        guardrails=GuardrailPolicy(tool_results=["no_secrets"]),
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None
    child_requests = recorded_requests(f"{run.handle.id}/call_1_1")
    assert len(child_requests) == 2
    sent = json.dumps([r.model_dump(mode="json") for r in child_requests])
    assert "withheld by guardrail no_secrets" in sent and guards.SECRET not in sent
    assert run.tool_results()["call_1_1"] == "The note could not be read."
    checked = [(g.name, g.call_id, g.tripped) for g in run.trace[0].guardrails]
    assert checked == [("no_secrets", "call_1_1", False)]


async def test_a_guardrail_that_times_out_fails_closed(client: Client, task_queue: str) -> None:
    guardrails = GuardrailPolicy(input=["stalls"], timeout_seconds=0.5)
    run = await run_agent(
        client, task_queue, scripted_input([turn(text="never read")], guardrails=guardrails)
    )

    assert run.failure.type == "AgentGuardrailTripped"
    assert "input guardrail stalls tripped: the guardrail failed" in run.failure.message
    assert "timeout" in run.failure.message.lower(), run.failure.message
    assert guards.checked["stalls"] == 3, "each of its attempts was not given its time"


async def test_an_answers_revisions_are_counted_across_continue_as_new(
    client: Client, task_queue: str
) -> None:
    """The run hands on after each step; the second rude answer is the second in a row, in
    another run of the chain, and past max_revisions=1 the chain fails."""
    script = [turn(text="stupid"), turn(text="stupid again"), turn(text="fine")]
    guardrails = GuardrailPolicy(output=["polite"], max_revisions=1)
    agent_input = scripted_input(script, guardrails=guardrails, continue_as_new_after_steps=1)
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentGuardrailTripped"
    histories = await chain_histories(client, run.handle.id, run.handle.first_execution_run_id)
    assert len(histories) >= 2
