"""Auto-mode approvals (workflows/judge.py, docs/people-in-the-loop.md#auto-mode) on a real dev
server, the scripted provider playing both the agent and the judge: a judge that approves lets a
gated call run without a person; a deny reaches the model with the judge's reason; and it fails
closed: low confidence, an escalation, a broken verdict, a judge that fails, and a tool without
criteria all wait for a person, with nothing run before the person decides. A person who decides
while the judge works wins; an operator can turn auto mode off or replace its rules. Every verdict
is in the trace, the events and the approval record, and the judge's tokens count."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowUpdateFailedError

import tests.tools_for_tests as test_tools
from durable_agent.activities.tools import tool_specs
from durable_agent.client.agent_client import AgentRun, AgentRunFailed
from durable_agent.serving.worker import build_worker, replayer
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.decisions import (
    ApprovalCriteria,
    AutoModeChange,
    AutoRules,
    ToolApproval,
)
from durable_agent.workflows.events import AgentEvent
from durable_agent.workflows.inputs import AutoMode, Limits, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings, Price, ScriptedCall, ScriptedTurn
from tests import fake_anthropic, fake_openai
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, turn
from tests.test_agent_client import serving
from tests.test_http_api import sse
from tests.test_sub_agent_approvals import delegating_input, starter, waiting_in_sub_agent
from tests.test_tool_approval import approval_input, finish, results, start, until

WRITES = ApprovalCriteria(
    effect="writes a labelled thing to the shared store",
    approve_when="the label starts with draft",
    deny_when="the label starts with prod",
    escalate_when="anything else",
    min_confidence=0.8,
)


def verdict(decision: str, confidence: float, reason: str, **options: Any) -> ScriptedTurn:
    return turn(call("verdict", decision=decision, confidence=confidence, reason=reason), **options)


def auto_mode(*judge_turns: ScriptedTurn, **options: Any) -> ToolApprovalPolicy:
    options.setdefault("tools", {"write_thing": "writes"})
    return ToolApprovalPolicy(
        auto_mode=AutoMode(
            judge=ModelSettings(provider="scripted", model="judge-1", script=list(judge_turns)),
            criteria={"writes": WRITES},
            **options,
        )
    )


async def events_of(run: AgentRun) -> AsyncIterator[AgentEvent]:
    async for item in run.events():
        yield item.data


def started_labels() -> list[str]:
    return [label for kind, label in test_tools.events if kind == "start"]


async def waiting_for_a_person(run: AgentRun) -> ToolApproval:
    waiting: list[ToolApproval] = []

    async def asked() -> bool:
        status = await run.status()
        waiting[:] = [a for a in status.approvals if not a.judging]
        return status.status == "awaiting_approval" and bool(waiting)

    await eventually(asked, what="a call to wait for a person")
    return waiting[0]


async def test_a_judge_that_approves_lets_the_call_run_without_a_person(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="draft-7"), text="Writing the draft now."),
        turn(text="done", expect="done draft-7"),
    ]
    # The judge is given the criteria's call and the conversation's part: it expects to see them.
    judge = verdict("approve", 0.93, "a draft label", expect='"label": "draft-7"')
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(
            client, task_queue, approval_input(script, tool_approval=auto_mode(judge))
        )
        result, transcript = await finish(run)
        events = [item.data async for item in run.events()]
        status = await run.status()
    assert result.answer == "done" and started_labels() == ["draft-7"]
    assert results(transcript)["call_1_1"].content == "done draft-7"
    record = result.step_records[0].tool_calls[0]
    assert record.outcome == "ok" and record.verdict is not None
    assert (record.verdict.decision, record.verdict.outcome) == ("approve", "approved")
    assert record.verdict.confidence == 0.93 and record.verdict.reason == "a draft label"
    approval = status.approvals[0] if status.approvals else None
    kinds = [e.kind for e in events]
    assert "judge_verdict" in kinds
    judged = next(e for e in events if e.kind == "judge_verdict")
    assert (judged.call_id, judged.outcome, judged.confidence) == ("call_1_1", "approved", 0.93)
    assert judged.text == "a draft label" and judged.usage is not None
    # The judge's tokens count in the run's usage, beside the two steps'.
    steps = sum(r.usage.total_tokens for r in result.step_records)
    assert result.usage.total_tokens == steps + judged.usage.total_tokens > steps
    # Nobody was asked: the run never said it waited for a person.
    assert approval is None or approval.decided_by == "judge"
    decided = next(e for e in events if e.kind == "approval_decided")
    assert decided.outcome == "approved"


async def test_a_deny_reaches_the_model_with_the_judges_reason(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="prod-1")),
        turn(text="I may not write prod.", expect="the approval judge denied"),
    ]
    judge = verdict("deny", 0.97, "prod labels are forbidden")
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(
            client, task_queue, approval_input(script, tool_approval=auto_mode(judge))
        )
        result, transcript = await finish(run)
    refusal = results(transcript)["call_1_1"]
    assert refusal.is_error and "prod labels are forbidden" in refusal.content
    assert started_labels() == []
    record = result.step_records[0].tool_calls[0]
    assert record.outcome == "denied" and record.verdict is not None
    assert record.verdict.outcome == "denied"


@pytest.mark.parametrize(
    ("judge", "why"),
    [
        (verdict("approve", 0.55, "probably fine"), "under the criteria's 0.80"),
        (verdict("escalate", 0.9, "not a draft, not prod"), "not a draft, not prod"),
        (turn(text="Looks fine to me, approve."), "did not answer with one verdict call"),
        (turn(call("verdict", decision="yes", confidence=2)), "verdict is not valid"),
        (None, "the judge failed: ScriptedModelMismatch"),
    ],
    ids=["low-confidence", "escalation", "no-verdict-call", "broken-verdict", "judge-fails"],
)
async def test_the_judge_fails_closed_and_nothing_runs_before_a_person_decides(
    client: Client, task_queue: str, judge: ScriptedTurn | None, why: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="w1")),
        turn(text="done", expect="done w1"),
    ]
    policy = auto_mode(*([judge] if judge is not None else []))
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, approval_input(script, tool_approval=policy))
        waiting = await waiting_for_a_person(run)
        assert waiting.call_id == "call_1_1" and waiting.verdict is not None
        assert waiting.verdict.outcome == "escalated" and why in waiting.verdict.reason + (
            f" under the criteria's {waiting.verdict.min_confidence:.2f}"
        )
        status = await run.status()
        assert "judge (writes)" in status.details and "a person decides" in status.details
        # The Web UI's page of the run (its current details) says what the judge said.
        metadata = await run.handle.query(
            "__temporal_workflow_metadata", result_type=WorkflowMetadata
        )
        assert "**Waiting for a person**" in metadata.current_details
        assert "   - judge (writes): " in metadata.current_details  # under the call
        assert started_labels() == []  # nothing ran before the person
        decided = await run.decide_tool_call("call_1_1", approve=True)
        assert decided.decided_by == "person"
        result, _ = await finish(run)
    assert result.answer == "done" and started_labels() == ["w1"]
    record = result.step_records[0].tool_calls[0]
    assert record.verdict is not None and record.verdict.outcome == "escalated"


async def test_a_verdict_that_gives_a_key_twice_goes_to_a_person(
    client: Client, task_queue: str
) -> None:
    """A verdict read by its last value of a repeated key would say approve where it first said
    escalate, and the call would run: it fails closed instead, as a gated call's arguments with
    a repeated key are refused (issue 47)."""
    test_tools.events.clear()
    script = [turn(call("write_thing", label="draft-2")), turn(text="done", expect="done draft-2")]
    repeated = (
        '{"decision": "escalate", "confidence": 0.99, "reason": "a person should see this", '
        '"decision": "approve"}'
    )
    judge = turn(ScriptedCall(name="verdict", arguments=repeated))
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(
            client, task_queue, approval_input(script, tool_approval=auto_mode(judge))
        )
        waiting = await waiting_for_a_person(run)
        assert waiting.call_id == "call_1_1" and waiting.verdict is not None
        assert waiting.verdict.outcome == "escalated" and waiting.verdict.decision is None
        assert "the judge's verdict has the key 'decision' more than once" in (
            waiting.verdict.reason
        )
        assert started_labels() == []  # nothing ran before the person
        await run.decide_tool_call("call_1_1", approve=True)
        result, _ = await finish(run)
    assert result.answer == "done" and started_labels() == ["draft-2"]


async def test_calls_the_policy_allows_and_tools_without_criteria_never_reach_the_judge(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("keyed_effect", label="k1")),
        turn(call("write_thing", label="w-allowed")),
        turn(text="done"),
    ]
    # No judge turn: a judge call would fail and escalate, and the run would wait for a person.
    policy = auto_mode().model_copy(update={"allow": ["write_thing"]})
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, approval_input(script, tool_approval=policy))
        waiting = await waiting_for_a_person(run)
        assert (waiting.tool, waiting.verdict, waiting.judging) == ("keyed_effect", None, False)
        await run.decide_tool_call(waiting.call_id, approve=True)
        result, _ = await finish(run)
        events = [item.data async for item in run.events()]
    assert "judge_verdict" not in [e.kind for e in events]
    assert all(c.verdict is None for r in result.step_records for c in r.tool_calls)
    assert result.usage.total_tokens == sum(r.usage.total_tokens for r in result.step_records)


async def test_a_person_who_decides_while_the_judge_works_wins(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="draft-slow")),
        turn(text="denied", expect="a person denied"),
    ]
    judge = verdict("approve", 0.99, "a draft", delay_seconds=3)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(
            client, task_queue, approval_input(script, tool_approval=auto_mode(judge))
        )
        await until(run, "approval_requested")
        under_review = (await run.status()).approvals[0]
        assert under_review.judging and (await run.status()).status == "running"
        decided = await run.decide_tool_call("call_1_1", approve=False, reason="not today")
        assert (decided.status, decided.decided_by) == ("denied", "person")
        result, transcript = await finish(run)
        events = [item.data async for item in run.events()]
    assert started_labels() == []
    assert "not today" in results(transcript)["call_1_1"].content
    # The judge's verdict came after the person's decision: recorded, ignored, and paid for.
    record = result.step_records[0].tool_calls[0]
    assert record.outcome == "denied" and record.verdict is not None
    assert (record.verdict.decision, record.verdict.outcome) == ("approve", "late")
    late = next(e for e in events if e.kind == "judge_verdict")
    assert late.outcome == "late" and late.usage is not None
    assert result.usage.total_tokens == (
        sum(r.usage.total_tokens for r in result.step_records) + late.usage.total_tokens
    )


async def test_an_operator_turns_auto_mode_off_and_replaces_its_rules(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="draft-1")),
        turn(call("write_thing", label="draft-2")),
        turn(call("write_thing", label="draft-3")),
        turn(text="done"),
    ]
    judge = [
        verdict("approve", 0.9, "first, a draft", delay_seconds=3),
        verdict("approve", 0.9, "third, a draft", expect="draft-3"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(
            client, task_queue, approval_input(script, tool_approval=auto_mode(*judge))
        )
        await until(run, "approval_requested")
        # Off while the judge works: the call under review goes to a person at once.
        said = await run.set_auto_mode(off=True)
        assert "auto mode is off" in said and "1 call under review went to a person" in said
        first = await waiting_for_a_person(run)
        assert first.call_id == "call_1_1" and started_labels() == []
        await run.decide_tool_call("call_1_1", approve=True)
        # Off for the rest of the run: the next call asks a person without a judge.
        second = await waiting_for_a_person(run)
        assert second.call_id == "call_2_1" and second.verdict is None
        # New rules (the judge stays): the third call is judged again.
        rules = AutoRules(criteria={"drafts": WRITES}, default="drafts")
        assert "new rules" in await run.set_auto_mode(rules=rules)
        await run.decide_tool_call("call_2_1", approve=True)
        result, _ = await finish(run)
    assert started_labels() == ["draft-1", "draft-2", "draft-3"]
    verdicts = [c.verdict for r in result.step_records for c in r.tool_calls]
    assert verdicts[1] is None and verdicts[2] is not None
    assert (verdicts[2].criteria, verdicts[2].outcome) == ("drafts", "approved")


async def test_an_operator_cannot_give_rules_to_a_run_without_a_judge(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("write_thing", label="w1")), turn(text="done")]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, approval_input(script))
        await waiting_for_a_person(run)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await run.set_auto_mode(rules=AutoRules(criteria={"w": WRITES}, default="w"))
        assert "this run has no auto mode" in str(refused.value.cause)
        await run.decide_tool_call("call_1_1", approve=True)
        await finish(run)


async def test_the_judges_tokens_count_against_the_runs_budget(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [turn(call("write_thing", label="draft-9")), turn(text="done")]
    judge = turn(
        call("verdict", decision="approve", confidence=0.99, reason="a draft"),
        usage={"input_tokens": 5_000, "output_tokens": 10},
    )
    agent_input = approval_input(
        script, tool_approval=auto_mode(judge), limits=Limits(max_total_tokens=4_000)
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        with pytest.raises(AgentRunFailed) as failed:
            await run.result()
        transcript = await run.transcript()
        decided = [e.outcome async for e in events_of(run) if e.kind == "approval_decided"]
    assert failed.value.type == "AgentBudgetExceeded"
    assert "max_total_tokens=4000" in failed.value.message
    assert started_labels() == []  # approved, but the run could no longer afford it
    # The judge approved it; it did not run, and its approval says so.
    assert decided == ["approved", "not_run"]
    refused = results(transcript)["call_1_1"]
    assert refused.is_error and "Not run: max_total_tokens=4000 exceeded" in refused.content


# --- the judge on a real provider's SDK, over the local fakes of their APIs -------------------


PRICE = Price(input=1.0, cached_input=0.1, output=2.0)


def sdk_judge(provider: str, model: str, **settings: Any) -> ToolApprovalPolicy:
    return ToolApprovalPolicy(
        auto_mode=AutoMode(
            judge=ModelSettings(
                provider=provider,  # type: ignore[arg-type]
                model=model,
                retry={"maximum_attempts": 1},
                price=PRICE,
                **settings,
            ),
            criteria={"writes": WRITES},
            tools={"write_thing": "writes"},
        )
    )


async def test_an_openai_judge_is_made_to_answer_with_its_verdict(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    test_tools.events.clear()
    said = json.dumps({"decision": "approve", "confidence": 0.9, "reason": "a draft"})
    script = [turn(call("write_thing", label="draft-o")), turn(text="done")]
    with fake_openai.FakeOpenAI([fake_openai.Reply(tool_calls=[("v1", "verdict", said)])]) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", fake.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        agent_input = approval_input(script, tool_approval=sdk_judge("openai", "gpt-judge"))
        priced = agent_input.model.model_copy(update={"price": PRICE})
        async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
            run = await start(client, task_queue, agent_input.model_copy(update={"model": priced}))
            result, _ = await finish(run)
    assert started_labels() == ["draft-o"]
    body = fake.requests[0].body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "verdict"}}
    assert body["parallel_tool_calls"] is False
    assert [t["function"]["name"] for t in body["tools"]] == ["verdict"]
    judged = json.loads(body["messages"][-1]["content"])
    assert judged["call"] == {
        "tool": "write_thing",
        "tool_description": judged["call"]["tool_description"],
        "arguments": {"label": "draft-o"},
    }
    assert judged["task"] == "where is order 1042"
    assert "Approve when: the label starts with draft" in body["messages"][0]["content"]
    verdict_record = result.step_records[0].tool_calls[0].verdict
    assert verdict_record is not None and verdict_record.outcome == "approved"
    # The judge's priced call is in the run's cost, beside the steps'.
    steps = sum(r.usage.cost_usd or 0 for r in result.step_records)
    assert verdict_record.usage.cost_usd
    assert result.usage.cost_usd == pytest.approx(steps + verdict_record.usage.cost_usd)


async def test_an_anthropic_judge_that_thinks_is_asked_not_forced(
    client: Client, task_queue: str, claude: fake_anthropic.FakeAnthropic
) -> None:
    test_tools.events.clear()
    said = {"decision": "approve", "confidence": 0.95, "reason": "a draft"}
    claude.script.append(fake_anthropic.Reply(tool_uses=[("toolu_v", "verdict", said)]))
    script = [turn(call("write_thing", label="draft-a")), turn(text="done")]
    policy = sdk_judge("anthropic", "claude-judge", thinking_budget_tokens=1024)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, approval_input(script, tool_approval=policy))
        result, _ = await finish(run)
    assert started_labels() == ["draft-a"]
    # The API refuses a forced tool with thinking on (the fake too): the judge is asked.
    body = claude.requests[0].body
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert result.step_records[0].tool_calls[0].verdict.outcome == "approved"  # type: ignore[union-attr]


async def test_the_cli_shows_the_judges_verdict_and_turns_auto_mode_off(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    address = client.service_client.config.target_host

    async def cli(*argv: str) -> tuple[int, str, str]:
        process = await starter(address, *argv)
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    script = [turn(call("write_thing", label="w1")), turn(call("write_thing", label="w2"))]
    script.append(turn(text="done"))
    judge = verdict("approve", 0.4, "probably fine")
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(
            client, task_queue, approval_input(script, tool_approval=auto_mode(judge))
        )
        await waiting_for_a_person(run)
        code, out, _ = await cli("calls", run.id)
        assert code == 0 and "call_1_1" in out
        assert "judge (writes): approve (confidence 0.40), under the criteria's 0.80" in out
        broken = tmp_path / "rules.json"
        broken.write_text('{"criteria": {"w": {"effect": "writes"}}, "default": "x"}')
        code, _, err = await cli("auto-mode", run.id, "--rules", str(broken))
        assert code == 2 and "no criteria named 'x'" in err and err.count("\n") == 1
        code, out, _ = await cli("auto-mode", run.id, "--off")
        assert code == 0 and f"{run.id}: auto mode is off" in out
        await run.decide_tool_call("call_1_1", approve=True)
        second = await waiting_for_a_person(run)
        assert second.call_id == "call_2_1" and second.verdict is None  # no judge now
        await run.decide_tool_call("call_2_1", approve=True)
        await finish(run)
        code, out, _ = await cli("trace", run.id)
        assert code == 0 and "write_thing ok" in out and "(judge escalated)" in out


async def test_auto_mode_over_http_from_a_runs_json_input(api: httpx.AsyncClient) -> None:
    """An app in any language: auto mode in the run's JSON input, the verdict in the status and
    the event stream, the operator's change by POST."""
    test_tools.events.clear()
    judge = {"calls": [{"name": "verdict", "arguments": {"decision": "escalate",
             "confidence": 0.9, "reason": "not a draft"}}]}  # fmt: skip
    body = {
        "prompt": "write w1",
        "tools": ["write_thing"],
        "model": {
            "provider": "scripted",
            "script": [
                {"calls": [{"name": "write_thing", "arguments": {"label": "w1"}}]},
                {"text": "done"},
            ],
        },
        "tool_approval": {
            "auto_mode": {
                "judge": {"provider": "scripted", "script": [judge]},
                "criteria": {"writes": WRITES.model_dump()},
                "default": "writes",
            }
        },
    }
    started = await api.post("/api/runs", json=body)
    assert started.status_code == 201, started.text
    workflow_id = started.json()["workflow_id"]

    async def escalated() -> dict[str, Any]:
        while True:
            status = (await api.get(f"/api/runs/{workflow_id}")).json()
            if status["status"] == "awaiting_approval":
                return dict(status["approvals"][0])
            await asyncio.sleep(0.1)

    waiting = await asyncio.wait_for(escalated(), 30)
    assert waiting["verdict"]["outcome"] == "escalated" and not waiting.get("judging")
    assert waiting["verdict"]["reason"] == "not a draft"
    changed = await api.post(f"/api/runs/{workflow_id}/auto-mode", json={"off": True})
    assert changed.status_code == 200 and changed.json() == {"auto_mode": "auto mode is off"}
    neither = await api.post(f"/api/runs/{workflow_id}/auto-mode", json={})
    assert neither.status_code == 422
    decided = await api.post(
        f"/api/runs/{workflow_id}/decisions",
        json={"kind": "tool_call", "call_id": waiting["call_id"], "approve": True},
    )
    assert decided.status_code == 200, decided.text
    events = await sse(api, workflow_id)
    verdicts = [json.loads(e["data"]) for e in events if e.get("event") == "judge_verdict"]
    assert [(v["outcome"], v["confidence"]) for v in verdicts] == [("escalated", 0.9)]
    assert started_labels() == ["w1"]


