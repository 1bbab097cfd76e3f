"""The loop of seed 000 on a real dev server, driven by the scripted model."""

from __future__ import annotations

import json
import logging

import pytest
from temporalio.client import Client

import tests.tools_for_tests as test_tools
from durable_agent.activities.providers import scripted
from durable_agent.activities.providers.scripted import recorded_requests
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.inputs import Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedTurn
from durable_agent.workflows.specs import ToolSpec
from durable_agent.workflows.transcript import AssistantMessage, ToolResult, UserMessage
from durable_agent.workflows.usage import Usage
from tests.helpers import call, run_agent, scripted_input, turn


@pytest.mark.usefixtures("scripted_requests")
async def test_demo_tools_answer_the_seed_question(client: Client, task_queue: str) -> None:
    script = [
        turn(call("search_orders", email="a@b.com"), text="I need the order history."),
        turn(call("get_tracking", order_id=1042), expect="1042"),
        turn(text="Order #1042: {last_tool_result}", expect="14:20"),
    ]
    run = await run_agent(client, task_queue, scripted_input(script))

    assert run.result is not None
    assert run.result.steps == 3
    assert "14:20" in run.result.answer
    roles = [m.role for m in run.transcript]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert run.result.usage.input_tokens > 0
    # The model saw the tool's real output from SQLite, sent back under the matching id.
    second_request = recorded_requests(run.handle.id)[1]
    result = second_request.messages[-1]
    assert isinstance(result, ToolResult) and result.tool_call_id == "call_1_1"
    assert json.loads(result.content)["total_orders"] == 3


async def test_assistant_message_is_recorded_before_its_tools_run(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("hang", seconds=5)), turn(text="gave up")]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["hang"]))

    assert isinstance(run.transcript[1], AssistantMessage)
    assert run.transcript[1].tool_calls[0].name == "hang"
    assert run.tool_results()["call_1_1"] == "Error: hang timed out (limit 0.3 s a try)."


async def test_finish_ends_the_run_with_its_answer(client: Client, task_queue: str) -> None:
    script = [turn(call("finish", answer="delivered yesterday"))]
    run = await run_agent(client, task_queue, scripted_input(script, tools=[]))

    assert run.result is not None and run.result.answer == "delivered yesterday"
    assert run.tool_results() == {"call_1_1": "Answer recorded; the run ends here."}


async def test_finish_arguments_are_checked_against_the_output_schema(
    client: Client, task_queue: str
) -> None:
    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "integer"}, "status": {"type": "string"}},
        "required": ["order_id", "status"],
    }
    script = [
        turn(call("finish", order_id="1042")),
        turn(call("finish", order_id=1042, status="delivered"), expect="does not match"),
    ]
    run = await run_agent(
        client, task_queue, scripted_input(script, tools=[], output_schema=schema)
    )

    assert run.result is not None
    assert run.result.output == {"order_id": 1042, "status": "delivered"}
    rejected = run.tool_results()["call_1_1"]
    assert 'order_id: "1042" is not of type "integer"' in rejected
    assert '(answer): "status" is a required property' in rejected


async def test_plain_text_does_not_end_a_run_that_needs_a_schema(
    client: Client, task_queue: str
) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    script = [turn(text="it is 3"), turn(call("finish", n=3), expect="call to finish")]
    run = await run_agent(
        client, task_queue, scripted_input(script, tools=[], output_schema=schema)
    )

    assert run.result is not None and run.result.output == {"n": 3} and run.result.steps == 2
    assert isinstance(run.transcript[2], UserMessage)


@pytest.mark.usefixtures("scripted_requests")
async def test_step_limit_fails_loudly_with_the_figures(client: Client, task_queue: str) -> None:
    script = [turn(call("count_me", key=f"step{i}")) for i in range(5)]
    run = await run_agent(
        client, task_queue, scripted_input(script, tools=["count_me"], limits=Limits(max_steps=3))
    )

    assert run.failure.type == "AgentStepLimitExceeded"
    assert run.failure.non_retryable
    assert "max_steps=3" in run.failure.message and "3 model calls" in run.failure.message
    assert run.failure.details[0]["steps"] == 3
    assert len(recorded_requests(run.handle.id)) == 3


