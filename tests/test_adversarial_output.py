"""Adversarial model output, through both provider adapters: each test scripts a reply a model
could really send, in the shape its provider sends it (the real `openai` or `anthropic` SDK
against the local fake), and runs AgentWorkflow on the dev server.

Whatever the reply, the run either goes on with a bounded error result the model can act on, or
fails with a named error; the transcript keeps the pairing rule (and every request the fake got
passes the fake's own pairing check, which answers 400 like the API); and the same worker then
completes a plain run.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

import tests.tools_for_tests as test_tools
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, AgentResult
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.specs import DEFAULT_MAX_RESULT_CHARS
from durable_agent.workflows.transcript import AssistantMessage, ToolResult, Transcript
from tests import fake_anthropic, fake_openai
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, Run

TOOLS = ["get_order", "count_me", "typed"]
ANSWER_RECORDED = "Answer recorded; the run ends here."
ERROR_BOUND = 2_000
"""Characters an error result may have: the model needs the reason, not a copy of its input."""


@dataclass(frozen=True)
class Raw:
    """Arguments exactly as this text, valid JSON or not."""

    text: str


Call = tuple[str | None, str, Any]
"""(id, or None to leave the id out; tool name; arguments: a JSON value, or Raw text)."""


class Model:
    """One provider's fake, scripted in neutral terms."""

    def __init__(self, provider: str, fake: fake_openai.FakeOpenAI | fake_anthropic.FakeAnthropic):
        self.provider = provider
        self.fake = fake
        self.last_request: Any = None
        """The newest request of the run under test (not of the plain run after it)."""

    def reply(self, text: str | None = None, *calls: Call, cut_off: bool = False) -> Any:
        if isinstance(self.fake, fake_openai.FakeOpenAI):
            raw_calls = [
                {
                    **({"id": id} if id is not None else {}),
                    "type": "function",
                    "function": {"name": name, "arguments": _text(arguments)},
                }
                for id, name, arguments in calls
            ]
            finish = "length" if cut_off else "tool_calls" if calls else "stop"
            return fake_openai.Reply(
                content=text, tool_calls_json=raw_calls or None, finish_reason=finish
            )
        blocks = [json.dumps({"type": "text", "text": text})] if text is not None else []
        for id, name, arguments in calls:
            head = {"type": "tool_use", **({"id": id} if id is not None else {}), "name": name}
            blocks.append(json.dumps(head)[:-1] + f', "input": {_text(arguments)}}}')
        stop = "max_tokens" if cut_off else "tool_use" if calls else "end_turn"
        return fake_anthropic.Reply(content_json=f"[{', '.join(blocks)}]", stop_reason=stop)

    def input(self, prompt: str = "where is order 1042", **options: Any) -> AgentInput:
        return AgentInput(
            prompt=prompt,
            tools=options.pop("tools", TOOLS),
            model=ModelSettings(provider=self.provider, model="fake-model", retry=FAST_MODEL_RETRY),
            **options,
        )

    def assert_requests_valid(self) -> None:
        requests: list[Any] = self.fake.requests
        for number, request in enumerate(requests, start=1):
            broken: Any
            if isinstance(self.fake, fake_openai.FakeOpenAI):
                broken = fake_openai.pairing_error(request.body["messages"])
            else:
                broken = fake_anthropic.request_error(request.body)
            assert broken is None, f"request #{number} would be refused: {broken.body}"

    def results_in_last_request(self) -> list[str]:
        """The tool results the run's newest request carried, by call id, in order."""
        body = self.last_request.body
        if isinstance(self.fake, fake_openai.FakeOpenAI):
            return [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        return [
            block["tool_use_id"]
            for message in body["messages"]
            if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"]
            if block["type"] == "tool_result"
        ]


def _text(arguments: Any) -> str:
    return arguments.text if isinstance(arguments, Raw) else json.dumps(arguments)


@pytest.fixture(params=["openai", "anthropic"])
def model(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Model]:
    fake: fake_openai.FakeOpenAI | fake_anthropic.FakeAnthropic
    if request.param == "openai":
        with fake_openai.FakeOpenAI() as fake:
            monkeypatch.setenv("OPENAI_API_KEY", fake.api_key)
            monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
            yield Model("openai", fake)
    else:
        with fake_anthropic.FakeAnthropic() as fake:
            monkeypatch.setenv("ANTHROPIC_API_KEY", fake.api_key)
            monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
            yield Model("anthropic", fake)


async def _run(client: Client, task_queue: str, agent_input: AgentInput) -> Run:
    handle = await client.start_workflow(
        AgentWorkflow.run, agent_input, id=f"adversarial-{uuid.uuid4()}", task_queue=task_queue
    )
    result: AgentResult | None = None
    error: ApplicationError | None = None
    try:
        result = await handle.result()
    except WorkflowFailureError as failure:
        assert isinstance(failure.cause, ApplicationError), failure.cause
        error = failure.cause
    transcript = await handle.query(AgentWorkflow.transcript)
    trace = await handle.query(AgentWorkflow.trace)
    return Run(handle, result, error, transcript, trace)


async def run_checked(client: Client, task_queue: str, model: Model, script: list[Any]) -> Run:
    """Play `script`, check what every run must keep, then a plain run on the same worker."""
    model.fake.script += script
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await _run(client, task_queue, model.input())
        assert model.fake.remaining == 0, f"the model was asked fewer times: {run.error}"
        model.assert_requests_valid()
        model.last_request = model.fake.requests[-1]
        model.fake.script.append(model.reply("still here"))
        after = await _run(client, task_queue, model.input("are you there?"))
        assert after.result is not None and after.result.answer == "still here", after.error
    transcript = Transcript(messages=run.transcript)  # raises when the pairing rule is broken
    assert transcript.is_complete()
    for message in run.transcript:
        if isinstance(message, ToolResult):
            bound = ERROR_BOUND if message.is_error else DEFAULT_MAX_RESULT_CHARS
            assert len(message.content) <= bound, message.content[:300]
    return run


def calls_of(run: Run) -> list[tuple[str, str]]:
    return [(c.id, c.name) for m in run.transcript if m.role == "assistant" for c in m.tool_calls]


async def test_a_tool_that_does_not_exist(client: Client, task_queue: str, model: Model) -> None:
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(
                None,
                ("c_weather", "lookup_weather", {"city": "Paris"}),
                # Registered on the worker, but not offered to this run.
                ("c_cancel", "cancel_order", {"order_id": 1042, "reason": "asked"}),
            ),
            model.reply(None, ("c_order", "get_order", {"order_id": 1042})),
            model.reply("Order 1042 was delivered."),
        ],
    )

    assert run.result is not None and run.result.answer == "Order 1042 was delivered."
    results = run.tool_results()
    for call_id, name in (("c_weather", "lookup_weather"), ("c_cancel", "cancel_order")):
        assert results[call_id].startswith(f"Error: no tool named {name!r}.")
        assert "Available tools: count_me, get_order, typed, finish." in results[call_id]
    assert json.loads(results["c_order"])["id"] == 1042
    assert model.results_in_last_request() == ["c_weather", "c_cancel", "c_order"]


