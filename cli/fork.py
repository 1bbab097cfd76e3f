"""The subcommands of forks: `fork` (a new run from a run's step K, followed like a run), `diff`
(where two runs diverge) and `eval` (a label's recent runs forked with another model, each
compared with its original). Reading histories and building forks is forking.py's; this module
turns command lines into calls and results into tables."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
from temporalio.client import Client

from ..client import forking
from ..client.agent_client import AgentClient, AgentRun, AgentRunFailed
from ..workflows.events import AgentEvent
from ..workflows.inputs import (
    AgentResult,
    Limits,
    ModelSettings,
    ScriptedTurn,
    ToolApprovalPolicy,
)
from ..workflows.providers import CATALOGUE, Provider
from ..workflows.state import Usage
from .args import (
    COST,
    COUNT,
    FILE,
    POSITIVE,
    PROVIDER,
    Following,
    Text,
    argument,
    read_script,
    refuse,
    subcommand,
)
from .plumbing import say
from .run import follow
from .tables import money, shorten, table

DIFF_RESULT_CHARS = 120
"""A tool result in `diff`'s lines: its start (the JSON has it whole)."""
EVAL_CONCURRENCY = 8
"""Forks an evaluation runs at once (each also reads its original's history first)."""
COMPLETED_RUNS_QUERY = "WorkflowType='AgentWorkflow' AND ExecutionStatus='Completed'"
DEFAULT_EVAL_LIMIT = 10


def forked_run_options(function: Any) -> Any:
    """The options of the runs a fork and an evaluation start; without them, the original's."""
    for declare in reversed(
        [
            click.option("--max-steps", type=POSITIVE, help="the fork's own steps, from step K"),
            click.option("--approve-all", is_flag=True, help="no call waits for a person"),
            click.option("--allow", multiple=True, help="this tool's calls run without asking"),
            click.option("--task-queue", help="the queue the fork runs on"),
        ]
    ):
        function = declare(function)
    return function


def _model(
    original: ModelSettings, provider: Provider | None, model: str | None
) -> ModelSettings | None:
    """The fork's model settings from --provider and --model; None keeps the original's."""
    if provider is None and model is None:
        return None
    if provider is None or provider == original.provider:
        # The original's settings (its timeout, retries, script) with another model name.
        return original.model_copy(update={"model": model or original.model})
    return ModelSettings(provider=provider, model=model or CATALOGUE[provider].default_model)


def _limits(original: Limits, max_steps: int | None, max_cost_usd: float | None) -> Limits:
    update: dict[str, Any] = {}
    if max_steps is not None:
        update["max_steps"] = max_steps
    if max_cost_usd is not None:
        update["max_cost_usd"] = max_cost_usd
    return original.model_copy(update=update)


def _fork_rules(options: dict[str, Any]) -> None:
    if options["no_wait"] and options["trace"]:
        refuse("--trace prints the steps once the fork has ended; not with --no-wait")
    if options["script"] is not None:
        if options["provider"] != "scripted":
            refuse("--script is for the scripted provider (give --provider scripted)")
        options["script"] = read_script(options["script"])


@subcommand(
    "Start a new run from the run's step K: its transcript through step K's tool results, none "
    "of those tools run again, another model, prompt or limits; followed like a run. Each "
    "option left out keeps the original's.",
    of_run=False,
    rules=_fork_rules,
)
@argument("workflow_id", "the workflow id", type=Text())
@click.option("--step", type=COUNT, required=True, help="fork after this step (0: the prompt)")
@forked_run_options
@click.option("--model", help="the fork's model (with --provider only: its default)")
@click.option("--provider", type=PROVIDER, help="the fork's provider")
@click.option("--script", type=FILE, help="scripted provider: its replies from step K + 1")
@click.option("--system", type=Text(), help="the fork's system prompt")
@click.option("--max-cost-usd", type=COST, help="fail the fork once it has cost more")
@click.option("--label", type=Text(), help="the fork's label")
@click.option("--no-wait", is_flag=True, help="print the fork's id and return")
@click.option("--trace", is_flag=True, help="once the fork has ended, print its steps")
async def fork(
    client: AgentClient,
    following: Following,
    workflow_id: str,
    step: int,
    max_steps: int | None,
    approve_all: bool,
    allow: tuple[str, ...],
    task_queue: str | None,
    model: str | None,
    provider: Provider | None,
    script: tuple[ScriptedTurn, ...] | None,
    system: str | None,
    max_cost_usd: float | None,
    label: str | None,
    no_wait: bool,
    trace: bool,
) -> int:
    """Start the fork and follow it as `starter.py --address` follows a run."""
    try:
        recorded = await forking.read_run(client.client, workflow_id)
        settings = _model(recorded.input.model, provider, model)
        if script is not None:
            base = settings or ModelSettings(provider="scripted")
            settings = base.model_copy(update={"script": forking.scripted_from(step, script)})
        agent_run = await client.fork(
            workflow_id,
            step=step,
            model=settings,
            system=system,
            limits=_limits(recorded.input.limits, max_steps, max_cost_usd),
            tool_approval=ToolApprovalPolicy(approve_all=approve_all, allow=list(allow)),
            label=label,
            task_queue=task_queue,
        )
    except forking.ForkError as error:
        say(f"fork {workflow_id}: {error}")
        return 2 if isinstance(error, forking.ForkStepOutOfRange) else 1
    if no_wait:
        running = {"workflow_id": agent_run.id, "status": "running"}
        print(json.dumps(running) if following.json else agent_run.id)
        return 0
    if not following.json:
        say(f"workflow {agent_run.id} started: a fork of {workflow_id} at step {step}")
    return await follow(agent_run, dataclasses.replace(following, trace=trace))


