"""The wire contract (client/contract.py, `durable-agent contract`): it lists every handler the
workflow has, its schemas take what clients send, and clients that no one here wrote (the
`temporal` CLI, and Node's @temporalio/client from npm) run agents from it alone."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sysconfig
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_agent.client.contract import contract, example_input
from durable_agent.serving.dev_server import temporal_binary
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.decisions import PlanDecision, ToolCallDecision
from durable_agent.workflows.inputs import AgentInput, AgentResult
from tests.helpers import TEST_WORKER_OPTIONS, npm_installed

NODE_CLIENT = Path(__file__).parent / "node_client"
CLI = [str(Path(sysconfig.get_path("scripts")) / "durable-agent")]


def declared_handlers() -> dict[str, set[str]]:
    """The handlers found on the workflow class and its bases by the SDK's own markers, read
    here without the SDK's definition, which the contract is built from."""
    found: dict[str, set[str]] = {"signals": set(), "queries": set(), "updates": set()}
    markers = {
        "__temporal_signal_definition": "signals",
        "__temporal_query_definition": "queries",
        "_defn": "updates",  # what @workflow.update leaves on its function
    }
    for cls in AgentWorkflow.__mro__:
        for attribute in vars(cls).values():
            for marker, kind in markers.items():
                definition = getattr(attribute, marker, None)
                if definition is not None and definition.name:
                    found[kind].add(definition.name)
    return found


def test_the_contract_lists_every_handler_the_workflow_has_and_says_what_each_is() -> None:
    wire = contract("my-queue")
    assert {kind: set(wire[kind]) for kind in ("signals", "queries", "updates")} == (
        declared_handlers()
    )
    assert wire["workflow"]["type"] == "AgentWorkflow"
    assert wire["workflow"]["task_queue"] == "my-queue"
    for kind in ("signals", "queries", "updates"):
        for name, handler in wire[kind].items():
            assert handler["description"].strip(), (kind, name)
    # What takes an argument has an input schema; what takes none says so.
    assert wire["updates"]["send_message"]["input"] == {"type": "string"}
    assert wire["updates"]["interrupt"]["input"] is None
    assert wire["queries"]["status"]["result"]["title"] == "RunStatus"
    assert wire["updates"]["end_conversation"]["result"] == {"type": "integer"}
    assert "result" not in wire["signals"]["approve_plan"]
    json.dumps(wire)  # all of it is JSON


def test_the_schemas_take_what_clients_send_and_refuse_what_the_workflow_would() -> None:
    wire = contract()

    def valid(schema: dict[str, Any], value: Any) -> bool:
        return jsonschema.Draft202012Validator(schema).is_valid(value)

    started = wire["workflow"]["input"]
    assert valid(started, example_input())
    assert valid(started, AgentInput(prompt="hi", plan=True).model_dump(mode="json"))
    assert not valid(started, {"plan": True})  # no prompt
    assert not valid(started, {"prompt": "hi", "limits": {"max_steps": "many"}})

    plan = wire["updates"]["decide_plan"]["input"]
    assert valid(plan, PlanDecision(approve=True, version=2).model_dump(mode="json"))
    assert valid(plan, {"approve": False, "comment": "refund instead"})
    assert not valid(plan, {"version": 1})
    call = wire["updates"]["decide_tool_call"]["input"]
    assert valid(call, ToolCallDecision(call_id="call_2_1", approve=True).model_dump(mode="json"))
    assert not valid(call, {"approve": True})
    ended = wire["workflow"]["result"]
    assert "answer" in ended["properties"] and ended["title"] == "AgentResult"


def run_cli(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *words], capture_output=True, text=True, timeout=60, check=False)


def test_the_cli_prints_the_contract_the_example_and_a_runs_input_and_starts_nothing() -> None:
    printed = run_cli("contract", "--task-queue", "q1")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == json.loads(json.dumps(contract("q1")))

    example = run_cli("contract", "--example")
    assert example.returncode == 0, example.stderr
    assert json.loads(example.stdout) == example_input()
    assert AgentInput.model_validate(example_input()).model.provider == "scripted"

    # No --address, and yet no server starts: the input is printed, nothing else.
    shown = run_cli("--print-input", "--plan", "--max-steps", "7", "Cancel order 1042")
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""
    agent_input = AgentInput.model_validate_json(shown.stdout)
    assert (agent_input.prompt, agent_input.plan) == ("Cancel order 1042", True)
    assert agent_input.limits.max_steps == 7

    # Its reader gone early (`| head`), it stops without a traceback.
    piped = subprocess.run(
        f"'{CLI[0]}' contract | head -c 10", shell=True, capture_output=True, text=True, timeout=60
    )
    assert piped.stdout == '{"workflow' and piped.stderr == "", piped.stderr

    bad = run_cli("contract", "--examples")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "durable-agent contract: error: No such option '--examples'. Did you mean '--example'? "
        "(see --help)"
    ]


async def test_the_temporal_cli_runs_the_example_from_the_contract_alone(
    client: Client, temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    example = run_cli("contract", "--example")
    workflow_id = f"contract-{uuid.uuid4()}"
    address = client.service_client.config.target_host
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        executed = await asyncio.create_subprocess_exec(
            *[temporal_binary(), "workflow", "execute", "--address", address],
            *["--task-queue", task_queue, "--type", "AgentWorkflow"],
            *["--workflow-id", workflow_id, "--input", example.stdout, "-o", "json"],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(executed.communicate(), timeout=90)
    assert executed.returncode == 0, err.decode()
    # The CLI shows the result as it decoded it (an empty list as null, as Go does).
    shown = json.loads(out)["result"]
    assert "UPS" in shown["answer"] and shown["steps"] == len(shown["step_records"]) == 3
    # The same run, read back by the project's own client.
    result = await client.get_workflow_handle_for(AgentWorkflow.run, workflow_id).result()
    assert (result.answer, result.steps) == (shown["answer"], 3)


@pytest.fixture(scope="session")
def node_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/node_client with @temporalio/client installed from npm, in a directory of its
    own (the checkout gets no node_modules)."""
    where = tmp_path_factory.mktemp("node-client")
    return npm_installed(NODE_CLIENT, where, ("package.json", "plan_run.mjs"))


async def test_a_node_client_starts_a_plan_run_approves_it_by_update_and_reads_the_result(
    client: Client, task_queue: str, node_client: Path
) -> None:
    shown = run_cli("--print-input", "--plan", "Where is my latest order? I am a@b.com.")
    assert shown.returncode == 0, shown.stderr
    workflow_id = f"node-{uuid.uuid4()}"
    address = client.service_client.config.target_host
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        node = await asyncio.create_subprocess_exec(
            *[shutil.which("node") or "node", "plan_run.mjs", address, task_queue, workflow_id],
            cwd=node_client,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(node.communicate(shown.stdout.encode()), timeout=90)
    assert node.returncode == 0, err.decode()
    printed = json.loads(out)
    assert printed["waited"]["status"] == "awaiting_approval" and printed["waited"]["steps"]
    assert printed["decided"]["status"] == "approved"
    result = AgentResult.model_validate(printed["result"])  # Node's JSON, as sent: it validates
    assert result.answer.strip() and result.steps >= 2
    # The project's own client reads the same run the same way.
    handle = client.get_workflow_handle_for(AgentWorkflow.run, workflow_id)
    assert await handle.result() == result