async def test_arguments_that_are_not_json(client: Client, task_queue: str, model: Model) -> None:
    # OpenAI sends arguments as text, so they can be cut short; Anthropic sends an input value,
    # which can be a bare string instead of an object.
    broken = Raw('{"order_id": 10') if model.provider == "openai" else "order 1042"
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(None, ("c_bad", "get_order", broken)),
            model.reply("I could not read that order."),
        ],
    )

    assert run.result is not None and run.result.steps == 2
    content = run.tool_results()["c_bad"]
    if model.provider == "openai":
        assert content.startswith("Error: the arguments for get_order are not valid JSON")
    else:
        assert content.startswith("Error: the arguments for get_order must be a JSON object")
    assert "The tool did not run" in content


async def test_arguments_that_are_json_but_not_an_object(
    client: Client, task_queue: str, model: Model
) -> None:
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(
                None,
                ("c_list", "get_order", [1042]),
                ("c_number", "get_order", 1042),
                ("c_null", "get_order", None),
            ),
            model.reply("Done."),
        ],
    )

    results = run.tool_results()
    for call_id, kind in (("c_list", "list"), ("c_number", "int"), ("c_null", "NoneType")):
        assert f"must be a JSON object, not {kind}. The tool did not run." in results[call_id]


async def arguments_of(chars: int, client: Client, task_queue: str, model: Model) -> Run:
    """A reply of two calls whose arguments hold `chars` characters each, then an answer."""
    text = "x" * chars
    return await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(
                None,
                ("c_wrong", "get_order", {"order_id": text}),
                ("c_echo", "typed", {"order_id": 7, "note": text}),
            ),
            model.reply("Done."),
        ],
    )


