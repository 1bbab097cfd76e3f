"""The subcommands of forks: `fork` (a new run from a run's step K, followed like a run), `diff`
(where two runs diverge) and `eval` (a label's recent runs forked with another model, each
compared with its original). Reading histories and building forks is forking.py's; this module
turns command lines into calls and results into tables."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client

from ..client import forking
from ..client.agent_client import AgentClient, AgentRun, AgentRunFailed
from ..workflows.events import AgentEvent
from ..workflows.inputs import AgentResult, Limits, ModelSettings, ToolApprovalPolicy
from ..workflows.providers import CATALOGUE
from ..workflows.state import Usage
from .args import (
    Diff,
    Eval,
    Fork,
    Provider,
    load_score,
)
from .plumbing import say
from .run import Following, follow
from .tables import money, shorten

DIFF_RESULT_CHARS = 120
"""A tool result in `diff`'s lines: its start (the JSON has it whole)."""
EVAL_CONCURRENCY = 8
"""Forks an evaluation runs at once (each also reads its original's history first)."""
COMPLETED_RUNS_QUERY = "WorkflowType='AgentWorkflow' AND ExecutionStatus='Completed'"


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


async def fork(client: AgentClient, args: Fork) -> int:
    """Start the fork and follow it as `starter.py --address` follows a run."""
    try:
        recorded = await forking.read_run(client.client, args.workflow_id)
        model = _model(recorded.input.model, args.provider, args.model)
        if args.script is not None:
            base = model or ModelSettings(provider="scripted")
            script = forking.scripted_from(args.step, args.script)
            model = base.model_copy(update={"script": script})
        agent_run = await client.fork(
            args.workflow_id,
            step=args.step,
            model=model,
            system=args.system,
            limits=_limits(recorded.input.limits, args.max_steps, args.max_cost_usd),
            tool_approval=ToolApprovalPolicy(approve_all=args.approve_all, allow=list(args.allow)),
            label=args.label,
            task_queue=args.task_queue,
        )
    except forking.ForkStepOutOfRange as error:
        say(f"fork {args.workflow_id}: {error}")
        return 2
    except forking.ForkError as error:
        say(f"fork {args.workflow_id}: {error}")
        return 1
    if args.no_wait:
        print(
            json.dumps({"workflow_id": agent_run.id, "status": "running"})
            if args.json
            else agent_run.id
        )
        return 0
    if not args.json:
        say(f"workflow {agent_run.id} started: a fork of {args.workflow_id} at step {args.step}")
    following = Following(
        ask=False, json=args.json, trace=args.trace, address=args.address, namespace=args.namespace
    )
    return await follow(agent_run, following)


# --- diff ---------------------------------------------------------------------------------------


async def diff(client: AgentClient, args: Diff) -> int:
    try:
        a, b = await asyncio.gather(
            forking.read_run(client.client, args.workflow_a),
            forking.read_run(client.client, args.workflow_b),
        )
    except forking.ForkError as error:
        say(f"diff: {error}")
        return 1
    compared = forking.diff(a, b)
    if args.json:
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
    rows = [
        ("answer", _answer(a), _answer(b)),
        ("steps", _steps(a), _steps(b)),
        ("tokens", _tokens(a), _tokens(b)),
        ("cost", _cost(a), _cost(b)),
    ]
    lines += [f"{label:<7} A {left}\n{'':<7} B {right}" for label, left, right in rows]
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