# --- diff ---------------------------------------------------------------------------------------


@subcommand(
    "Where two runs' transcripts diverge, step by step: each side's calls, arguments and "
    "results, then the answers, steps, tokens and cost: a run (the original, say) and another "
    "(a fork, say).",
    of_run=False,
)
@argument("workflow_a", "the first workflow id", type=Text())
@argument("workflow_b", "the second workflow id", type=Text())
async def diff(client: AgentClient, following: Following, workflow_a: str, workflow_b: str) -> int:
    try:
        a, b = await asyncio.gather(
            forking.read_run(client.client, workflow_a),
            forking.read_run(client.client, workflow_b),
        )
    except forking.ForkError as error:
        say(f"diff: {error}")
        return 1
    compared = forking.diff(a, b)
    if following.json:
        print(json.dumps(compared.as_json()))
    else:
        print(diff_text(compared))
    return 0


def _call_line(call: forking.CallView) -> str:
    if call.result is None:
        result = "(no result in the history)"
    else:
        result = ("error: " if call.is_error else "") + shorten(
            " ".join(call.result.split()), DIFF_RESULT_CHARS
        )
    return f"{call.name} {forking.arguments_text(call.arguments)} -> {result}"


def _step_lines(view: forking.StepView, indent: str) -> list[str]:
    lines = []
    if view.text:
        lines.append(f"{indent}says: {shorten(' '.join(view.text.split()), DIFF_RESULT_CHARS)}")
    lines += [f"{indent}{_call_line(call)}" for call in view.calls]
    return lines or [f"{indent}(an empty reply)"]


def diff_text(compared: forking.RunDiff) -> str:
    """Each step: the same on both sides once, or each side's calls; then how each run ended."""
    a, b = compared.a, compared.b
    lines = [f"A {_describe(a)}", f"B {_describe(b)}"]
    for step in compared.steps:
        if step.same:
            assert step.a is not None
            lines.append(f"step {step.step}: same")
            lines += _step_lines(step.a, "      ")
            continue
        lines.append(f"step {step.step}: differs")
        for name, view in (("A", step.a), ("B", step.b)):
            if view is None:
                lines.append(f"   {name}  (no such step)")
            else:
                first, *rest = _step_lines(view, "      ")
                lines += [f"   {name}  {first.lstrip()}", *rest]
    at = compared.diverged_at
    lines.append("the transcripts are the same" if at is None else f"they diverge at step {at}")
    shown = {"answer": _answer, "steps": _steps, "tokens": _tokens, "cost": _cost}
    rows = [[[label, f"A {show(a)}"], ["", f"B {show(b)}"]] for label, show in shown.items()]
    lines += table([row for pair in rows for row in pair])
    return "\n".join(lines)


def _describe(o: forking.Outcome) -> str:
    fork = f", a fork of {o.forked_from}" if o.forked_from else ""
    return f"{o.workflow_id} ({o.status}{fork})"


def _answer(o: forking.Outcome) -> str:
    if o.answer is not None:
        return " ".join(o.answer.split())
    return o.error or f"(none: {o.status})"


def _steps(o: forking.Outcome) -> str:
    return f"{o.steps}" + (f" ({o.inherited_steps} inherited)" if o.inherited_steps else "")


def _tokens(o: forking.Outcome) -> str:
    whole = o.whole_usage.total_tokens
    if not o.inherited_steps:
        return f"{whole:,}"
    own, inherited = o.usage.total_tokens, o.inherited_usage.total_tokens
    return f"{whole:,} ({own:,} its own, {inherited:,} inherited)"


def _cost(o: forking.Outcome) -> str:
    if not o.inherited_steps:
        return money(o.usage.cost_usd)
    return f"{money(o.whole_usage.cost_usd)} ({money(o.usage.cost_usd)} its own)"