async def test_total_token_budget_stops_before_running_the_tools(
    client: Client, task_queue: str
) -> None:
    usage = Usage(input_tokens=80, output_tokens=20)
    script = [turn(call("count_me", key=f"tokens{i}"), usage=usage) for i in range(5)]
    agent_input = scripted_input(script, tools=["count_me"], limits=Limits(max_total_tokens=250))
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentBudgetExceeded"
    assert "max_total_tokens=250" in run.failure.message
    assert "300 tokens" in run.failure.message
    # The third reply's call was answered, not run: the transcript stays valid.
    assert test_tools.executions["tokens2"] == 0
    assert run.tool_results()["call_3_1"].startswith("Not run: the run stopped")


async def test_context_budget_counts_what_was_appended(client: Client, task_queue: str) -> None:
    usage = Usage(input_tokens=100, output_tokens=10)
    script = [turn(call("blob", size=40), usage=usage), turn(text="fits")]
    limits = Limits(max_context_tokens=600)
    small = await run_agent(
        client, task_queue, scripted_input(script, tools=["blob"], limits=limits)
    )
    assert small.result is not None  # 110 reported + a small result fits

    script[0] = turn(call("blob", size=4000), usage=usage)
    large = await run_agent(
        client, task_queue, scripted_input(script, tools=["blob"], limits=limits)
    )
    assert large.failure.type == "AgentBudgetExceeded"
    assert "max_context_tokens=600" in large.failure.message
    # 110 tokens reported by the provider, plus about 1,000 for the 4,000-character result.
    assert "about 11" in large.failure.message


async def test_wall_time_limit(client: Client, task_queue: str) -> None:
    script = [turn(call("hang", seconds=5)), turn(text="never")]
    limits = Limits(max_wall_seconds=0.2)
    run = await run_agent(client, task_queue, scripted_input(script, tools=["hang"], limits=limits))

    assert run.failure.type == "AgentBudgetExceeded"
    assert "max_wall_seconds=0.2" in run.failure.message


async def test_a_call_repeated_a_third_time_is_fed_back_not_run(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("count_me", key="loop")),
        turn(call("count_me", key="loop")),
        # Same arguments written differently: still the same call.
        turn(call("count_me", key="loop")),
        turn(text="I am stuck on count_me", expect="3 times"),
    ]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["count_me"]))

    assert run.result is not None and run.result.steps == 4
    assert test_tools.executions["loop"] == 2
    feedback = run.tool_results()["call_3_1"]
    assert "You have called count_me with these arguments 3 times" in feedback
    assert "Try a different approach" in feedback


async def test_read_only_calls_run_concurrently(client: Client, task_queue: str) -> None:
    script = [
        turn(call("rendezvous", group="g1", party="a"), call("rendezvous", group="g1", party="b")),
        turn(text="done"),
    ]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["rendezvous"]))

    assert run.tool_results() == {"call_1_1": "met", "call_1_2": "met"}


async def test_side_effecting_calls_run_alone_in_the_models_order(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(
            call("read_thing", label="r1"),
            call("write_thing", label="w1"),
            call("read_thing", label="r2"),
            call("write_thing", label="w2"),
        ),
        turn(text="done"),
    ]
    run = await run_agent(
        client, task_queue, scripted_input(script, tools=["read_thing", "write_thing"])
    )

    assert run.result is not None
    assert test_tools.events == [
        ("start", "r1"), ("end", "r1"),
        ("start", "w1"), ("end", "w1"),
        ("start", "r2"), ("end", "r2"),
        ("start", "w2"), ("end", "w2"),
    ]  # fmt: skip
    results = [m for m in run.transcript if isinstance(m, ToolResult)]
    assert [r.tool_call_id for r in results] == ["call_1_1", "call_1_2", "call_1_3", "call_1_4"]


