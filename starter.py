"""Start an agent run and print its answer.

    python starter.py "PROMPT" [--provider scripted|openai] [--model M] [--max-steps N]
                      [--address HOST:PORT] [--no-wait] [--json]

Without --address (and without $TEMPORAL_ADDRESS) it is self-contained: it starts an embedded
Temporal dev server with the Web UI and an in-process worker, runs the agent, and stops both.
With an address it only starts the run; a `worker.py` must serve it.

Exit status: 0 completed (or started, with --no-wait); 1 the run failed; 2 bad command line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.demo_script import SUPPORT_DEMO_SYSTEM, support_demo_script
from worker import (
    CommandLineError,
    OneLineArgumentParser,
    build_worker,
    connect,
    embedded_dev_server,
    free_port,
    temporal_address,
)
from workflows.agent import AgentWorkflow
from workflows.models import (
    DEFAULT_TASK_QUEUE,
    AgentInput,
    AgentResult,
    CompensationRecord,
    FailureDetails,
    Limits,
    ModelSettings,
    ScriptedTurn,
    StepRecord,
    Usage,
)

SCRIPT_ADAPTER = TypeAdapter(list[ScriptedTurn])
DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-6"}
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
PROGRESS_POLL_SECONDS = 0.25


def parse_args(argv: list[str] | None) -> Any:
    parser = OneLineArgumentParser(prog="starter.py", description="Start an agent run.")
    parser.add_argument("prompt", help="what the agent should do")
    parser.add_argument(
        "--provider",
        choices=["scripted", "openai", "anthropic"],
        help="default: the provider whose key is set (OPENAI_API_KEY first, then "
        "ANTHROPIC_API_KEY), else the scripted offline demo",
    )
    parser.add_argument(
        "--model",
        help="model name (defaults: "
        + ", ".join(f"{p} {m}" for p, m in DEFAULT_MODELS.items())
        + ")",
    )
    parser.add_argument(
        "--script",
        type=Path,
        help="scripted provider: play this conversation (a JSON list of ScriptedTurn objects) "
        "instead of the built-in support demo",
    )
    parser.add_argument("--max-steps", type=_positive_int, default=Limits().max_steps)
    parser.add_argument(
        "--max-cost-usd", type=_positive_float, help="fail the run once it has cost more"
    )
    parser.add_argument("--address", help="Temporal frontend; without it the run is self-contained")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    parser.add_argument("--no-wait", action="store_true", help="print the workflow id and return")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--linger",
        action="store_true",
        help="self-contained only: keep the dev server and its Web UI up after the run, "
        "until Ctrl-C, to inspect the run's history",
    )
    args = parser.parse_args(argv)
    if not args.prompt.strip():
        parser.error("the prompt is empty")
    args.address = temporal_address(args.address)
    if args.linger and args.address is not None:
        parser.error("--linger is for self-contained runs; with --address the server is yours")
    if args.no_wait and args.address is None:
        parser.error(
            "--no-wait needs --address (or TEMPORAL_ADDRESS): a self-contained run "
            "stops its server when it returns"
        )
    args.provider = args.provider or next(
        (p for p, variable in KEY_VARIABLES.items() if os.environ.get(variable)), "scripted"
    )
    if args.script is not None:
        if args.provider != "scripted":
            parser.error("--script is for the scripted provider")
        try:
            args.script = SCRIPT_ADAPTER.validate_json(args.script.read_bytes())
        except (OSError, ValueError) as error:
            parser.error(f"--script {args.script}: {str(error).splitlines()[0]}")
    return args


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"not a positive integer: {text!r}")
    return value


_positive_int.__name__ = "positive integer"


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"not a positive number: {text!r}")
    return value


_positive_float.__name__ = "positive number"


def build_input(args: Any) -> AgentInput:
    if args.provider == "scripted":
        model = ModelSettings(
            provider="scripted",
            model=args.model or "scripted-demo",
            script=args.script if args.script is not None else support_demo_script(),
        )
    else:
        model = ModelSettings(
            provider=args.provider, model=args.model or DEFAULT_MODELS[args.provider]
        )
    return AgentInput(
        prompt=args.prompt,
        system=SUPPORT_DEMO_SYSTEM,
        model=model,
        limits=Limits(max_steps=args.max_steps, max_cost_usd=args.max_cost_usd),
    )


async def run(args: Any) -> int:
    agent_input = build_input(args)
    if args.provider == "scripted" and args.script is None and not args.json:
        _say(
            "scripted model: it replays the seeds' support conversation whatever the prompt; "
            "set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real model"
        )
    if args.address is not None:
        try:
            client = await connect(args.address, args.namespace)
        except RuntimeError as error:
            message = f"cannot connect to Temporal at {args.address}: {error}"
            _say(message)
            if args.json:
                _print_json(None, "failed", error={"type": "ConnectionError", "message": message})
            return 1
        return await _start_and_report(client, agent_input, args)

    ui_port = free_port()
    async with embedded_dev_server(ui_port=ui_port) as env:
        _say(f"embedded Temporal dev server; Web UI: http://127.0.0.1:{ui_port}")
        async with build_worker(env.client, args.task_queue):
            status = await _start_and_report(env.client, agent_input, args)
            if args.linger:
                _say(f"the run is in the Web UI at http://127.0.0.1:{ui_port}; Ctrl-C to stop")
                await _wait_for_interrupt()
            return status


async def _wait_for_interrupt() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


async def _start_and_report(client: Client, agent_input: AgentInput, args: Any) -> int:
    workflow_id = f"agent-{uuid.uuid4().hex[:12]}"
    try:
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=workflow_id, task_queue=args.task_queue
        )
    except RPCError as error:
        message = f"could not start the run: {error}"
        _say(message)
        if args.json:
            _print_json(workflow_id, "failed", error={"type": "StartError", "message": message})
        return 1
    if args.no_wait:
        if args.json:
            _print_json(workflow_id, "running")
        else:
            print(workflow_id)
        return 0
    if not args.json:
        _say(f"workflow {workflow_id} started")
    progress = asyncio.create_task(_print_progress(handle))
    try:
        result = await handle.result()
    except WorkflowFailureError as failure:
        progress.cancel()
        return _report_failure(workflow_id, failure, args)
    finally:
        progress.cancel()
    _print_steps(result.step_records, since=_printed_steps.get(workflow_id, 0))
    if args.json:
        _print_json(workflow_id, "completed", result=result)
    else:
        print(result.answer)
        _say(f"{result.steps} steps, {_usage_text(result.usage)}")
    return 0


_printed_steps: dict[str, int] = {}


async def _print_progress(handle: WorkflowHandle[Any, AgentResult]) -> None:
    """One line per finished step on stderr, read from the run's `status` query."""
    while True:
        try:
            status = await handle.query(AgentWorkflow.status)
        except Exception:
            status = None
        if status is not None:
            # A step is printed once its tools have results: the next step has begun or ended.
            finished = status.step_records[: status.step - (1 if status.pending_tool_calls else 0)]
            _print_steps(finished, since=_printed_steps.get(handle.id, 0))
            _printed_steps[handle.id] = max(_printed_steps.get(handle.id, 0), len(finished))
        await asyncio.sleep(PROGRESS_POLL_SECONDS)