def test_the_documented_example_builds_a_policy_for_the_demos_tools() -> None:
    """docs/people-in-the-loop.md's example, as written: its policy validates, and the tools it
    names are the demo's, which ask a person."""
    doc = (Path(__file__).parent.parent / "docs" / "people-in-the-loop.md").read_text()
    section = doc.split("## Auto mode: a judge before a person", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    setup = code.split("run = await", 1)[0]
    names: dict[str, Any] = {}
    exec(setup, names)
    policy = names["policy"]
    assert isinstance(policy, ToolApprovalPolicy) and policy.auto_mode is not None
    import durable_agent.demo.tools  # noqa: F401  (registers the demo's tools)

    demo = {spec.name: spec for spec in tool_specs()}
    for tool in policy.auto_mode.tools:
        assert demo[tool].side_effects, tool  # a tool that asks, so the judge sees its calls
    assert policy.auto_mode.criteria_for("issue_refund") == ("refunds", names["refunds"])
    assert policy.auto_mode.criteria_for("cancel_order") is None  # default=None: a person


async def test_a_sub_agent_judges_its_calls_and_hands_its_parent_only_the_unsure_ones(
    client: Client, task_queue: str
) -> None:
    judge = [
        verdict("approve", 0.95, "the customer asked", expect='"tool": "cancel_order"'),
        verdict("approve", 0.3, "a refund? not sure", expect='"tool": "issue_refund"'),
    ]
    policy = auto_mode(*judge, tools={}, default="writes")
    async with serving(client, task_queue) as agents:
        run = await agents.start(delegating_input().model_copy(update={"tool_approval": policy}))
        # The judged cancel never reached the parent; the unsure refund did, with the verdict.
        status = await waiting_in_sub_agent(run, "call_1_1/call_2_1")
        assert status.status == "awaiting_approval"
        [waiting] = status.sub_agent_approvals
        assert waiting.tool == "issue_refund" and waiting.verdict is not None
        assert waiting.verdict.outcome == "escalated" and not waiting.judging
        await run.decide_tool_call("call_1_1/call_2_1", approve=False, reason="no refunds today")
        result = await run.result()
        child = agents.run(f"{run.id}/call_1_1")
        records = [c for r in (await child.result()).step_records for c in r.tool_calls]
        events = [item.data async for item in run.events()]
    assert result.answer == "The sub-agent cancelled it; no refund."
    assert [(c.name, c.verdict.outcome if c.verdict else None) for c in records] == [
        ("cancel_order", "approved"),
        ("issue_refund", "escalated"),
    ]
    asked = [e.call_id for e in events if e.kind == "approval_requested"]
    assert asked == ["call_1_1/call_2_1"]  # the parent was never told of the judged cancel


async def test_a_judge_that_takes_too_long_hands_the_call_to_a_person(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [turn(call("write_thing", label="w1")), turn(text="done")]
    slow = verdict("approve", 0.99, "too late to matter", delay_seconds=30)
    policy = auto_mode(slow)
    assert policy.auto_mode is not None
    policy.auto_mode.timeout_seconds = 1.0
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, approval_input(script, tool_approval=policy))
        waiting = await waiting_for_a_person(run)
        assert waiting.verdict is not None and waiting.verdict.decision is None
        assert "no answer within 1 s" in waiting.verdict.reason, waiting.verdict.reason
        assert started_labels() == []
        await run.decide_tool_call("call_1_1", approve=True)
        result, _ = await finish(run)
    assert result.answer == "done" and started_labels() == ["w1"]


# --- an operator's change reaches the sub-agents that run (issue 47) ---------------------------

CANCEL, REFUND = "call_1_1/call_1_1", "call_1_1/call_2_1"
"""The sub-agent's two calls (delegating_input), as its parent names them."""


def judged_by_a_sub_agent(*judge: ScriptedTurn) -> Any:
    """delegating_input, its sub-agent judged by `judge`: one turn per call, in its order."""
    policy = auto_mode(*judge, tools={}, default="writes")
    return delegating_input().model_copy(update={"tool_approval": policy})


async def test_turning_auto_mode_off_reaches_a_sub_agent_that_runs(
    client: Client, task_queue: str
) -> None:
    """The emergency stop, sent to the run a person started, holds for the whole tree: the
    sub-agent that runs already had its own copy of the judge, which would approve its next call
    with nobody asked. Now that call waits for a person, and the judge is not asked."""
    judge = [
        verdict("escalate", 0.9, "a cancel is a person's to decide"),
        verdict("approve", 0.95, "a small refund"),  # never asked: auto mode is off by then
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(judged_by_a_sub_agent(*judge))
        await waiting_in_sub_agent(run, CANCEL)
        said = await run.set_auto_mode(off=True)
        await run.decide_tool_call(CANCEL, approve=True)

        status = await waiting_in_sub_agent(run, REFUND)
        refund = next(a for a in status.sub_agent_approvals if a.call_id == REFUND)
        assert (refund.tool, refund.verdict, refund.judging) == ("issue_refund", None, False)
        await run.decide_tool_call(REFUND, approve=False, reason="no refunds today")
        result = await run.result()
        child = agents.run(f"{run.id}/call_1_1")
        records = [c for r in (await child.result()).step_records for c in r.tool_calls]
        judged = [e async for e in events_of(child) if e.kind == "judge_verdict"]
        parent_history = await run.handle.fetch_history()
        child_history = await child.handle.fetch_history()
    assert result.answer == "The sub-agent cancelled it; no refund."
    assert [(c.name, c.outcome, c.verdict is not None) for c in records] == [
        ("cancel_order", "ok", True),
        ("issue_refund", "denied", False),
    ]
    assert [e.call_id for e in judged] == ["call_1_1"]  # the judge's second turn was not played
    assert said == f"auto mode is off; it reached the running sub-agent {run.id}/call_1_1"
    # One signal, as docs/people-in-the-loop.md counts it, and both sides replay.
    forwarded = [
        e
        for e in parent_history.events
        if e.signal_external_workflow_execution_initiated_event_attributes.signal_name
        == "set_auto_mode"
    ]
    signalled = [
        e
        for e in child_history.events
        if e.workflow_execution_signaled_event_attributes.signal_name == "set_auto_mode"
    ]
    assert len(forwarded) == len(signalled) == 1
    for history in (parent_history, child_history):
        replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, history.workflow_id


async def test_new_rules_from_the_command_line_reach_a_sub_agent_that_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Rules replaced on the parent, as an operator does at a terminal: the running sub-agent
    judges its next call by them. Under the old criteria its judge's 0.95 approved the refund;
    the new ones want 0.99, so a person decides."""
    address = client.service_client.config.target_host
    refunds = ApprovalCriteria(effect="refunds money", approve_when="small", min_confidence=0.99)
    rules = tmp_path / "rules.json"
    rules.write_text(
        AutoRules(
            criteria={"refunds": refunds}, tools={"issue_refund": "refunds"}
        ).model_dump_json()
    )
    judge = [
        verdict("escalate", 0.9, "a cancel is a person's to decide"),
        verdict("approve", 0.95, "a small refund"),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(judged_by_a_sub_agent(*judge))
        await waiting_in_sub_agent(run, CANCEL)
        process = await starter(address, "auto-mode", run.id, "--rules", str(rules))
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        await run.decide_tool_call(CANCEL, approve=True)

        status = await waiting_in_sub_agent(run, REFUND)
        refund = next(a for a in status.sub_agent_approvals if a.call_id == REFUND)
        assert refund.verdict is not None
        assert (refund.verdict.criteria, refund.verdict.outcome) == ("refunds", "escalated")
        await run.decide_tool_call(REFUND, approve=False, reason="no refunds today")
        assert (await run.result()).answer == "The sub-agent cancelled it; no refund."
    assert out.decode() == (
        f"{run.id}: auto mode judges by the new rules; it reached the running sub-agent "
        f"{run.id}/call_1_1\n"
    )


async def test_a_change_by_signal_in_the_runs_first_task_holds_from_its_first_call(
    client: Client, task_queue: str
) -> None:
    """A parent sends the change to a sub-agent once its start is confirmed, which may be
    before the sub-agent's first workflow task: the signal then comes before its loop has
    built the judge. It holds all the same (sent here with the start itself), and the history
    replays."""
    test_tools.events.clear()
    script = [turn(call("write_thing", label="draft-1")), turn(text="done")]
    judge = verdict("approve", 0.95, "a draft")  # never asked: auto mode is off from the start
    agent_input = approval_input(script, tool_approval=auto_mode(judge))
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=f"approve-{uuid.uuid4()}",
            task_queue=task_queue,
            start_signal="set_auto_mode",
            start_signal_args=[AutoModeChange(off=True)],
        )
        run = AgentRun(handle, client)
        waiting = await waiting_for_a_person(run)
        assert (waiting.call_id, waiting.verdict) == ("call_1_1", None)
        assert started_labels() == []
        await run.decide_tool_call("call_1_1", approve=True)
        result, _ = await finish(run)
        history = await handle.fetch_history()
    assert result.answer == "done" and started_labels() == ["draft-1"]
    replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None
