"""The console (serving/console.py, docs/console.md) as the people who decide runs meet it:
`durable-agent serve` in a subprocess, its link opened in a real headless Chromium
(tests/browser.py), the buttons pressed in the page. A person approves a waiting plan and sees
the run complete; rejects a waiting call, with a reason, field by field; follows a conversation's
answer while the model writes it and sends the next message; decides a sub-agent's calls on its
parent's page and follows the link to the sub-agent's own run. Text from the prompt, the model and
the tools (HTML, a script, Markdown) is shown as text and never runs."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx2 as httpx
import pytest
from temporalio.client import Client

import tests.guardrails_for_tests as guardrails
from durable_agent.activities.pricing import DEMO_PRICE
from durable_agent.client.agent_client import AgentClient
from durable_agent.demo import script as demo
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.decisions import ApprovalCriteria
from durable_agent.workflows.guardrail_data import GuardrailPolicy
from durable_agent.workflows.inputs import (
    AgentInput,
    AutoMode,
    CallbackTool,
    CodeMode,
    ToolApprovalPolicy,
)
from durable_agent.workflows.model_settings import ModelSettings
from tests import fake_anthropic
from tests.browser import Browser
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, call, eventually, turn
from tests.serve_process import TOKEN, serving
from tests.test_sub_agent_approvals import CANCEL, REFUND, delegating_input

pytestmark = pytest.mark.browser

INJECTED = (
    '<script>window.injected = "script"</script>'
    "<img src=x onerror=\"window.injected = 'img'\"> **bold** [link](javascript:void(0))"
)
"""What a prompt injection writes, in the prompt, in a tool's arguments and in an answer."""

NOTHING_RAN = """(() => JSON.stringify({
  injected: typeof window.injected,
  elements: document.querySelectorAll('#app script, #app img, #app a[href^="javascript"]').length,
}))()"""


async def start(api: httpx.AsyncClient, agent_input: AgentInput) -> str:
    body = agent_input.model_dump(mode="json", exclude_defaults=True)
    started = await api.post("/api/runs", json=body)
    assert started.status_code == 201, started.text
    return str(started.json()["workflow_id"])


async def click(browser: Browser, selector: str) -> None:
    found = await browser.evaluate(
        f"(() => {{ const b = document.querySelector({json.dumps(selector)});"
        " if (!b) return false; b.click(); return true; })()"
    )
    assert found, f"nothing on the page matches {selector}"


async def type_into(browser: Browser, selector: str, text: str) -> None:
    found = await browser.evaluate(
        f"(() => {{ const field = document.querySelector({json.dumps(selector)});"
        f" if (!field) return false; field.value = {json.dumps(text)}; return true; }})()"
    )
    assert found, f"nothing on the page matches {selector}"


async def nothing_ran(browser: Browser) -> None:
    ran = json.loads(await browser.evaluate(NOTHING_RAN))
    assert ran == {"injected": "undefined", "elements": 0}


async def test_a_person_approves_a_waiting_plan_on_its_page_and_sees_the_run_complete(
    api: httpx.AsyncClient, browser: Browser, client: Client, task_queue: str
) -> None:
    model = ModelSettings(provider="scripted", script=demo.demo_plan_script(), price=DEMO_PRICE)
    workflow_id = await start(
        api, AgentInput(prompt=f"Where is my order? {INJECTED}", plan=True, model=model)
    )

    # The link serve prints: the list, the run on top with why it waits.
    await browser.open(f"{api.base_url}/#token={TOKEN}", workflow_id, "plan v1 waits")
    text, _ = await browser.shows("Waiting for a person", f"{len(demo.DEMO_PLAN)} steps")
    assert text.index("Waiting for a person") < text.index(workflow_id) < text.index("Other runs")
    # The token leaves the address bar (and the history), and stays for the tab.
    assert await browser.evaluate("location.href") == f"{api.base_url}/"

    await click(browser, f'#waiting a[href="/runs/{workflow_id}"]')
    text, _ = await browser.shows("Plan v1 waits for approval", demo.DEMO_PLAN[-1], INJECTED)
    assert "awaiting_approval" in text and "step 1 of 20" in text, text
    assert await browser.evaluate("location.pathname") == f"/runs/{workflow_id}"
    await nothing_ran(browser)

    await click(browser, "#plan button.approve")
    run = AgentClient(client, task_queue).run(workflow_id)
    answer, status = (await run.result()).answer, await run.status()
    text, _ = await browser.shows("Answer", answer, "completed —", f"step {status.step} of 20")
    assert "UPS" in answer and "plan_decided approved" in text
    assert "Plan v1 waits" not in text and text.count("USER") == 1, text
    assert status.plan is not None and status.plan.status == "approved"
    await nothing_ran(browser)