async def evaluate(client: AgentClient, args: Eval) -> int:
    score: Callable[[AgentResult, AgentResult], float] | None = (
        load_score(args.score) if args.score is not None else None
    )
    originals = await recent_completed(client.client, args.label, args.limit)
    if not originals:
        say(f"no completed run with label {args.label!r} to fork")
        if args.json:
            print(
                json.dumps(
                    {"label": args.label, "runs": [], "totals": _totals([], score is not None)}
                )
            )
        return 1
    if not args.json:
        say(
            f"forking {len(originals)} runs of {args.label!r} at step {args.fork_step} with "
            f"{args.provider} {args.model}"
        )
    slots = asyncio.Semaphore(EVAL_CONCURRENCY)

    async def fork_one(original: str) -> EvalRow:
        async with slots:
            return await _fork_one(client, args, original, score)

    rows = await asyncio.gather(*(fork_one(original) for original in originals))
    if args.json:
        print(
            json.dumps(
                {
                    "label": args.label,
                    "fork_step": args.fork_step,
                    "provider": args.provider,
                    "model": args.model,
                    "score": args.score,
                    "runs": [row.as_json() for row in rows],
                    "totals": _totals(rows, score is not None),
                }
            )
        )
    else:
        print(eval_table(rows, scored=score is not None))
    return 0 if all(row.failure is None for row in rows) else 1


async def _fork_one(
    client: AgentClient,
    args: Eval,
    original_id: str,
    score: Callable[[AgentResult, AgentResult], float] | None,
) -> EvalRow:
    recorded = await forking.read_run(client.client, original_id)
    assert recorded.result is not None  # listed as completed
    row = EvalRow(original_id, None, recorded.result)
    try:
        agent_run = await client.fork(
            original_id,
            step=args.fork_step,
            model=_model(recorded.input.model, args.provider, args.model),
            limits=_limits(recorded.input.limits, args.max_steps, None),
            tool_approval=ToolApprovalPolicy(approve_all=args.approve_all, allow=list(args.allow)),
            task_queue=args.task_queue,
        )
    except forking.ForkError as error:
        row.failure = str(error)
        return row
    row.fork = agent_run.id
    watcher = asyncio.create_task(_say_waiting_calls(agent_run, args))
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


async def _say_waiting_calls(agent_run: AgentRun, args: Eval) -> None:
    """A fork's call that waits for a person blocks its row: say how to decide it."""
    async for item in agent_run.events():
        event: AgentEvent = item.data
        if event.kind == "approval_requested":
            say(
                f"{agent_run.id} waits for a decision on {event.call_id} ({event.tool} "
                f"{event.arguments}): starter.py approve-call {agent_run.id} {event.call_id} "
                f"--address {args.address} (or deny-call ... --reason TEXT)"
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
    header = [
        "original",
        "fork",
        "score" if scored else "answer",
        "steps",
        "tokens",
        "cost",
        "failure",
    ]
    table = [header]
    for row in rows:
        fork = row.fork_result
        if row.score is None:
            verdict = "-"
        elif scored:
            verdict = f"{row.score:g}"
        else:
            verdict = "equal" if row.score == 1.0 else "differs"
        table.append(
            [
                row.original,
                row.fork or "-",
                verdict,
                f"{row.original_result.steps} -> {fork.steps if fork else '-'}",
                f"{row.original_result.usage.total_tokens} -> "
                + (str(row.fork_usage.total_tokens) if fork else "-"),
                f"{money(row.original_result.usage.cost_usd)} -> "
                + (money(row.fork_usage.cost_usd) if fork else "-"),
                shorten(row.failure or "", 60),
            ]
        )
    totals = _totals(rows, scored)
    if not scored:
        verdict = f"{totals['equal']} equal"
    elif totals["mean_score"] is None:
        verdict = "-"
    else:
        verdict = f"mean {totals['mean_score']:.3g}"
    table.append(
        [
            "total",
            f"{totals['completed']} of {totals['runs']}",
            verdict,
            f"{totals['original_steps']} -> {totals['fork_steps']}",
            f"{totals['original_tokens']} -> {totals['fork_tokens']}",
            f"{money(totals['original_cost_usd'])} -> {money(totals['fork_cost_usd'])}",
            f"{totals['failures']} failed" if totals["failures"] else "",
        ]
    )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines.insert(len(lines) - 1, "-" * max(len(line) for line in lines))
    lines.append(f"the forks spent {money(totals['spent_usd'])} on their own steps")
    return "\n".join(lines)