async def test_huge_arguments_get_a_bounded_answer(
    client: Client, task_queue: str, model: Model
) -> None:
    # A reply that large (600 KB) is cut before it leaves the model activity: each call's
    # arguments give way to a note, which the model reads, and neither tool runs.
    run = await arguments_of(300_000, client, task_queue, model)
    results = run.tool_results()
    for call_id in ("c_wrong", "c_echo"):
        assert "must be a JSON object, not str: arguments of 3" in results[call_id]
        assert "call again with smaller arguments" in results[call_id]
        assert len(results[call_id]) < 700
    assert all(len(c.arguments) <= 1000 for c in run.trace[0].tool_calls)


async def test_large_arguments_under_the_reply_bound_get_a_bounded_answer(
    client: Client, task_queue: str, model: Model
) -> None:
    run = await arguments_of(100_000, client, task_queue, model)
    results = run.tool_results()
    assert results["c_wrong"].startswith("Error: invalid arguments for get_order: order_id:")
    assert len(results["c_wrong"]) < 500 and "(100,002 characters)" in results["c_wrong"]
    # The echo is a result like any other: cut to its bound, the whole kept in the result store.
    assert len(results["c_echo"]) <= DEFAULT_MAX_RESULT_CHARS
    assert "characters omitted" in results["c_echo"]
    assert all(len(c.arguments) <= 1000 for c in run.trace[0].tool_calls)


async def test_huge_names_and_answers_get_a_bounded_answer(
    client: Client, task_queue: str, model: Model
) -> None:
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(
                None,
                ("c_name", "x" * 5_000, {}),
                ("c_answer", "finish", {"answer": ["y" * 300_000]}),
            ),
            model.reply("Done."),
        ],
    )

    assert run.result is not None and run.result.answer == "Done."
    assert run.tool_results()["c_answer"].startswith("Error: the answer does not match")


async def test_a_reply_too_large_for_the_history_is_paid_for_once(
    client: Client, task_queue: str, model: Model
) -> None:
    # Over Temporal's 2 MB payload limit: the model activity keeps the whole reply in the result
    # store and reports it cut (activities/oversized_reply.py), so the call is not retried (and
    # paid for) again. The model reads why its call did not run, and goes on.
    too_large = model.reply(None, ("c_big", "typed", {"order_id": 7, "note": "x" * 2_500_000}))
    run = await run_checked(client, task_queue, model, [too_large, model.reply("Done.")])

    assert run.result is not None and run.result.answer == "Done."
    result = run.tool_results()["c_big"]
    assert "were cut; the whole reply is kept as r-" in result
    assert "call again with smaller arguments" in result and len(result) < 400
    assert [m.role for m in run.transcript] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("depth", [300, 5_000])
async def test_deeply_nested_arguments(
    client: Client, task_queue: str, model: Model, depth: int
) -> None:
    nested = Raw('{"order_id": ' + "[" * depth + "]" * depth + "}")
    if model.provider == "anthropic" and depth > 1000:
        # Deeper than Python's parser goes: the SDK cannot read the reply at all, so the model
        # call is retried (a new reply may be readable) and the run fails, naming why.
        run = await run_checked(
            client, task_queue, model, [model.reply(None, ("c_deep", "get_order", nested))] * 3
        )
        assert run.failure.type == "AgentProviderError"
        assert "ProviderIncompleteReply" in run.failure.message
        assert "could not be read: RecursionError" in run.failure.message
        assert [m.role for m in run.transcript] == ["user"]
        return
    # The model gets an error result it can act on, and the run goes on.
    run = await run_checked(
        client,
        task_queue,
        model,
        [model.reply(None, ("c_deep", "get_order", nested)), model.reply("Done.")],
    )

    assert run.result is not None, run.error
    content = run.tool_results()["c_deep"]
    assert content.startswith("Error:") and "nested" in content


async def test_arguments_of_the_wrong_types(client: Client, task_queue: str, model: Model) -> None:
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(None, ("c_1", "typed", {"order_id": {"n": 1}, "note": 5, "rush": "x"})),
            model.reply(None, ("c_2", "typed", {"order_id": 7, "note": "fixed"})),
            model.reply("Done."),
        ],
    )

    assert run.result is not None and run.result.steps == 3
    first, second = run.tool_results()["c_1"], run.tool_results()["c_2"]
    assert first.startswith("Error: invalid arguments for typed: order_id: ")
    assert "note: Input should be a valid string (got 5)" in first
    assert "rush: Input should be a valid boolean" in first
    assert json.loads(second) == {"order_id": 7, "note": "fixed", "rush": False}


