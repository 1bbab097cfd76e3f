"""The subcommands of forks: `fork` (a new run from a run's step K, followed like a run), `diff`
(where two runs diverge) and `eval` (a label's recent runs forked with another model, each
compared with its original). Reading histories and building forks is client/forking.py's,
evaluating client/evaluation.py's; this module turns command lines into calls and results into
lines and tables."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence
from functools import partial
from typing import Any

import click

from ..client import evaluation, forking
from ..client.agent_client import AgentClient, AgentRun
from ..client.evaluation import EvalRow
from ..serving.command_line import refuse, say
from ..workflows.inputs import ToolApprovalPolicy
from ..workflows.providers import CATALOGUE, Provider
from . import args, decide
from .args import Following
from .run import follow
from .tables import money, shorten, table

DIFF_RESULT_CHARS = 120
"""A tool result in `diff`'s lines: its start (the JSON has it whole)."""


def forked_run_options(function: Any) -> Any:
    """The options of the runs a fork and an evaluation start; without them, the original's."""
    options = [
        click.option("--task-queue", help="the queue the fork runs on"),
        click.option("--allow", multiple=True, help="this tool's calls run without asking"),
        click.option("--approve-all", is_flag=True, help="no call waits for a person"),
        click.option("--max-steps", type=args.STEPS, help="the fork's own steps, from step K"),
    ]
    for declare in options:
        function = declare(function)
    return function


def _fork_rules(options: dict[str, Any]) -> None:
    if options["no_wait"] and options["trace"]:
        refuse("--trace prints the steps once the fork has ended; not with --no-wait")
    if options["script"] is not None:
        if options["provider"] != "scripted":
            refuse("--script is for the scripted provider (give --provider scripted)")
        options["script"] = args.read_json("--script", options["script"], args.SCRIPT, turns=True)


@args.subcommand(of_run=False, rules=_fork_rules)
@args.argument("workflow_id", "the workflow id", type=args.Text())
@click.option("--step", type=args.COUNT, required=True, help="fork after this step (0: the prompt)")
@click.option("--call", type=args.Text(), help="fork at this call of step K's script: script_1.3")
@forked_run_options
@click.option("--model", help="the fork's model (with --provider only: its default)")
@click.option("--provider", type=args.PROVIDER, help="the fork's provider")
@click.option("--script", type=args.FILE, help="scripted provider: its replies from step K + 1")
@click.option("--system", type=args.Text(), help="the fork's system prompt")
@click.option("--max-cost-usd", type=args.COST, help="fail the fork once it has cost more")
@click.option("--label", type=args.Text(), help="the fork's label")
@click.option("--no-wait", is_flag=True, help="print the fork's id and return")
@click.option("--trace", is_flag=True, help="once the fork has ended, print its steps")
async def fork(client: AgentClient, following: Following, workflow_id: str, **fork: Any) -> int:
    """Start a new run from the run's step K: its transcript through step K's tool results, none of
    those tools run again, another model, prompt or limits; followed like a run. Each option left
    out keeps the original's.
    \f
    Start the fork and follow it as `starter.py --address` follows a run."""
    step, call, no_wait, trace = fork["step"], fork["call"], fork.pop("no_wait"), fork.pop("trace")
    # The other options are the fork's own arguments, by name (evaluation.fork_with).
    approval = ToolApprovalPolicy(approve_all=fork.pop("approve_all"), allow=fork.pop("allow"))
    try:
        recorded = await forking.read_run(client.client, workflow_id)
        agent_run = await evaluation.fork_with(client, recorded, tool_approval=approval, **fork)
    except forking.ForkError as error:
        say(f"fork {workflow_id}: {error}")
        return 2 if isinstance(error, forking.ForkStepOutOfRange) else 1
    if no_wait:
        following.answer({"workflow_id": agent_run.id, "status": "running"}, agent_run.id)
        return 0
    if not following.json:
        at = f"step {step}" if call is None else f"step {step}, call {call}"
        say(f"workflow {agent_run.id} started: a fork of {workflow_id} at {at}")
    return await follow(agent_run, dataclasses.replace(following, trace=trace))


# --- diff ---------------------------------------------------------------------------------------


@args.subcommand(of_run=False)
@args.argument("workflow_a", "the first workflow id", type=args.Text())
@args.argument("workflow_b", "the second workflow id", type=args.Text())
async def diff(client: AgentClient, following: Following, workflow_a: str, workflow_b: str) -> int:
    """Where two runs' transcripts diverge, step by step: each side's calls, arguments and
    results, then the answers, steps, tokens and cost: a run (the original, say) and another (a
    fork, say)."""
    try:
        a, b = await asyncio.gather(
            forking.read_run(client.client, workflow_a),
            forking.read_run(client.client, workflow_b),
        )
    except forking.ForkError as error:
        say(f"diff: {error}")
        return 1
    compared = forking.diff(a, b)
    following.answer(compared.as_json(), diff_text(compared))
    return 0


def _step_lines(view: forking.StepView, indent: str = "      ") -> list[str]:
    lines = [f"{indent}says: {_start(view.text)}"] if view.text else []
    for call in view.calls:
        result = "(no result in the history)" if call.result is None else _start(call.result)
        error = "error: " if call.is_error and call.result is not None else ""
        lines.append(
            f"{indent}{call.name} {forking.arguments_text(call.arguments)} -> {error}{result}"
        )
    return lines or [f"{indent}(an empty reply)"]


def _start(text: str) -> str:
    return shorten(" ".join(text.split()), DIFF_RESULT_CHARS)