# --- eval ---------------------------------------------------------------------------------------


@dataclass
class EvalRow:
    original: str
    fork: str | None
    original_result: AgentResult
    fork_result: AgentResult | None = None
    failure: str | None = None
    score: float | None = None
    """The scoring function's number; without one, 1.0 when the answers are equal, else 0.0."""

    @property
    def fork_usage(self) -> Usage:
        """The fork's whole usage, its inherited steps' included: comparable with the original."""
        result = self.fork_result
        if result is None:
            return Usage()
        inherited = result.forked_from.usage if result.forked_from else Usage()
        return inherited + result.usage

    def as_json(self) -> dict[str, Any]:
        fork = self.fork_result
        return {
            "original": self.original,
            "fork": self.fork,
            "score": self.score,
            "failure": self.failure,
            "original_answer": self.original_result.answer,
            "fork_answer": None if fork is None else fork.answer,
            "original_steps": self.original_result.steps,
            "fork_steps": None if fork is None else fork.steps,
            "original_usage": self.original_result.usage.model_dump(),
            "fork_usage": None if fork is None else self.fork_usage.model_dump(),
            "fork_own_usage": None if fork is None else fork.usage.model_dump(),
        }


async def recent_completed(client: Client, label: str, limit: int) -> list[str]:
    """The workflow ids of the last `limit` completed runs of `label`, forks left out."""
    ids: list[str] = []
    async for execution in client.list_workflows(COMPLETED_RUNS_QUERY):
        try:
            run_label = await execution.memo_value("label", None)
            forked = await execution.memo_value("forked_from", None)
        except (ValueError, TypeError, KeyError):
            continue
        if run_label != label or forked is not None:
            continue
        ids.append(execution.id)
        if len(ids) == limit:
            break
    return ids


def _eval_rules(options: dict[str, Any]) -> None:
    options["model"] = options["model"] or CATALOGUE[options["provider"]].default_model
    if options["score"] is not None:
        try:
            load_score(options["score"])
        except ValueError as error:
            refuse(f"--score {options['score']}: {error}")


def load_score(spec: str) -> Callable[[AgentResult, AgentResult], float]:
    """The scoring function `module:function` names; ValueError saying why it cannot be had."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError("give it as module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name}: {error}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{module_name} has no function {name}")
    return function  # type: ignore[no-any-return]


@subcommand(
    "Fork each of a label's last completed runs at step K with another model, and compare each "
    "fork with its original (tool approval on: no fork changes data unless allowed).",
    of_run=False,
    rules=_eval_rules,
)
@click.option("--label", type=Text(), required=True, help="the runs' --label")
@click.option("--fork-step", type=COUNT, required=True, help="fork after this step (K)")
@click.option("--provider", type=PROVIDER, required=True, help="the forks' provider")
@click.option("--model", help="the forks' model [default: the provider's]")
@click.option("--limit", type=POSITIVE, default=DEFAULT_EVAL_LIMIT, help="fork the last N runs")
@click.option("--score", help="MODULE:FUNCTION(original, fork) -> number [default: equal answers]")
@forked_run_options
async def eval_(
    client: AgentClient,
    following: Following,
    label: str,
    fork_step: int,
    provider: Provider,
    model: str,
    limit: int,
    score: str | None,
    max_steps: int | None,
    approve_all: bool,
    allow: tuple[str, ...],
    task_queue: str | None,
) -> int:
    scoring = load_score(score) if score is not None else None
    originals = await recent_completed(client.client, label, limit)
    if not originals:
        say(f"no completed run with label {label!r} to fork")
        if following.json:
            print(json.dumps({"label": label, "runs": [], "totals": _totals([], bool(score))}))
        return 1
    if not following.json:
        say(
            f"forking {len(originals)} runs of {label!r} at step {fork_step} with {provider} {model}"
        )
    slots = asyncio.Semaphore(EVAL_CONCURRENCY)
    policy = ToolApprovalPolicy(approve_all=approve_all, allow=list(allow))

    async def fork_one(original: str) -> EvalRow:
        async with slots:
            recorded = await forking.read_run(client.client, original)
            start = client.fork(
                original,
                step=fork_step,
                model=_model(recorded.input.model, provider, model),
                limits=_limits(recorded.input.limits, max_steps, None),
                tool_approval=policy,
                task_queue=task_queue,
            )
            assert recorded.result is not None  # listed as completed
            row = EvalRow(original, None, recorded.result)
            return await _fork_one(row, start, scoring, following)

    rows = await asyncio.gather(*(fork_one(original) for original in originals))
    if following.json:
        print(
            json.dumps(
                {
                    "label": label,
                    "fork_step": fork_step,
                    "provider": provider,
                    "model": model,
                    "score": score,
                    "runs": [row.as_json() for row in rows],
                    "totals": _totals(rows, scoring is not None),
                }
            )
        )
    else:
        print(eval_table(rows, scored=scoring is not None))
    return 0 if all(row.failure is None for row in rows) else 1


async def _fork_one(
    row: EvalRow,
    start: Awaitable[AgentRun],
    score: Callable[[AgentResult, AgentResult], float] | None,
    following: Following,
) -> EvalRow:
    try:
        agent_run = await start
    except forking.ForkError as error:
        row.failure = str(error)
        return row
    row.fork = agent_run.id
    watcher = asyncio.create_task(_say_waiting_calls(agent_run, following))
    try:
        row.fork_result = await agent_run.result()
    except AgentRunFailed as failure:
        row.failure = f"{failure.type}: {failure.message}"
        return row
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    try:
        row.score = (
            float(score(row.original_result, row.fork_result))
            if score is not None
            else float(_same(row.original_result.answer, row.fork_result.answer))
        )
    except Exception as error:  # the user's scoring function: its failure is this row's
        row.failure = f"the scoring function failed: {type(error).__name__}: {error}"
    return row


async def _say_waiting_calls(agent_run: AgentRun, following: Following) -> None:
    """A fork's call that waits for a person blocks its row: say how to decide it."""
    async for item in agent_run.events():
        event: AgentEvent = item.data
        if event.kind == "approval_requested":
            say(
                f"{agent_run.id} waits for a decision on {event.call_id} ({event.tool} "
                f"{event.arguments}): starter.py approve-call {agent_run.id} {event.call_id} "
                f"--address {following.address} (or deny-call ... --reason TEXT)"
            )


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _totals(rows: Sequence[EvalRow], scored: bool) -> dict[str, Any]:
    scores = [row.score for row in rows if row.score is not None]
    forked = [row for row in rows if row.fork_result is not None]
    original_cost = _sum_cost([row.original_result.usage for row in rows])
    return {
        "runs": len(rows),
        "completed": len(forked),
        "failures": sum(1 for row in rows if row.failure is not None),
        "equal": None if scored else sum(1 for s in scores if s == 1.0),
        "mean_score": None if not scores else sum(scores) / len(scores),
        "original_steps": sum(row.original_result.steps for row in rows),
        "fork_steps": sum(row.fork_result.steps for row in forked if row.fork_result),
        "original_tokens": sum(row.original_result.usage.total_tokens for row in rows),
        "fork_tokens": sum(row.fork_usage.total_tokens for row in forked),
        "original_cost_usd": original_cost,
        "fork_cost_usd": _sum_cost([row.fork_usage for row in forked]),
        "spent_usd": _sum_cost(
            [row.fork_result.usage for row in forked if row.fork_result is not None]
        ),
    }