async def test_what_the_model_can_fix_comes_back_as_results(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(
            call("no_such_tool", x=1),
            call("typed", order_id="abc"),
            turn_raw := call("typed"),
            call("always_fails", secret="hunter2"),
            call("flaky", key="k1", failures=2),
            call("typed", order_id="7", note="ok"),
        ),
        turn(text="done"),
    ]
    script[0].calls[2] = turn_raw.model_copy(update={"arguments": "{not json"})
    script[0].calls.append(call("typed").model_copy(update={"arguments": "[1, 2]"}))
    tools = ["typed", "always_fails", "flaky"]
    run = await run_agent(client, task_queue, scripted_input(script, tools=tools))

    assert run.result is not None
    results = run.tool_results()
    assert results["call_1_1"].startswith("Error: no tool named 'no_such_tool'.")
    assert "Available tools: always_fails, flaky, typed, finish." in results["call_1_1"]
    assert "order_id: Input should be a valid integer" in results["call_1_2"]
    assert "note: Field required" in results["call_1_2"]
    assert "The tool did not run" in results["call_1_2"]
    assert "not valid JSON" in results["call_1_3"]
    assert results["call_1_4"] == "Error: always_fails failed: ValueError"
    assert "hunter2" not in json.dumps(results)
    assert results["call_1_5"] == "ok after 3 attempts"  # the tool's own retries, one model call
    assert json.loads(results["call_1_6"]) == {"order_id": 7, "note": "ok", "rush": False}
    assert "must be a JSON object, not list" in results["call_1_7"]
    errors = {m.tool_call_id for m in run.transcript if isinstance(m, ToolResult) and m.is_error}
    assert errors == {"call_1_1", "call_1_2", "call_1_3", "call_1_4", "call_1_7"}


async def test_a_fatal_tool_error_fails_the_run_and_skips_what_follows(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("bad_credential"), call("write_thing", label="after-fatal")),
        turn(text="never"),
    ]
    test_tools.events.clear()
    run = await run_agent(
        client, task_queue, scripted_input(script, tools=["bad_credential", "write_thing"])
    )

    assert run.failure.type == "AgentFatalToolError"
    assert "billing system was revoked" in run.failure.message
    assert ("start", "after-fatal") not in test_tools.events
    assert run.tool_results()["call_1_2"].startswith("Not run: the run is ending")


async def test_results_are_bounded_keeping_both_ends(client: Client, task_queue: str) -> None:
    script = [turn(call("big_text", size=5000)), turn(text="done")]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["big_text"]))

    content = run.tool_results()["call_1_1"]
    assert len(content) <= 200
    assert content.startswith("HEAD") and content.endswith("TAIL")
    assert "characters omitted" in content


async def test_repeated_call_ids_from_the_model_are_made_unique(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("count_me", id="dup", key="d1"), call("count_me", id="dup", key="d2")),
        turn(text="done"),
    ]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["count_me"]))

    assert list(run.tool_results()) == ["dup", "call_1_2"]


async def test_unknown_tool_in_the_input_fails_at_once(client: Client, task_queue: str) -> None:
    run = await run_agent(client, task_queue, scripted_input([], tools=["get_order", "nope"]))

    assert run.failure.type == "AgentConfigurationError"
    assert "nope" in run.failure.message


async def test_the_scripted_model_says_where_the_run_left_its_script(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("count_me", key="s")), turn(text="x", expect="something else")]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["count_me"]))

    assert run.failure.type == "ScriptedModelMismatch"
    assert "reply 2 expects" in run.failure.message and "'something else'" in run.failure.message


async def test_every_step_and_call_is_traced(client: Client, task_queue: str) -> None:
    script = [
        turn(
            call("flaky", key="traced", failures=2),
            call("big_text", size=5000),
            call("always_fails", secret="s"),
            call("nope"),
        ),
        turn(call("count_me", key="t"), usage=Usage(input_tokens=50, output_tokens=5)),
        turn(call("count_me", key="t")),
        turn(call("count_me", key="t")),
        turn(text="done"),
    ]
    tools = ["flaky", "big_text", "always_fails", "count_me"]
    run = await run_agent(client, task_queue, scripted_input(script, tools=tools))

    assert run.result is not None
    trace = run.trace  # the `trace` query, asked before the worker stopped
    assert trace == run.result.step_records
    first, second, *_, last = trace
    assert (first.step, first.provider, first.model) == (1, "scripted", "scripted")
    assert (first.messages_sent, first.finish_reason, first.model_attempts) == (1, "tool_calls", 1)
    assert second.messages_sent == 1 + 1 + 4  # the prompt, the reply, its four results
    assert second.usage == Usage(input_tokens=50, output_tokens=5, cost_usd=None)
    assert last.finish_reason == "stop" and last.tool_calls == []
    flaky, big, failing, unknown = first.tool_calls
    assert (flaky.outcome, flaky.attempts, flaky.error) == ("ok", 3, None)
    assert json.loads(flaky.arguments) == {"key": "traced", "failures": 2}
    assert big.truncated and big.result_chars <= 200
    assert (failing.outcome, failing.attempts) == ("error", 3)
    assert failing.error == "Error: always_fails failed: ValueError"
    assert (unknown.outcome, unknown.attempts) == ("error", 0)
    assert [c.outcome for step in trace[1:4] for c in step.tool_calls] == [
        "ok",
        "ok",
        "loop_detected",
    ]


