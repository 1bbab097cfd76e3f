"""The AG-UI section's two complete clients (docs/agent-protocols.md#ag-ui), run as written
against `durable-agent serve --agent`: the TypeScript one type-checked against @ag-ui/client by
tsc and run on Node, the Python one run as a module of its own. Each asks, answers the client's
tool when the model calls it, and approves the call that waits for a person."""

from __future__ import annotations

import asyncio
import os
import shutil
import types
from pathlib import Path

from temporalio.client import Client

from tests.doc_examples import DOCS
from tests.helpers import call, tsc_compiled, turn
from tests.serve_process import TOKEN
from tests.test_ag_ui import ag_ui_client, agent_file, served  # noqa: F401 (a fixture)

PAGE = DOCS / "agent-protocols.md"
ANSWER = "You are in Paris, and order 1042 is cancelled."
SCRIPT = [
    turn(call("get_location", id="call_location")),
    turn(call("cancel_order", id="call_cancel", order_id=1042, reason="asked")),
    turn(text=ANSWER),
]


def block(language: str) -> str:
    """The AG-UI section's first block in `language`."""
    text = PAGE.read_text().split("\n## AG-UI\n", 1)[1].split("\n## ", 1)[0]
    return text.split(f"```{language}\n", 1)[1].split("```", 1)[0]


async def test_the_typescript_client_type_checks_and_runs_to_the_answer(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    ag_ui_client: Path,  # noqa: F811
) -> None:
    (ag_ui_client / "example.ts").write_text(block("ts"))
    tsc_compiled(ag_ui_client)
    path = agent_file(tmp_path, SCRIPT, tools=["cancel_order"])
    async with served(client, task_queue, path) as http:
        environment = {**os.environ, "AGENT_URL": str(http.base_url), "AGENT_API_TOKEN": TOKEN}
        node = await asyncio.create_subprocess_exec(
            shutil.which("node") or "node",
            "example.js",
            cwd=ag_ui_client,
            env=environment,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(node.communicate(), 90)
        assert node.returncode == 0, err.decode()
        assert out.decode().splitlines()[-1] == f"answer: {ANSWER}"


async def test_the_python_client_runs_to_the_answer(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    module = types.ModuleType("ag_ui_example")
    exec(compile(block("python"), str(PAGE), "exec"), module.__dict__)
    path = agent_file(tmp_path, SCRIPT, tools=["cancel_order"])
    async with served(client, task_queue, path) as http:
        assert await module.ask(str(http.base_url), TOKEN, "Where am I?") == ANSWER