async def cancel_waiting(api: httpx.AsyncClient, browser: Browser, script: list[Any]) -> str:
    """A run whose model asks to cancel order 1042 as `script` says, its page open on the
    waiting call; answers its id."""
    workflow_id = await start(
        api,
        AgentInput(
            prompt="Cancel order 1042.",
            tools=["cancel_order"],
            model=ModelSettings(provider="scripted", script=script, price=DEMO_PRICE),
        ),
    )
    await browser.open(f"{api.base_url}/runs/{workflow_id}#token={TOKEN}", "Tool call cancel_order")
    return workflow_id


async def test_a_waiting_call_is_shown_field_by_field_and_rejected_with_a_reason(
    api: httpx.AsyncClient, browser: Browser, client: Client, task_queue: str
) -> None:
    script = [
        turn(call("cancel_order", order_id=1042, reason=INJECTED)),
        turn(text=f"I could not cancel it. {INJECTED}"),
    ]
    workflow_id = await cancel_waiting(api, browser, script)
    text, _ = await browser.shows("order_id", "1042", json.dumps(INJECTED))
    await nothing_ran(browser)

    await type_into(browser, ".call input[type=text]", "not without the customer's word")
    await click(browser, ".call button.reject")
    text, _ = await browser.shows("Answer", "I could not cancel it.")
    assert text.count(INJECTED) >= 2  # the answer's, and the call's arguments in the transcript
    await nothing_ran(browser)
    # The person's reason reached the model, as the call's refusal.
    transcript = await AgentClient(client, task_queue).run(workflow_id).transcript()
    refusal = next(m for m in transcript if m.role == "tool")
    assert refusal.is_error and "not without the customer's word" in refusal.content


async def test_a_field_of_emoji_cut_for_length_says_how_long_it_was(
    api: httpx.AsyncClient, browser: Browser
) -> None:
    """The server counts a field's characters as Python does (code points); a browser's string
    length counts UTF-16 units, two for an emoji, so a field of emoji cut at 300 characters
    once seemed whole: it was shown cut, with no marker."""
    reason = "\N{GRINNING FACE}" * 400
    script = [
        turn(call("cancel_order", order_id=1042, reason=reason)),
        turn(text="Not cancelled."),
    ]
    await cancel_waiting(api, browser, script)
    # The value as JSON: its quotes and 400 emoji, 402 characters, of which 300 are shown.
    text, _ = await browser.shows("order_id", "1042", "… (402 characters in all)")
    assert reason[:299] in text and reason[:300] not in text
    await click(browser, ".call button.reject")
    await browser.shows("Answer", "Not cancelled.")