async def test_worker_logs_name_the_run_the_step_and_the_call(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    script = [turn(call("always_fails", secret="s3")), turn(text="x", expect="never there")]
    with caplog.at_level(logging.INFO):
        run = await run_agent(client, task_queue, scripted_input(script, tools=["always_fails"]))

    assert run.failure.type == "ScriptedModelMismatch"
    tool_lines = [r for r in caplog.records if "tool always_fails failed" in r.getMessage()]
    assert tool_lines and all(r.exc_info for r in tool_lines)  # the traceback, for the operator
    assert (
        "step 1: tool always_fails failed (call call_1_1, attempt 1)" in tool_lines[0].getMessage()
    )
    assert tool_lines[0].__dict__["temporal_activity"]["workflow_id"] == run.handle.id
    model_lines = [
        r for r in caplog.records if "scripted call to scripted failed" in r.getMessage()
    ]
    assert model_lines[0].getMessage().startswith("step 2: ")
    step_lines = [
        r for r in caplog.records if r.getMessage().startswith("step 1: scripted replied")
    ]
    assert (
        step_lines and step_lines[0].__dict__["temporal_workflow"]["workflow_id"] == run.handle.id
    )


async def test_an_output_schema_that_refers_outside_itself_is_refused_at_the_start(
    client: Client, task_queue: str
) -> None:
    """Checking finish's arguments would need the referenced schema, which a workflow cannot
    fetch: refused before step 1, with the reason, instead of wedging the run at its answer."""
    schema = {
        "type": "object",
        "properties": {"order": {"$ref": "https://example.com/order.json"}},
    }
    script = [turn(call("finish", order={"id": 1}))]
    run = await run_agent(
        client, task_queue, scripted_input(script, tools=[], output_schema=schema)
    )

    assert run.failure.type == "AgentConfigurationError"
    assert "https://example.com/order.json" in run.failure.message
    assert "inline them under $defs" in run.failure.message
    assert run.trace == []


async def test_the_scripted_estimate_counts_the_json_of_what_it_was_sent() -> None:
    """Each message's JSON is measured once (the estimate used to dump the whole transcript at
    every call): the count is still that of the whole request's JSON, and of a new message."""
    tool = ToolSpec(name="lookup", description="d", parameters={"type": "object"})
    messages = [UserMessage(content='say "hé"'), AssistantMessage(content="x" * 301)]
    for sent in (messages, [*messages, UserMessage(content="more")], []):
        request = ModelRequest(
            settings=ModelSettings(provider="scripted", script=[ScriptedTurn(text="ok")] * 5),
            system="be brief",
            messages=sent,
            tools=[tool],
            step=1,
        )
        whole = "be brief" + json.dumps([m.model_dump(mode="json") for m in sent])
        whole += json.dumps([tool.model_dump(mode="json")])
        reply = await scripted.complete(request)
        assert reply.usage.input_tokens == scripted.estimate_tokens(whole)


async def test_a_worker_keeps_no_scripted_requests_unless_a_test_asks(
    client: Client, task_queue: str
) -> None:
    """A long-lived worker serving scripted runs (the demo's) used to hold every request of its
    last 1,000 runs, whole transcripts each, for a reader only tests have."""
    script = [turn(call("get_order", order_id=1042)), turn(text="on its way")]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["get_order"]))

    assert run.result is not None and run.result.steps == 2
    assert run.handle.id not in scripted._requests
    with pytest.raises(RuntimeError, match="requests_recorded"):
        recorded_requests(run.handle.id)


async def test_the_scripted_requests_are_kept_while_asked_and_forgotten_after(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("get_order", order_id=1042)), turn(text="on its way")]
    with scripted.requests_recorded():
        run = await run_agent(client, task_queue, scripted_input(script, tools=["get_order"]))
        requests = recorded_requests(run.handle.id)

    assert [r.step for r in requests] == [1, 2]
    assert isinstance(requests[1].messages[-1], ToolResult)
    assert not scripted._requests
