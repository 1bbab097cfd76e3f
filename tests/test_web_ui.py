"""The Web UI as an operator meets it (issue 23), in a real browser: a dev server with its UI, a
worker, a plan run and a tool-approval run, each page opened in headless Chromium (Debian's
`chromium`; .ci/run installs it) and read through the DevTools protocol once the UI has rendered
it. The run's page must show the summary, the current details with the plan's steps, and the
waiting call's arguments with their quotes straight.

Marked `browser`. Where there is no Chromium it skips and says what to install (the summary of
`pytest` lists it); under AGENT_TESTS_STRICT=1, which .ci/run sets, it fails instead."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_agent.activities.pricing import DEMO_PRICE
from durable_agent.client.agent_client import AgentClient, AgentRun
from durable_agent.demo.script import DEMO_MODEL, DEMO_PLAN, SUPPORT_DEMO_SYSTEM, demo_plan_script
from durable_agent.serving.dev_server import embedded_dev_server, free_port
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings
from tests.browser import Browser
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, turn

pytestmark = pytest.mark.browser

ARGUMENTS = '{"order_id": 1042, "reason": "arrived damaged"}'
"""The waiting call's arguments as a person is shown them: the parsed arguments, field by field
(workflows/shown_arguments.py), not the model's compact text."""


@pytest.fixture(scope="module")
async def web_ui() -> AsyncIterator[tuple[WorkflowEnvironment, str]]:
    """A dev server of its own, with the Web UI (the session's has none)."""
    port = free_port()
    async with embedded_dev_server(ui_port=port) as env:
        yield env, f"http://127.0.0.1:{port}"


async def waiting(run: AgentRun) -> bool:
    return (await run.status()).status == "awaiting_approval"


async def page_of(run: AgentRun, ui: str, tab: str) -> str:
    described = await run.handle.describe()
    return f"{ui}/namespaces/default/workflows/{run.id}/{described.run_id}/{tab}"


async def test_a_waiting_runs_page_says_what_waits_and_what_to_send(
    web_ui: tuple[WorkflowEnvironment, str], browser: Browser, task_queue: str
) -> None:
    env, ui = web_ui
    agents = AgentClient(env.client, task_queue)
    async with build_worker(env.client, task_queue, **TEST_WORKER_OPTIONS):
        plan_run = await agents.start(
            AgentInput(
                prompt="Where is my latest order? My email is a@b.com.\nThanks!",
                label="order-status",
                system=SUPPORT_DEMO_SYSTEM,
                plan=True,
                model=ModelSettings(model=DEMO_MODEL, script=demo_plan_script(), price=DEMO_PRICE),
            )
        )
        call_run = await agents.start(
            AgentInput(
                prompt="Cancel order 1042, it arrived damaged.",
                label="cancel",
                tools=["cancel_order"],
                model=ModelSettings(
                    script=[
                        turn(call("cancel_order", order_id=1042, reason="arrived damaged")),
                        turn(text="Order 1042 is cancelled."),
                    ],
                    price=DEMO_PRICE,
                ),
            )
        )
        for run in (plan_run, call_run):
            await eventually(lambda run=run: waiting(run), what=f"{run.id} waits for a person")

        # The plan run's page, User Metadata tab: summary, details and the current details.
        text, frames = await browser.open(
            await page_of(plan_run, ui, "user-metadata"), DEMO_PLAN[-1], "decide_plan"
        )
        assert "order-status: Where is my latest order? My email is a@b.com." in text
        assert "scripted-demo" in text and "made-up price" in text and "20 steps" in text
        assert "Waiting for a person to approve plan v1 (3 steps):" in text
        assert "cost so far: $0.00" in text
        # The steps as a numbered list (the renderer may curl a step's apostrophes: prose).
        steps = frames[frames.index("<ol>") : frames.index("</ol>")]
        assert steps.count("<li>") == len(DEMO_PLAN)
        assert "Check the customer and the tracking of the latest order." in steps
        # What to paste, with straight quotes, in code.
        assert '<code>{"approve": true, "version": 1}</code>' in frames

        # The tool-approval run's page: the arguments as the model wrote them, straight.
        text, frames = await browser.open(
            await page_of(call_run, ui, "user-metadata"), "cancel_order", "decide_tool_call"
        )
        assert "cancel: Cancel order 1042, it arrived damaged." in text
        assert f"<code>{ARGUMENTS}</code>" in frames
        assert ARGUMENTS in text and "“" not in text.split("Current Details")[-1]
        assert '<code>{"call_id": "call_1_1", "approve": true}</code>' in frames

        # The list, filtered as the docs' ready-made URL says, shows both waiting runs.
        text, _ = await browser.open(
            f"{ui}/namespaces/default/workflows?query=AgentStatus%3D%22awaiting_approval%22",
            plan_run.id,
            call_run.id,
        )

        # Decided from the update, both runs finish.
        await plan_run.approve_plan()
        await call_run.decide_tool_call("call_1_1", approve=False, reason="not today")
        await asyncio.gather(plan_run.result(), call_run.result())
