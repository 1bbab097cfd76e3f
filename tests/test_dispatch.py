"""Dispatch as pure code: what happens to each call of a reply, decided before anything runs.

No server: `plan_reply` is a function of the calls, the run's facts and its loop counts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_agent.workflows import dispatch
from durable_agent.workflows.builtin_tools import FINISH, SUBMIT_PLAN
from durable_agent.workflows.decisions import ToolCallDecision
from durable_agent.workflows.dispatch import Finish, Refuse, Run, RunFacts, SubmitPlan
from durable_agent.workflows.inputs import ToolApprovalPolicy
from durable_agent.workflows.loop_detection import MAX_IDENTICAL_CALLS, LoopDetector
from durable_agent.workflows.specs import ToolSpec
from durable_agent.workflows.transcript import AssistantMessage, ToolCall
from durable_agent.workflows.versioning import Behaviours

READ = ToolSpec(
    name="get_order",
    description="Look up an order.",
    parameters={"type": "object", "properties": {"order_id": {"type": "integer"}}},
)
WRITE = ToolSpec(
    name="cancel_order",
    description="Cancel an order.",
    parameters={"type": "object", "properties": {"order_id": {"type": "integer"}}},
    side_effects=True,
)
TOOLS = {spec.name: spec for spec in (READ, WRITE)}
NOW = Behaviours()
LEGACY = Behaviours(
    reports_status=False,
    per_tool_approval=False,
    bounded_dispatch=False,
    coarse_step_attribute=False,
)


def facts(
    *,
    plan_mode: bool = False,
    plan_approved: bool = False,
    policy: ToolApprovalPolicy | None = None,
    remembered: dict[str, ToolCallDecision] | None = None,
    output_schema: dict[str, Any] | None = None,
    behaviours: Behaviours = NOW,
) -> RunFacts:
    offered = dispatch.offered_tools(
        TOOLS,
        sub_agents=False,
        read_result=None,
        plan_mode=plan_mode,
        plan_approved=plan_approved,
        output_schema=output_schema,
    )
    return RunFacts(
        tools=TOOLS,
        offered=offered,
        plan_mode=plan_mode,
        plan_approved=plan_approved,
        output_schema=output_schema,
        policy=policy or ToolApprovalPolicy(),
        remembered=remembered or {},
        behaviours=behaviours,
    )


def call(name: str, arguments: Any = None, id: str | None = None) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(id=id or f"c-{name}-{text}", name=name, arguments=text)


def plan(*calls: ToolCall, loops: LoopDetector | None = None, **options: Any) -> list[Any]:
    return dispatch.plan_reply(list(calls), facts(**options), loops or LoopDetector())


def test_each_call_gets_exactly_one_planned_action_in_call_order() -> None:
    calls = [call("get_order", {"order_id": 1}), call("nope"), call("get_order", "{bad")]
    planned = plan(*calls)
    assert [p.call for p in planned] == calls
    assert isinstance(planned[0].action, Run) and planned[0].action.arguments == {"order_id": 1}
    assert isinstance(planned[1].action, Refuse) and isinstance(planned[2].action, Refuse)


def test_an_unknown_tool_is_an_error_that_names_the_available_tools() -> None:
    (planned,) = plan(call("get_ordr", {"order_id": 1}))
    assert isinstance(planned.action, Refuse)
    result, record = planned.action.outcome.result, planned.action.outcome.record
    assert result.is_error and record.outcome == "error"
    assert "no tool named 'get_ordr'" in result.content
    assert "Available tools: cancel_order, get_order, finish." in result.content


def test_bad_arguments_are_refused_before_anything_runs() -> None:
    not_json, not_object = plan(call("get_order", "{oops", id="a"), call("get_order", "[1]"))
    assert isinstance(not_json.action, Refuse)
    assert "not valid JSON" in not_json.action.outcome.result.content
    assert isinstance(not_object.action, Refuse)
    assert "must be a JSON object, not list" in not_object.action.outcome.result.content


def test_arguments_nested_too_deep_are_refused_unless_the_run_predates_it() -> None:
    deep: Any = 1
    for _ in range(dispatch.MAX_ARGUMENT_DEPTH + 1):
        deep = {"x": deep}
    (now,) = plan(call("get_order", deep))
    assert isinstance(now.action, Refuse) and "levels deep" in now.action.outcome.result.content
    (before,) = plan(call("get_order", deep), behaviours=LEGACY)
    assert isinstance(before.action, Run)


def test_the_third_identical_call_is_a_loop_and_the_counts_persist() -> None:
    loops = LoopDetector()
    same = [call("get_order", {"order_id": 7}, id=f"c{i}") for i in range(MAX_IDENTICAL_CALLS)]
    assert all(isinstance(p.action, Run) for p in plan(*same, loops=loops))
    # Key order and spacing do not matter: it is the same call.
    (third,) = plan(call("get_order", '{ "order_id" : 7 }', id="c9"), loops=loops)
    assert isinstance(third.action, Refuse)
    assert third.action.outcome.record.outcome == "loop_detected"
    assert loops.counts  # held by the run's state, so continue-as-new keeps them


def test_finish_is_checked_against_the_schema_and_ends_what_comes_after() -> None:
    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "integer"}},
        "required": ["order_id"],
        "additionalProperties": False,
    }
    wrong, right, after = plan(
        call(FINISH, {"order_id": "x"}, id="f1"),
        call(FINISH, {"order_id": 5}, id="f2"),
        call("get_order", {"order_id": 5}),
        output_schema=schema,
    )
    assert isinstance(wrong.action, Refuse)
    assert "does not match the required schema: order_id:" in wrong.action.outcome.result.content
    assert right.action == Finish({"order_id": 5})
    assert isinstance(after.action, Refuse)
    assert after.action.outcome.record.outcome == "not_run"
    assert after.action.outcome.result.content == dispatch.AFTER_FINISH


def test_runs_from_before_bounded_dispatch_still_run_calls_after_finish() -> None:
    _, after = plan(call(FINISH, {"answer": "done"}), call("get_order", {}), behaviours=LEGACY)
    assert isinstance(after.action, Run)


def test_plan_mode_offers_read_only_tools_and_one_plan_at_a_time() -> None:
    write, first, second, finish = plan(
        call("cancel_order", {"order_id": 1}),
        call(SUBMIT_PLAN, {"steps": ["look", "cancel"]}, id="p1"),
        call(SUBMIT_PLAN, {"steps": ["again"]}, id="p2"),
        call(FINISH, {"answer": "x"}),
        plan_mode=True,
    )
    assert isinstance(write.action, Refuse)
    assert write.action.outcome.record.outcome == "refused"
    assert "until a person approves your plan" in write.action.outcome.result.content
    assert first.action == SubmitPlan(["look", "cancel"])
    assert isinstance(second.action, Refuse)
    assert "one plan at a time" in second.action.outcome.result.content
    assert isinstance(finish.action, Refuse)
    assert "submit your plan" in finish.action.outcome.result.content


def test_an_invalid_plan_is_an_error_the_model_can_fix() -> None:
    (bad,) = plan(call(SUBMIT_PLAN, {"steps": []}), plan_mode=True)
    assert isinstance(bad.action, Refuse)
    assert bad.action.outcome.result.content.startswith("Error: the plan is not valid: steps:")


@pytest.mark.parametrize(
    ("options", "ask"),
    [
        ({}, "person"),
        ({"policy": ToolApprovalPolicy(approve_all=True)}, None),
        ({"policy": ToolApprovalPolicy(allow=["cancel_order"])}, None),
        ({"plan_mode": True, "plan_approved": True}, None),
        ({"remembered": {"cancel_order": ToolCallDecision(call_id="x", approve=True)}}, None),
        (
            {"remembered": {"cancel_order": ToolCallDecision(call_id="x", approve=False)}},
            "remembered_denial",
        ),
        ({"behaviours": LEGACY}, None),
    ],
    ids=[
        "default",
        "approve-all",
        "allow-list",
        "plan-approved",
        "remembered-yes",
        "remembered-no",
        "before-approvals",
    ],
)
def test_which_calls_ask_a_person(options: dict[str, Any], ask: str | None) -> None:
    read, write = plan(call("get_order", {"order_id": 1}), call("cancel_order", {}), **options)
    assert read.ask is None
    assert write.ask == ask


def test_calls_that_never_run_ask_nobody() -> None:
    looped = LoopDetector()
    for i in range(MAX_IDENTICAL_CALLS):
        looped.record("cancel_order", json.dumps({"order_id": i % 1}))
    refused = plan(
        call("cancel_order", "{bad"),
        call("cancel_order", {"order_id": 0}),
        call("nope"),
        loops=looped,
    )
    assert [p.ask for p in refused] == [None, None, None]


def test_call_ids_are_made_unique_within_the_run() -> None:
    message = AssistantMessage(
        content=None,
        tool_calls=(
            ToolCall(id="", name="get_order", arguments="{}"),
            ToolCall(id="dup", name="get_order", arguments="{}"),
            ToolCall(id="dup", name="get_order", arguments="{}"),
        ),
    )
    fixed = dispatch.with_unique_call_ids(message, step=3, earlier={"call_3_3"})
    ids = [c.id for c in fixed.tool_calls]
    assert ids == ["call_3_1", "dup", "call_3_3_"]
    only = ToolCall(id="a", name="x", arguments="{}")
    untouched = AssistantMessage(content=None, tool_calls=(only,))
    assert dispatch.with_unique_call_ids(untouched, 1, set()) is untouched


def test_a_call_id_with_a_slash_is_renamed_so_no_own_id_looks_like_a_sub_agents() -> None:
    """A parent names its sub-agent's calls `delegate/own` (issue 47): its own ids have no '/'."""
    message = AssistantMessage(
        content=None,
        tool_calls=(
            ToolCall(id="call_1_1", name="delegate", arguments="{}"),
            ToolCall(id="call_1_1/call_2_1", name="send_email", arguments="{}"),
        ),
    )
    assert dispatch.check_reply(message.tool_calls).slashed_call_ids
    fixed = dispatch.with_unique_call_ids(message, step=1, earlier=set(), unqualified_ids=True)
    assert [c.id for c in fixed.tool_calls] == ["call_1_1", "call_1_2"]
    # A run recorded before the rename keeps it (versioning.renames_slashed_call_ids).
    assert dispatch.with_unique_call_ids(message, step=1, earlier=set()) is message
