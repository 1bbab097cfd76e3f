"""Worker Deployment Versioning on the dev server: a fleet upgraded from one build to the next
(docs/deployment.md, "Upgrading a fleet").

Two workers of one deployment serve one task queue, as a rolling upgrade has them; the operator
makes the new build current with the `temporal` CLI, as docs/deployment.md says. Pinned (the
default): a run waiting for a person finishes on the build it started on, a conversation moves
to the new build between turns, and new runs start there. Auto-upgrade: a waiting run's next
task goes to the new build, which replays its history.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from temporalio.api.enums.v1 import RoutingConfigUpdateState
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from durable_agent.client.agent_client import AgentClient, AgentRun
from durable_agent.serving.dev_server import temporal_binary
from durable_agent.serving.worker import build_worker, deployment_config
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.decisions import PlanDecision
from durable_agent.workflows.errors import AgentConfigurationError
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, scripted_input, turn


def set_current_version(client: Client, deployment: str, build_id: str) -> None:
    """What the operator runs to send new runs to `build_id` (docs/deployment.md)."""
    subprocess.run(
        [
            temporal_binary(),
            "worker",
            "deployment",
            "set-current-version",
            "--address",
            client.service_client.config.target_host,
            "--deployment-name",
            deployment,
            "--build-id",
            build_id,
            "--yes",
        ],
        check=True,
        capture_output=True,
    )


async def make_current(client: Client, deployment: str, build_id: str) -> None:
    """Once the build's worker has polled (the server knows a version by its pollers)."""

    async def made() -> bool:
        try:
            await asyncio.to_thread(set_current_version, client, deployment, build_id)
        except subprocess.CalledProcessError:
            return False
        return True

    await eventually(made, timeout=30, what=f"{deployment}:{build_id} to become current")

    async def routed() -> bool:
        try:
            described = await client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(
                    namespace=client.namespace, deployment_name=deployment
                )
            )
        except RPCError as error:  # a loaded server cancels one now and then (CI did): ask again
            if error.status != RPCStatusCode.CANCELLED:
                raise
            return False
        info = described.worker_deployment_info
        return (
            info.routing_config_update_state
            == RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED
        )

    # The task queues take the new routing a moment later: `temporal worker deployment
    # describe` says when (docs/deployment.md).
    await eventually(routed, timeout=30, what=f"the task queues to route to {build_id}")


async def build_of(handle: WorkflowHandle[Any, Any]) -> str:
    """The build the run's newest workflow task ran on."""
    info = (await handle.describe()).raw_description.workflow_execution_info
    return info.versioning_info.deployment_version.build_id


@asynccontextmanager
async def fleet(
    client: Client, task_queue: str, versioning: str
) -> AsyncIterator[tuple[str, AsyncExitStack]]:
    """Build b1 serving and current; the stack starts more builds."""
    deployment = f"agent-{uuid.uuid4().hex[:8]}"
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(serve(client, task_queue, deployment, "0.1.0", versioning))
        await make_current(client, deployment, "0.1.0")
        yield deployment, stack


def serve(client: Client, task_queue: str, deployment: str, build: str, versioning: str) -> Any:
    config = deployment_config(deployment, build, versioning, environ={})
    assert isinstance(config, WorkerDeploymentConfig)
    return build_worker(client, task_queue, deployment_config=config, **TEST_WORKER_OPTIONS)


async def waits_for_a_person(run: AgentRun) -> None:
    async def waiting() -> bool:
        return (await run.status()).status == "awaiting_approval"

    await eventually(waiting, what="the run to wait for a person")


async def turn_finished(run: AgentRun, number: int) -> None:
    async def finished() -> bool:
        talk = (await run.status()).conversation
        return talk is not None and talk.turn == number and not talk.working

    await eventually(finished, what=f"turn {number} to finish")


def plan_run() -> Any:
    return scripted_input(
        [
            turn(call("get_order", order_id=1042), call("submit_plan", steps=["Refund 5"])),
            turn(call("issue_refund", order_id=1042, amount=5), expect="approved plan v1"),
            turn(text="Refunded."),
        ],
        tools=["get_order", "issue_refund"],
        plan=True,
    )