def _sum_cost(usages: Sequence[Usage]) -> float | None:
    """None when a cost is unknown, or there is none to add."""
    costs = [u.cost_usd for u in usages]
    if not costs or any(c is None for c in costs):
        return None
    return round(math.fsum(c for c in costs if c is not None), 10)


def eval_table(rows: Sequence[EvalRow], *, scored: bool) -> str:
    """One row per original against its fork, then the totals. Tokens and cost of a fork are
    as if it had made every step (its inherited steps added); `spent` is what the forks cost."""
    lines = [["original", "fork", "score" if scored else "answer", "steps", "tokens", "cost"]]
    lines[0].append("failure")
    for row in rows:
        fork, usage = row.fork_result, row.original_result.usage
        verdict = "equal" if row.score == 1.0 else "differs"
        lines.append(
            [
                row.original,
                row.fork or "-",
                "-" if row.score is None else f"{row.score:g}" if scored else verdict,
                f"{row.original_result.steps} -> {fork.steps if fork else '-'}",
                f"{usage.total_tokens} -> {row.fork_usage.total_tokens if fork else '-'}",
                f"{money(usage.cost_usd)} -> {money(row.fork_usage.cost_usd) if fork else '-'}",
                shorten(row.failure or "", 60),
            ]
        )
    totals = _totals(rows, scored)
    mean = totals["mean_score"]
    verdict = "-" if scored and mean is None else f"mean {mean:.3g}" if scored else "equal"
    return "\n".join(
        table(
            lines,
            totals=[
                "total",
                f"{totals['completed']} of {totals['runs']}",
                verdict if scored else f"{totals['equal']} {verdict}",
                f"{totals['original_steps']} -> {totals['fork_steps']}",
                f"{totals['original_tokens']} -> {totals['fork_tokens']}",
                f"{money(totals['original_cost_usd'])} -> {money(totals['fork_cost_usd'])}",
                f"{totals['failures']} failed" if totals["failures"] else "",
            ],
        )
        + [f"the forks spent {money(totals['spent_usd'])} on their own steps"]
    )