async def test_a_run_page_refused_its_stream_says_why_and_follows_once_it_may(
    client: Client, task_queue: str, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve holds a bounded number of event streams of a run (429 past it): the page says so,
    asks again, and follows the run once a place is free."""
    monkeypatch.setenv("AGENT_API_MAX_RUN_STREAMS", "1")
    address = client.service_client.config.target_host
    worker = build_worker(client, task_queue, **TEST_WORKER_OPTIONS)
    async with worker, serving("--address", address, "--task-queue", task_queue) as http:
        model = ModelSettings(provider="scripted", script=demo.demo_plan_script(), price=DEMO_PRICE)
        workflow_id = await start(
            http, AgentInput(prompt="Where is my order?", plan=True, model=model)
        )
        async with http.stream("GET", f"/api/runs/{workflow_id}/events", timeout=60) as taken:
            assert taken.status_code == 200
            await browser.open(
                f"{http.base_url}/runs/{workflow_id}#token={TOKEN}",
                "Plan v1 waits for approval",
                "not shown as they come",
                "AGENT_API_MAX_RUN_STREAMS",
            )
        # The place is free: the page follows the run, and its answer comes with the stream.
        approved = await http.post(
            f"/api/runs/{workflow_id}/decisions", json={"kind": "plan", "approve": True}
        )
        assert approved.status_code == 200, approved.text
        text, _ = await browser.shows("Answer", "plan_decided approved")
        assert "not shown as they come" not in text
        await browser.send("Page.navigate", url="about:blank")


async def test_a_conversation_streams_its_answer_as_it_is_written_and_takes_the_next_message(
    api: httpx.AsyncClient,
    browser: Browser,
    client: Client,
    task_queue: str,
    claude: fake_anthropic.FakeAnthropic,
) -> None:
    first = "Your order 1042 left the warehouse yesterday; it arrives on Friday morning."
    second = "You are welcome."
    # The first answer stops after its 4th text delta (events 0-5), until the test has seen it.
    claude.script += [
        fake_anthropic.Reply(first, pause_after=6),
        fake_anthropic.Reply(second),
    ]
    model: dict[str, Any] = {"provider": "anthropic", "model": "claude-fake-sonnet"}
    settings = ModelSettings(**model, stream=True, retry=FAST_MODEL_RETRY)
    workflow_id = await start(
        api, AgentInput(prompt="Where is order 1042?", conversation=True, model=settings)
    )
    run = AgentClient(client, task_queue).run(workflow_id)
    try:
        await browser.open(f"{api.base_url}/runs/{workflow_id}#token={TOKEN}", "Conversation")
        # The answer's first words, while the model is still writing it.
        text, _ = await browser.shows(first[:32])
        assert first not in text
        assert await browser.evaluate("document.querySelector('#writing').hidden") is False
        claude.hold.set()
        await browser.shows(first, "waiting for a message")

        await type_into(browser, "#talking textarea", "Thanks!")
        await click(browser, "#talking button")
        text, _ = await browser.shows("Thanks!", second, "turn 2")
        assert await browser.evaluate("document.querySelector('#writing').hidden") is True
    finally:
        await run.end()

    async def ended() -> bool:
        return (await run.status()).status == "completed"

    await eventually(ended, what="the conversation ended")


async def test_a_sub_agents_calls_are_decided_on_its_parents_page_and_its_run_is_a_link_away(
    api: httpx.AsyncClient, browser: Browser
) -> None:
    # The parent hands the job to a sub-agent, whose two calls wait for a person.
    workflow_id = await start(api, delegating_input())
    await browser.open(
        f"{api.base_url}/runs/{workflow_id}#token={TOKEN}",
        "Tool call cancel_order waits for approval",
        "its sub-agent's run",
    )
    await click(browser, f'.call[data-call-id="{CANCEL}"] button.approve')
    await browser.shows("Tool call issue_refund waits for approval")
    await type_into(browser, f'.call[data-call-id="{REFUND}"] input[type=text]', "no refunds today")
    await click(browser, f'.call[data-call-id="{REFUND}"] button.reject')
    await browser.shows("Answer", "The sub-agent cancelled it; no refund.")

    # The sub-agent's own page: its id holds a slash, and its steps are its own.
    child = f"{workflow_id}/call_1_1"
    await click(browser, f'#progress a[href="/runs/{quote(child, safe="")}"]')
    text, _ = await browser.shows("Cancelled 104999; the refund was refused.", "completed —")
    assert child in text and "The sub-agent cancelled it; no refund." not in text
    assert await browser.evaluate("location.pathname") == f"/runs/{quote(child, safe='')}"


async def test_a_callback_that_waits_for_its_client_is_shown_with_its_arguments(
    api: httpx.AsyncClient, browser: Browser
) -> None:
    tool = CallbackTool(
        name="read_local_file",
        description="Read a file on the user's laptop.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    )
    script = [turn(call("read_local_file", path=INJECTED)), turn(text="Read it.")]
    workflow_id = await start(
        api,
        AgentInput(
            prompt="Read my file.",
            tools=[],
            callback_tools=[tool],
            model=ModelSettings(provider="scripted", script=script, price=DEMO_PRICE),
        ),
    )
    await browser.open(
        f"{api.base_url}/runs/{workflow_id}#token={TOKEN}",
        "Tool call read_local_file waits for its client",
        json.dumps(INJECTED),
    )
    await nothing_ran(browser)
    status = (await api.get(f"/api/runs/{workflow_id}")).json()
    call_id = status["pending_callbacks"][0]["call_id"]
    answered = await api.post(
        f"/api/runs/{workflow_id}/callbacks", json={"call_id": call_id, "result": "the text"}
    )
    assert answered.status_code == 200, answered.text
    text, _ = await browser.shows("Answer", "Read it.", "completed —")
    assert "waits for its client" not in text


async def test_a_call_auto_modes_judge_reviews_then_hands_over_is_shown_with_the_verdict(
    api: httpx.AsyncClient, browser: Browser, client: Client, task_queue: str
) -> None:
    judge = turn(
        call("verdict", decision="escalate", confidence=0.9, reason=f"unsure {INJECTED}"),
        delay_seconds=4,
    )
    policy = ToolApprovalPolicy(
        auto_mode=AutoMode(
            judge=ModelSettings(provider="scripted", script=[judge]),
            criteria={"cancels": ApprovalCriteria(effect="cancels an order")},
            default="cancels",
        )
    )
    script = [turn(call("cancel_order", order_id=1042, reason="asked")), turn(text="Cancelled.")]
    workflow_id = await start(
        api,
        AgentInput(
            prompt="Cancel order 1042.",
            tools=["cancel_order"],
            model=ModelSettings(provider="scripted", script=script, price=DEMO_PRICE),
            tool_approval=policy,
        ),
    )
    await browser.open(
        f"{api.base_url}/runs/{workflow_id}#token={TOKEN}",
        "auto mode's judge is reviewing it",
        "You may decide it before the judge does",
    )
    text, _ = await browser.shows(
        "Tool call cancel_order waits for approval",
        "judge (cancels): escalate (confidence 0.90): a person decides: unsure ",
    )
    assert INJECTED in text and "is reviewing it" not in text
    await nothing_ran(browser)
    await click(browser, ".call button.approve")
    await browser.shows("Answer", "Cancelled.", "completed —")
    record = (await AgentClient(client, task_queue).run(workflow_id).result()).step_records[0]
    assert record.tool_calls[0].verdict is not None
    assert record.tool_calls[0].verdict.outcome == "escalated"


SCRIPT_WRITES = """
for label in ["first", LABEL]:
    try:
        print("wrote", await write_thing(label=label))
    except PermissionError as denied:
        print("refused:", str(denied))
"""


async def test_a_call_a_script_waits_on_is_shown_with_its_script_and_decided_on_the_page(
    api: httpx.AsyncClient, browser: Browser, client: Client, task_queue: str
) -> None:
    code = SCRIPT_WRITES.replace("LABEL", json.dumps(INJECTED))
    script = [
        turn(call("run_code", id="script_1", code=code)),
        turn(text="One written, one refused.", expect="not that one"),
    ]
    workflow_id = await start(
        api,
        AgentInput(
            prompt="Write two things.",
            tools=["write_thing"],
            code_mode=CodeMode(),
            tool_approval=ToolApprovalPolicy(),
            model=ModelSettings(provider="scripted", script=script, price=DEMO_PRICE),
        ),
    )
    # The list says which script waits on the call.
    await browser.open(
        f"{api.base_url}/#token={TOKEN}",
        workflow_id,
        "tool call write_thing (in the script of run_code call script_1) waits for approval",
    )
    await click(browser, f'#waiting a[href="/runs/{workflow_id}"]')
    await browser.shows(
        "Tool call write_thing waits for approval",
        "call script_1.1, step 1",
        "in the script of run_code call script_1, which waits for it",
        '"first"',
    )
    await click(browser, '.call[data-call-id="script_1.1"] button.approve')
    # The script goes on to its next call, which waits in turn: its progress names the script.
    text, _ = await browser.shows("call script_1.2, step 1", json.dumps(INJECTED))
    assert "tool_call_finished write_thing (script script_1, call script_1.1) ok" in text, text
    await nothing_ran(browser)
    await type_into(browser, '.call[data-call-id="script_1.2"] input[type=text]', "not that one")
    await click(browser, '.call[data-call-id="script_1.2"] button.reject')
    text, _ = await browser.shows("Answer", "One written, one refused.", "completed —")
    assert "waits for approval" not in text
    await nothing_ran(browser)
    # The person's reason reached the script, as the PermissionError it caught.
    transcript = await AgentClient(client, task_queue).run(workflow_id).transcript()
    (printed,) = [m.content for m in transcript if m.role == "tool"]
    assert printed.splitlines()[0] == "wrote done first"
    assert "refused: Error: a person denied this call to write_thing: not that one." in printed


async def test_what_the_guardrails_stopped_is_shown_on_the_runs_page(
    api: httpx.AsyncClient, browser: Browser
) -> None:
    """A result a guardrail withheld, and an answer it sent back, are said on the run's page in
    the lines the CLI's trace shows (reporting.guardrail_lines), the passes counted."""
    script = [
        turn(call("read_note", key="k1")),
        turn(text="A stupid question."),
        turn(text="The note is withheld."),
    ]
    workflow_id = await start(
        api,
        AgentInput(
            prompt="Read note k1.",
            tools=["read_note"],
            model=ModelSettings(provider="scripted", script=script, price=DEMO_PRICE),
            guardrails=GuardrailPolicy(
                input=["no_injection"], output=["polite"], tool_results=["no_secrets"]
            ),
        ),
    )
    text, _ = await browser.open(
        f"{api.base_url}/runs/{workflow_id}#token={TOKEN}",
        "completed —",
        "guardrail no_secrets tripped (tool_result, step 1, call_1_1, ",
        "guardrail polite tripped (output, step 2, ",
        "guardrails passed: no_injection (input) x1, polite (output) x1",
    )
    assert guardrails.SECRET not in text


RAW_CONTROLS = {"\n", "\r", "\x07", "\x1b", "\x9b", "\u202e"}
"""Characters a model may write that would act on the page unseen: a newline forges a line, a
bidi override reorders what a person reads (ESC, BEL and CSI are kept out as the CLI keeps
them out)."""


async def texts(browser: Browser, selector: str) -> list[str]:
    """The text of each element `selector` matches, as the page put it there."""
    every = f"document.querySelectorAll({json.dumps(selector)})"
    return list(
        json.loads(await browser.evaluate(f"JSON.stringify([...{every}].map(e => e.textContent))"))
    )


async def test_what_a_model_wrote_shows_its_controls_as_escapes_and_forges_no_step(
    api: httpx.AsyncClient, browser: Browser
) -> None:
    """A person approves what the model wrote: a plan step with a newline would read as two
    steps, and a bidi override as a refund of 10 where the step says 01. Each such character
    shows as its escape, as the CLI shows it (serving/command_line.py's `visible`), in a plan,
    a waiting call and the transcript; an answer keeps its own lines."""

    async def shown_raw() -> set[str]:
        (page,) = await texts(browser, "#app")
        return RAW_CONTROLS & set(page) - {"\n"}

    forged = "Look up order 1042\n2. Refund every order"
    reversed_ = "Refund \u202e01 on order 1042"
    script = [
        turn(call("submit_plan", steps=[forged, reversed_])),
        turn(text="Cancelled.\nNo refund.\x1b]0;owned\x07", expect="approved"),
    ]
    model = ModelSettings(provider="scripted", script=script, price=DEMO_PRICE)
    workflow_id = await start(api, AgentInput(prompt="Cancel order 1042.", plan=True, model=model))
    await browser.open(f"{api.base_url}/runs/{workflow_id}#token={TOKEN}", "Plan v1 waits")
    assert await texts(browser, "#plan li") == [
        "Look up order 1042\\n2. Refund every order",
        "Refund \\u202e01 on order 1042",
    ]
    assert await shown_raw() == set()
    await click(browser, "#plan button.approve")
    await browser.shows("Answer", "completed —")
    assert await texts(browser, "#answer .text") == ["Cancelled.\nNo refund.\\x1b]0;owned\\x07"]
    (transcript,) = await texts(browser, "#transcript")
    assert "No refund.\\x1b]0;owned\\x07" in transcript, transcript
    assert await shown_raw() == set()

    # In plan mode the plan was the question: a call waits for a person in a run of its own.
    script = [
        turn(call("cancel_order", id="call_1\x1b[8m", order_id=1042, reason="asked \u202e\x9b2J")),
        turn(text="Not cancelled."),
    ]
    workflow_id = await cancel_waiting(api, browser, script)
    await browser.shows("call call_1\\x1b[8m, step 1")
    (card,) = await texts(browser, ".call")
    assert '"asked \\u202e\\x9b2J"' in card and not RAW_CONTROLS & set(card), card
    assert await shown_raw() == set()
    await click(browser, 'a[href="/"]')
    await browser.shows("Waiting for a person", '"asked \\u202e\\x9b2J"')
    assert await shown_raw() == set()
    await click(browser, f'#waiting a[href="/runs/{workflow_id}"]')
    await browser.shows("Tool call cancel_order waits for approval")
    await click(browser, ".call button.reject")
    await browser.shows("Answer", "Not cancelled.")
    assert await shown_raw() == set()