def diff_text(compared: forking.RunDiff) -> str:
    """Each step: the same on both sides once, or each side's calls; then how each run ended."""
    a, b = compared.a, compared.b
    lines = [
        f"{name} {o.workflow_id} ({o.status}{_fork_of(o)})" for name, o in (("A", a), ("B", b))
    ]
    for step in compared.steps:
        lines.append(f"step {step.step}: {'same' if step.same else 'differs'}")
        if step.same and step.a is not None:
            lines += _step_lines(step.a)
            continue
        for name, view in (("A", step.a), ("B", step.b)):
            first, *rest = _step_lines(view) if view is not None else ["(no such step)"]
            lines += [f"   {name}  {first.lstrip()}", *rest]
    at = compared.diverged_at
    lines.append("the transcripts are the same" if at is None else f"they diverge at step {at}")
    ended = zip(("answer", "steps", "tokens", "cost"), _ended(a), _ended(b), strict=True)
    lines += table([row for label, x, y in ended for row in ([label, f"A {x}"], ["", f"B {y}"])])
    return "\n".join(lines)


def _fork_of(o: forking.Outcome) -> str:
    return f", a fork of {o.forked_from}" if o.forked_from else ""


def _ended(o: forking.Outcome) -> list[str]:
    """How a run ended: its answer, steps, tokens and cost (a fork's whole, then its own)."""
    answer = " ".join(o.answer.split()) if o.answer is not None else None
    answer = answer if answer is not None else o.error or f"(none: {o.status})"
    tokens, own_cost = f"{o.whole_usage.total_tokens:,}", money(o.usage.cost_usd)
    if not o.inherited_steps:
        return [answer, f"{o.steps}", tokens, own_cost]
    own, inherited = o.usage.total_tokens, o.inherited_usage.total_tokens
    steps = f"{o.steps} ({o.inherited_steps} inherited)"
    tokens += f" ({own:,} its own, {inherited:,} inherited)"
    return [answer, steps, tokens, f"{money(o.whole_usage.cost_usd)} ({own_cost} its own)"]


# --- eval ---------------------------------------------------------------------------------------


def _eval_rules(options: dict[str, Any]) -> None:
    options["model"] = options["model"] or CATALOGUE[options["provider"]].default_model
    if options["score"] is not None:
        try:
            evaluation.load_score(options["score"])
        except ValueError as error:
            refuse(f"--score {options['score']}: {error}")


@args.subcommand(of_run=False, rules=_eval_rules)
@click.option("--label", type=args.Text(), required=True, help="the runs' --label")
@click.option("--fork-step", type=args.COUNT, required=True, help="fork after this step (K)")
@click.option("--provider", type=args.PROVIDER, required=True, help="the forks' provider")
@click.option("--model", help="the forks' model", show_default="the provider's")
@click.option("--limit", type=args.POSITIVE, default=10, help="fork the last N completed runs")
@click.option(
    "--score", help="MODULE:FUNCTION(original, fork) -> a number", show_default="1 if equal"
)
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
    **forked: Any,
) -> int:
    """Fork each of a label's last completed runs at step K with another model, and compare each
    fork with its original (tool approval on: no fork changes data unless allowed)."""
    scoring = evaluation.load_score(score) if score is not None else None
    originals = await evaluation.recent_completed(client.client, label, limit)
    if not originals:
        say(f"no completed run with label {label!r} to fork")
        if following.json:
            nothing = evaluation.eval_totals([], bool(score))
            print(json.dumps({"label": label, "runs": [], "totals": nothing}))
        return 1
    if not following.json:
        with_model = f"at step {fork_step} with {provider} {model}"
        say(f"forking {len(originals)} runs of {label!r} {with_model}")
    rows = await evaluation.evaluate(
        client,
        originals,
        step=fork_step,
        provider=provider,
        model=model,
        max_steps=forked["max_steps"],
        tool_approval=ToolApprovalPolicy(approve_all=forked["approve_all"], allow=forked["allow"]),
        task_queue=forked["task_queue"],
        score=scoring,
        beside=partial(_say_waiting_calls, following),
    )
    totals = evaluation.eval_totals(rows, scoring is not None)
    plan = {"label": label, "fork_step": fork_step, "provider": provider, "model": model}
    runs = {"score": score, "runs": [row.as_json() for row in rows], "totals": totals}
    following.answer({**plan, **runs}, eval_table(rows, totals, scored=scoring is not None))
    return 0 if all(row.failure is None for row in rows) else 1


async def _say_waiting_calls(following: Following, agent_run: AgentRun) -> None:
    """A fork's plan or call that waits for a person blocks its row: say how to decide it, as
    a run's is said."""
    async for item in agent_run.events():
        await decide.shown(agent_run, item.data, following, ask=False)


def eval_table(rows: Sequence[EvalRow], totals: dict[str, Any], *, scored: bool) -> str:
    """One row per original against its fork, then `totals`, eval_totals's (evaluation.py says
    what each is)."""
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
    mean = totals["mean_score"]
    verdict = (
        f"{totals['equal']} equal" if not scored else "-" if mean is None else f"mean {mean:.3g}"
    )
    cost = f"{money(totals['original_cost_usd'])} -> {money(totals['fork_cost_usd'])}"
    total = [
        "total",
        f"{totals['completed']} of {totals['runs']}",
        verdict,
        f"{totals['original_steps']} -> {totals['fork_steps']}",
        f"{totals['original_tokens']} -> {totals['fork_tokens']}",
        cost,
        f"{totals['failures']} failed" if totals["failures"] else "",
    ]
    spent = f"the forks spent {money(totals['spent_usd'])} on their own steps"
    return "\n".join([*table(lines, totals=total), spent])
