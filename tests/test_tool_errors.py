"""Tool errors that keep their message (seed 003): a `ToolError`, and by default a `ValueError`
or `TypeError`, fail the call at once with the message as the model's result, recorded as an
error; other exceptions are retried and reduced to their type. In a side-effecting tool only a
`ToolError` says that nothing changed. Real runs on the dev server."""

from __future__ import annotations

import json

from temporalio.client import Client

import durable_agent.workflows.versioning as versioning
import tests.tools_for_tests as test_tools
from durable_agent.activities.tools import MAX_ERROR_MESSAGE_CHARS, ToolError, tool_error_text
from durable_agent.workflows.inputs import Limits
from tests.helpers import Run, call, run_agent, scripted_input, turn


async def patches_asked(run: Run) -> set[str]:
    """The patch ids whose markers the run recorded."""
    history = await run.handle.fetch_history()
    return {
        json.loads(attributes.details["patch-data"].payloads[0].data)["id"]
        for event in history.events
        if (attributes := event.marker_recorded_event_attributes).marker_name == "core_patch"
    }


async def test_a_tool_error_reaches_the_model_once_and_is_recorded_as_an_error(
    client: Client, task_queue: str
) -> None:
    test_tools.executions.clear()
    script = [
        turn(
            call("find_user", email="nobody@b.com"),
            call("parse_quantity", text="two"),
            call("needs_a_list", items="abc"),
            call("find_user", email="a@b.com"),
        ),
        turn(text="done"),
    ]
    tools = ["find_user", "parse_quantity", "needs_a_list"]
    run = await run_agent(client, task_queue, scripted_input(script, tools=tools))

    assert run.result is not None
    results = run.tool_results()
    assert results["call_1_1"] == "Error: find_user failed: No user has the email nobody@b.com"
    assert results["call_1_2"] == (
        "Error: parse_quantity failed: ValueError: invalid literal for int() with base 10: "
        "'two'. Check the arguments and try again."
    )
    assert results["call_1_3"].startswith(
        "Error: needs_a_list failed: TypeError: unsupported operand"
    )
    assert results["call_1_4"] == "user_1"
    # Each ran once: a message for the model is not retried.
    assert test_tools.executions["find_user:nobody@b.com"] == 1
    assert test_tools.executions["parse_quantity"] == 1
    assert test_tools.executions["needs_a_list"] == 1
    records = {c.id: c for c in run.trace[0].tool_calls}
    for failed in ("call_1_1", "call_1_2", "call_1_3"):
        assert (records[failed].outcome, records[failed].attempts) == ("error", 1)
        assert records[failed].error == results[failed][:300]
    assert records["call_1_4"].outcome == "ok"


async def test_other_exceptions_are_retried_and_reduced_to_their_type(
    client: Client, task_queue: str
) -> None:
    """`errors_to_model` is per tool: lookup_code passes a KeyError's message on, and its
    ValueError is then an unexpected exception."""
    test_tools.executions.clear()
    script = [
        turn(call("lookup_code", code="k9"), call("lookup_code", code="v9")),
        turn(text="done"),
    ]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["lookup_code"]))

    results = run.tool_results()
    assert results["call_1_1"] == (
        "Error: lookup_code failed: KeyError: 'no code k9'. Check the arguments and try again."
    )
    assert results["call_1_2"] == "Error: lookup_code failed: ValueError"
    assert (test_tools.executions["lookup_code:k9"], test_tools.executions["lookup_code:v9"]) == (
        1,
        3,
    )
    attempts = [(c.outcome, c.attempts) for c in run.trace[0].tool_calls]
    assert attempts == [("error", 1), ("error", 3)]


async def test_a_long_message_is_bounded(client: Client, task_queue: str) -> None:
    script = [turn(call("long_complaint", size=50_000)), turn(text="done")]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["long_complaint"]))

    result = run.tool_results()["call_1_1"]
    assert result.startswith("Error: long_complaint failed: ValueError: HEADccc")
    assert "(50,008 characters)" in result
    assert len(result) < MAX_ERROR_MESSAGE_CHARS + 200


