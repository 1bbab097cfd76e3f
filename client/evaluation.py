"""Forks with other settings, and evaluations: a label's last completed runs forked at step K
with another model, each fork compared with its original (`durable-agent eval`,
docs/debugging.md).

    originals = await recent_completed(agents.client, "order-status", 10)
    rows = await evaluate(agents, originals, step=1, model=ModelSettings(provider="openai"))
    print(eval_totals(rows, scored=False))

A fork's score is a scoring function's number, or 1.0 when its answer is the original's (the
same words), else 0.0. Tokens and cost of a fork are its whole run's, its inherited steps'
included, so that they compare with the original's; `spent` is what the forks' own steps cost.
"""

from __future__ import annotations

import asyncio
import importlib
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client

from ..workflows.inputs import AgentResult, Limits, ToolApprovalPolicy
from ..workflows.model_settings import ModelSettings, ScriptedTurn
from ..workflows.providers import CATALOGUE, Provider
from ..workflows.usage import Usage
from . import forking
from .agent_client import AgentClient, AgentRun, AgentRunFailed

EVAL_CONCURRENCY = 8
"""Forks an evaluation runs at once (each also reads its original's history first)."""
COMPLETED_RUNS_QUERY = "WorkflowType='AgentWorkflow' AND ExecutionStatus='Completed'"
Score = Callable[[AgentResult, AgentResult], float]
"""score(original, fork) -> a number."""


def forked_model(
    original: ModelSettings, provider: Provider | None, model: str | None
) -> ModelSettings | None:
    """A fork's model settings from another provider or model name; None keeps the original's."""
    if provider is None and model is None:
        return None
    if provider is None or provider == original.provider:
        # The original's settings (its timeout, retries, script) with another model name.
        return original.model_copy(update={"model": model or original.model})
    return ModelSettings(provider=provider, model=model or CATALOGUE[provider].default_model)


def forked_limits(original: Limits, max_steps: int | None, max_cost_usd: float | None) -> Limits:
    """A fork's limits: the original's, but those given."""
    given = {"max_steps": max_steps, "max_cost_usd": max_cost_usd}
    return original.model_copy(update={k: v for k, v in given.items() if v is not None})


async def fork_with(
    client: AgentClient,
    original: forking.RecordedRun,
    *,
    step: int,
    provider: Provider | None = None,
    model: str | None = None,
    script: Sequence[ScriptedTurn] | None = None,
    max_steps: int | None = None,
    max_cost_usd: float | None = None,
    **fork: Any,
) -> AgentRun:
    """Fork the run `original` at `step` (AgentClient.fork, which takes the rest) with another
    provider or model name, a scripted model's replies from step `step` + 1, or other limits:
    the original's where None."""
    settings = forked_model(original.input.model, provider, model)
    if script is not None:
        base = settings or ModelSettings(provider="scripted")
        settings = base.model_copy(update={"script": forking.scripted_from(step, script)})
    limits = forked_limits(original.input.limits, max_steps, max_cost_usd)
    return await client.fork(original.workflow_id, step=step, model=settings, limits=limits, **fork)


@dataclass
class EvalRow:
    original: str
    fork: str | None
    original_result: AgentResult
    fork_result: AgentResult | None = None
    failure: str | None = None
    score: float | None = None

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


def load_score(spec: str) -> Score:
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
    return function


async def evaluate(
    client: AgentClient,
    originals: Sequence[str],
    *,
    step: int,
    provider: Provider | None = None,
    model: str | None = None,
    max_steps: int | None = None,
    tool_approval: ToolApprovalPolicy | None = None,
    task_queue: str | None = None,
    score: Score | None = None,
    beside: Callable[[AgentRun], Awaitable[None]] | None = None,
) -> list[EvalRow]:
    """Fork each completed run of `originals` at `step` with the provider or model given
    (tool approval on, unless `tool_approval` says otherwise), wait for each fork's end and
    score it; `beside(fork)` runs while each fork does (the CLI says there what waits)."""
    slots = asyncio.Semaphore(EVAL_CONCURRENCY)

    async def fork_one(original: str) -> EvalRow:
        async with slots:
            recorded = await forking.read_run(client.client, original)
            assert recorded.result is not None, "evaluate forks completed runs"
            row = EvalRow(original, None, recorded.result)
            try:
                agent_run = await fork_with(
                    client,
                    recorded,
                    step=step,
                    provider=provider,
                    model=model,
                    max_steps=max_steps,
                    tool_approval=tool_approval or ToolApprovalPolicy(),
                    task_queue=task_queue,
                )
            except forking.ForkError as error:
                row.failure = str(error)
                return row
            row.fork = agent_run.id
            await _finish(row, agent_run, score, beside)
            return row

    return list(await asyncio.gather(*(fork_one(original) for original in originals)))


async def _finish(
    row: EvalRow,
    agent_run: AgentRun,
    score: Score | None,
    beside: Callable[[AgentRun], Awaitable[None]] | None,
) -> None:
    watcher = asyncio.ensure_future(beside(agent_run) if beside else asyncio.sleep(0))
    try:
        row.fork_result = fork = await agent_run.result()
    except AgentRunFailed as failure:
        row.failure = f"{failure.type}: {failure.message}"
        return
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    same = " ".join(row.original_result.answer.split()) == " ".join(fork.answer.split())
    try:
        row.score = float(score(row.original_result, fork) if score is not None else same)
    except Exception as error:  # the user's scoring function: its failure is this row's
        row.failure = f"the scoring function failed: {type(error).__name__}: {error}"


def eval_totals(rows: Sequence[EvalRow], scored: bool) -> dict[str, Any]:
    """An evaluation's totals: its runs, forks completed, failures, equal answers (unscored)
    or the mean score, and the steps, tokens and cost of the originals and of the forks."""
    scores = [row.score for row in rows if row.score is not None]
    forked = [row for row in rows if row.fork_result is not None]
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
        "original_cost_usd": _sum_cost([row.original_result.usage for row in rows]),
        "fork_cost_usd": _sum_cost([row.fork_usage for row in forked]),
        "spent_usd": _sum_cost([row.fork_result.usage for row in forked if row.fork_result]),
    }


def _sum_cost(usages: Sequence[Usage]) -> float | None:
    """None when a cost is unknown, or there is none to add."""
    costs = [u.cost_usd for u in usages]
    if not costs or any(c is None for c in costs):
        return None
    return round(math.fsum(c for c in costs if c is not None), 10)