def talk() -> Any:
    return scripted_input(
        [turn(text="one"), turn(text="two", expect="second question")],
        conversation=True,
    )


async def test_pinned_runs_finish_on_their_build_and_conversations_move_between_turns(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    async with fleet(client, task_queue, "pinned") as (deployment, stack):
        planned = await agents.start(plan_run())
        moved_by_message = await agents.start(talk())
        moved_by_signal = await agents.start(talk())
        await waits_for_a_person(planned)
        await turn_finished(moved_by_message, 1)
        await turn_finished(moved_by_signal, 1)
        assert await build_of(planned.handle) == "0.1.0"

        await stack.enter_async_context(serve(client, task_queue, deployment, "0.2.0", "pinned"))
        await make_current(client, deployment, "0.2.0")
        fresh = await agents.start(scripted_input([turn(text="new")]))
        assert (await fresh.result()).answer == "new"
        assert await build_of(fresh.handle) == "0.2.0"

        # The plan waited on b1; approved now, it finishes there, as it started.
        await planned.handle.execute_update(
            AgentWorkflow.decide_plan, PlanDecision(approve=True, version=1)
        )
        assert (await planned.result()).answer == "Refunded."
        assert await build_of(planned.handle) == "0.1.0"

        # A message to a conversation on b1: it continues as new onto b2, which takes the turn.
        assert (await moved_by_message.send("second question")).answer == "two"
        assert await build_of(moved_by_message.handle) == "0.2.0"
        assert (await moved_by_message.status()).step == 2

        # `upgrade` moves a conversation that waits, without a message.
        first_run = (await moved_by_signal.handle.describe()).run_id
        await moved_by_signal.handle.signal(AgentWorkflow.upgrade)

        async def moved() -> bool:
            description = await moved_by_signal.handle.describe()
            return (
                description.run_id != first_run
                and await build_of(moved_by_signal.handle) == "0.2.0"
            )

        await eventually(moved, what="the waiting conversation to move to b2")
        assert (await moved_by_signal.send("second question")).answer == "two"


async def test_auto_upgrade_moves_a_waiting_run_to_the_new_build(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    async with fleet(client, task_queue, "auto-upgrade") as (deployment, stack):
        planned = await agents.start(plan_run())
        await waits_for_a_person(planned)

        await stack.enter_async_context(
            serve(client, task_queue, deployment, "0.2.0", "auto-upgrade")
        )
        await make_current(client, deployment, "0.2.0")
        await planned.handle.execute_update(
            AgentWorkflow.decide_plan, PlanDecision(approve=True, version=1)
        )

        assert (await planned.result()).answer == "Refunded."
        assert await build_of(planned.handle) == "0.2.0"


def test_a_deployment_is_a_name_and_a_build_id() -> None:
    assert deployment_config(None, None, environ={}) is None
    config = deployment_config(
        None, None, environ={"AGENT_DEPLOYMENT_NAME": "agent", "AGENT_BUILD_ID": "0.2.0"}
    )
    assert config is not None and config.version.build_id == "0.2.0"
    assert config.default_versioning_behavior.name == "PINNED"
    flags = deployment_config("agent", "abc123", "auto-upgrade", environ={})
    assert flags is not None and flags.default_versioning_behavior.name == "AUTO_UPGRADE"
    for name, build, versioning in (
        ("agent", None, None),
        (None, "0.1.0", None),
        ("agent", "0.1.0", "sideways"),
        ("my agent", "0.1.0", None),
        ("my.agent", "0.1.0", None),
    ):
        with pytest.raises(AgentConfigurationError):
            deployment_config(name, build, versioning, environ={})


def test_the_worker_command_refuses_half_a_deployment_in_one_line() -> None:
    worker = subprocess.run(
        [sys.executable, "-m", "durable_agent.cli.worker", "--build-id", "0.1.0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == 2
    lines = worker.stderr.strip().splitlines()
    assert len(lines) == 1 and "--deployment-name" in lines[0], worker.stderr