def _print_steps(records: list[StepRecord], since: int) -> None:
    for record in records[since:]:
        tools = ", ".join(f"{c.name} {c.latency_ms} ms ({c.outcome})" for c in record.tool_calls)
        _say(
            f"step {record.step}: model {record.model_latency_ms} ms, {_usage_text(record.usage)}"
            + (f"; tools: {tools}" if tools else "; answered")
        )


def _usage_text(usage: Usage) -> str:
    cached = f" ({usage.cached_input_tokens} cached)" if usage.cached_input_tokens else ""
    cost = "" if usage.cost_usd is None else f", ${usage.cost_usd:.4f}"
    return f"{usage.input_tokens} in{cached} / {usage.output_tokens} out{cost}"


def _report_failure(workflow_id: str, failure: WorkflowFailureError, args: Any) -> int:
    cause = failure.cause
    error_type = getattr(cause, "type", None) or type(cause).__name__
    message = getattr(cause, "message", None) or str(cause)
    details = _failure_details(cause)
    _print_steps(details.step_records, since=_printed_steps.get(workflow_id, 0))
    _say(f"run {workflow_id} failed: {error_type}: {message}")
    if args.json:
        _print_json(
            workflow_id,
            "failed",
            steps=details.steps,
            usage=details.usage,
            error={"type": error_type, "message": message},
            compensations=details.compensations,
        )
    return 1


def _failure_details(cause: BaseException | None) -> FailureDetails:
    if isinstance(cause, ApplicationError) and cause.details:
        first = cause.details[0]
        if isinstance(first, dict):
            return FailureDetails.model_validate(first)
    return FailureDetails(steps=0, usage=Usage())


def _print_json(
    workflow_id: str | None,
    status: str,
    *,
    result: AgentResult | None = None,
    steps: int = 0,
    usage: Usage | None = None,
    error: dict[str, str] | None = None,
    compensations: Sequence[CompensationRecord] = (),
) -> None:
    """One JSON object on stdout. `compensations` lists the undos that ran, in their order;
    `not_undone` the side effects that have no compensation."""
    usage = result.usage if result is not None else usage or Usage()
    print(
        json.dumps(
            {
                "workflow_id": workflow_id,
                "status": status,
                "answer": result.answer if result is not None else None,
                "steps": result.steps if result is not None else steps,
                "usage": usage.model_dump(),
                "error": error,
                "compensations": [
                    {"tool": c.tool, "tool_call_id": c.tool_call_id, "status": c.status}
                    for c in compensations
                    if c.status != "not_undone"
                ],
                "not_undone": [
                    {"tool": c.tool, "tool_call_id": c.tool_call_id}
                    for c in compensations
                    if c.status == "not_undone"
                ],
            }
        )
    )


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except CommandLineError as stop:
        return int(stop.code or 2)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        _say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