async def test_a_refused_write_is_not_logged_as_an_effect(client: Client, task_queue: str) -> None:
    """The workaround of returning "Error: ..." recorded the call as ok, and a failed run then
    listed the write that never happened as not undone. A ToolError changes nothing."""
    test_tools.executions.clear()
    script = [
        turn(call("refuse_write", label="o-1")),
        turn(call("write_thing", label="w-1")),
        turn(call("bad_credential")),
        turn(text="never"),
    ]
    tools = ["refuse_write", "write_thing", "bad_credential"]
    run = await run_agent(client, task_queue, scripted_input(script, tools=tools))

    assert run.failure.type == "AgentFatalToolError"
    assert run.tool_results()["call_1_1"] == (
        "Error: refuse_write failed: order o-1 is not pending, so it cannot be changed"
    )
    assert test_tools.executions["refuse_write:o-1"] == 1
    compensations = run.failure.details[0]["compensations"]
    assert [(r["tool"], r["status"]) for r in compensations] == [("write_thing", "not_undone")]
    assert versioning.ERRORS_AFTER_EFFECTS not in await patches_asked(run)


async def test_an_exception_after_a_side_effect_is_an_unknown_outcome_and_undone(
    client: Client, task_queue: str
) -> None:
    """A card charged, then the gateway's reply not parsed (a JSONDecodeError, a ValueError):
    the model was told "Check the arguments and try again", charged again, and the failed run
    refunded nothing. Now the model is told the charge may have gone through, the call is not
    retried, and the run that fails at its limit refunds it once. A ToolError still changed
    nothing, and a read-only tool's ValueError is as it was."""
    test_tools.executions.clear()
    script = [
        turn(call("charge_card", label="declined", decline=True)),
        turn(call("charge_card", label="charged"), call("parse_quantity", text="two")),
        turn(text="never reached"),
    ]
    tools = ["charge_card", "parse_quantity"]
    agent_input = scripted_input(script, tools=tools, limits=Limits(max_steps=2))
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentStepLimitExceeded"
    results = run.tool_results()
    assert results["call_1_1"] == "Error: charge_card failed: the card for declined was declined"
    assert results["call_2_1"] == (
        "Error: charge_card failed: JSONDecodeError: Expecting value: line 1 column 1 (char 0). "
        "It may have taken effect before it stopped: check before calling it again."
    )
    assert results["call_2_2"] == (
        "Error: parse_quantity failed: ValueError: invalid literal for int() with base 10: "
        "'two'. Check the arguments and try again."
    )
    # A retry would have charged again, for a tool that is not idempotent by its key.
    assert test_tools.executions["charge_card:charged"] == 1
    records = {c.id: c for step in run.trace for c in step.tool_calls}
    assert (records["call_1_1"].outcome, records["call_1_1"].attempts) == ("error", 1)
    assert (records["call_2_1"].outcome, records["call_2_1"].attempts) == ("compensated", 1)
    compensations = run.failure.details[0]["compensations"]
    assert [
        (r["tool"], r["tool_call_id"], r["status"], r["outcome_unknown"]) for r in compensations
    ] == [("charge_card", "call_2_1", "completed", True)]
    assert "charge_card call_2_1 (outcome unknown" in run.failure.message
    # Refunded once, by the call's key; the declined call had nothing to refund.
    ours = [key for key in test_tools.refunded if key.startswith(f"{run.handle.id}/")]
    assert len(ours) == 1 and ours[0].endswith("/call_2_1")
    assert not [key for key in test_tools.charges if key.startswith(f"{run.handle.id}/")]
    assert versioning.ERRORS_AFTER_EFFECTS in await patches_asked(run)


def test_the_text_of_each_kind_of_failure() -> None:
    assert tool_error_text("t", ToolError("")) == "Error: t failed: ToolError"
    assert tool_error_text("t", ValueError()) == (
        "Error: t failed: ValueError. Check the arguments and try again."
    )
    assert tool_error_text("t", ValueError("bad date.")) == (
        "Error: t failed: ValueError: bad date. Check the arguments and try again."
    )
    assert tool_error_text("t", ValueError("no JSON."), effect_unknown=True) == (
        "Error: t failed: ValueError: no JSON. It may have taken effect before it stopped: "
        "check before calling it again."
    )
    assert tool_error_text("t", ToolError("declined"), effect_unknown=True) == (
        "Error: t failed: declined"
    )