async def test_repeated_call_ids_are_made_unique(
    client: Client, task_queue: str, model: Model
) -> None:
    test_tools.executions.clear()
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(
                None, ("dup", "count_me", {"key": "r1"}), ("dup", "count_me", {"key": "r2"})
            ),
            # The same id again, a step later.
            model.reply(None, ("dup", "count_me", {"key": "r3"})),
            model.reply("Done."),
        ],
    )

    assert calls_of(run) == [
        ("dup", "count_me"),
        ("call_1_2", "count_me"),
        ("call_2_1", "count_me"),
    ]
    assert list(run.tool_results()) == ["dup", "call_1_2", "call_2_1"]
    assert [test_tools.executions[k] for k in ("r1", "r2", "r3")] == [1, 1, 1]


async def test_omitted_call_ids_are_filled_in(
    client: Client, task_queue: str, model: Model
) -> None:
    test_tools.executions.clear()
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(None, (None, "count_me", {"key": "o1"}), (None, "count_me", {"key": "o2"})),
            model.reply("Done."),
        ],
    )

    assert calls_of(run) == [("call_1_1", "count_me"), ("call_1_2", "count_me")]
    assert run.tool_results() == {
        "call_1_1": "o1 has run 1 times",
        "call_1_2": "o2 has run 1 times",
    }
    assert model.results_in_last_request() == ["call_1_1", "call_1_2"]


async def test_empty_replies_are_retried(client: Client, task_queue: str, model: Model) -> None:
    run = await run_checked(
        client, task_queue, model, [model.reply(None), model.reply("   "), model.reply("Here.")]
    )

    assert run.result is not None and run.result.answer == "Here."
    assert run.result.steps == 1 and run.trace[0].model_attempts == 3
    assert [m.role for m in run.transcript] == ["user", "assistant"]


async def test_a_reply_cut_off_in_a_tool_call_is_never_run(
    client: Client, task_queue: str, model: Model
) -> None:
    test_tools.executions.clear()
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply("Counting.", ("c_cut", "count_me", {"key": "cut"}), cut_off=True),
            model.reply("I will not count after all."),
        ],
    )

    assert run.result is not None and run.result.answer == "I will not count after all."
    assert run.trace[0].model_attempts == 2 and run.trace[0].tool_calls == []
    assert test_tools.executions["cut"] == 0
    assert [m.role for m in run.transcript] == ["user", "assistant"]


async def test_text_beside_tool_calls_is_not_the_answer(
    client: Client, task_queue: str, model: Model
) -> None:
    test_tools.executions.clear()
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            # Text that reads like an answer, with calls: the calls run and the loop goes on.
            model.reply("Order 1042 was delivered.", ("c_count", "count_me", {"key": "m1"})),
            model.reply("Counted.", ("c_finish", "finish", {"answer": "Delivered yesterday."})),
        ],
    )

    assert run.result is not None and run.result.answer == "Delivered yesterday."
    assert run.result.steps == 2
    first = run.transcript[1]
    assert isinstance(first, AssistantMessage) and first.content == "Order 1042 was delivered."
    assert test_tools.executions["m1"] == 1
    assert run.tool_results() == {"c_count": "m1 has run 1 times", "c_finish": ANSWER_RECORDED}


async def test_nothing_called_after_finish_runs(
    client: Client, task_queue: str, model: Model
) -> None:
    test_tools.executions.clear()
    run = await run_checked(
        client,
        task_queue,
        model,
        [
            model.reply(
                "Done.",
                ("c_finish", "finish", {"answer": "Delivered yesterday."}),
                ("c_late", "count_me", {"key": "late"}),
            ),
        ],
    )

    assert run.result is not None and run.result.answer == "Delivered yesterday."
    # finish's description promises it: "nothing you call after it runs".
    assert test_tools.executions["late"] == 0
    assert run.tool_results()["c_late"].startswith("Not run")


async def test_fifty_calls_in_one_reply(client: Client, task_queue: str, model: Model) -> None:
    test_tools.executions.clear()
    calls = [(f"c_{i:02d}", "count_me", {"key": f"fifty-{i}"}) for i in range(50)]
    run = await run_checked(
        client, task_queue, model, [model.reply(None, *calls), model.reply("All counted.")]
    )

    assert run.result is not None and run.result.steps == 2
    ids = [call_id for call_id, _, _ in calls]
    assert list(run.tool_results()) == ids
    assert model.results_in_last_request() == ids
    assert all(test_tools.executions[f"fifty-{i}"] == 1 for i in range(50))
    assert [c.outcome for c in run.trace[0].tool_calls] == ["ok"] * 50
