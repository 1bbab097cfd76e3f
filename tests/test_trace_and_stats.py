"""`--trace`, `starter.py trace` and `starter.py stats`: the step table of a run, and the step
distribution of the runs that ended, with the max_steps it suggests. In-process against the
session's dev server; the table and the statistics also as pure functions."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_agent.cli import starter
from durable_agent.cli.tables import TABLE_WIDTH, stats_table, trace_table
from durable_agent.client.agent_client import (
    AgentClient,
    AgentRunFailed,
    ClosedRun,
    percentile,
    step_stats,
)
from durable_agent.encryption import payload_codec
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentResult, Limits
from durable_agent.workflows.model_settings import ModelSettings, Price
from durable_agent.workflows.state import CompactionRecord, StepRecord, ToolCallRecord
from durable_agent.workflows.usage import Usage
from tests import helpers
from tests.helpers import TEST_WORKER_OPTIONS, call, scripted_input, turn
from tests.test_agent_client import end_leftovers

PROMPT = "Where is my latest order? My email is a@b.com."
USAGE = {"input_tokens": 100, "cached_input_tokens": 40, "output_tokens": 10}


class Cli(helpers.Cli):
    """starter.py in this process, against the session's server."""

    async def run(self, script: list[dict[str, Any]], tmp_path: Path, *options: str) -> Any:
        """A scripted run through the CLI: (exit code, stdout, stderr)."""
        path = tmp_path / f"script-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps(script))
        return await self(PROMPT, "--script", str(path), "--task-queue", self.task_queue, *options)


@asynccontextmanager
async def serving(env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[None]:
    async with build_worker(env.client, task_queue, **TEST_WORKER_OPTIONS):
        yield


# Listings catch up late, and `stats` reads every closed run of the session on each call: a
# longer wait than the others here, polled less often.
eventually = partial(helpers.eventually, timeout=30, interval=0.2)


def table_of(text: str) -> list[str]:
    """The lines of the trace table in `text`: from its header to its last line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["step", "model"])
    end = next(i for i, line in enumerate(lines) if line.startswith("total "))
    while end + 1 < len(lines) and lines[end + 1].startswith(" "):
        end += 1  # the totals' tool calls, when they go under the row
    following = [line for line in lines[end + 1 :] if line.startswith(("xN", "[", "compaction"))]
    return lines[start : end + 1] + following


def table_rows(table: list[str]) -> dict[str, str]:
    """Each row (a step number, or "total") with its wrapped tool lines joined to it."""
    rows: dict[str, str] = {}
    key = None
    model_at = table[0].index("model")
    for line in table[1:]:
        if set(line) == {"-"}:
            continue  # the rule above the totals
        if line[:model_at].strip():  # a step number, or "total"; then the notes
            key = line.split()[0]
            if not (key.isdigit() or key == "total"):
                break
            rows[key] = line
        elif line.strip() and key is not None:  # its tool calls, wrapped or under it
            rows[key] += " " + line.strip()
    return rows


def count_me_script(steps: int, tag: str) -> list[dict[str, Any]]:
    """`steps` model calls: count_me with a fresh key each time, then the answer."""
    return [
        {"calls": [{"name": "count_me", "arguments": {"key": f"{tag}-{i}"}}], "usage": USAGE}
        for i in range(steps - 1)
    ] + [{"text": "done", "usage": USAGE}]


def traced_script(key: str) -> list[dict[str, Any]]:
    """Step 1: a call retried twice, a result too big to show, a failing call; then a call
    made three times (the third is loop-detected); then the answer."""
    repeat = {"calls": [{"name": "count_me", "arguments": {"key": key}}], "usage": USAGE}
    return [
        {
            "calls": [
                {"name": "flaky", "arguments": {"key": key, "failures": 2}},
                {"name": "big_text", "arguments": {"size": 5000}},
                {"name": "always_fails", "arguments": {"secret": "s"}},
            ],
            "usage": USAGE,
        },
        repeat,
        repeat,
        repeat,
        {"text": "all done", "usage": USAGE},
    ]


# The table, from a real run -------------------------------------------------------------------


async def test_trace_prints_one_row_per_step_and_totals_on_stderr(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = Cli(temporal_env, task_queue, capsys)
    async with serving(temporal_env, task_queue):
        code, out, err = await cli.run(traced_script(uuid.uuid4().hex), tmp_path, "--trace")

    assert code == 0, err
    assert out == "all done\n"  # the table is not on stdout
    table = table_of(err)
    assert all(len(line) <= TABLE_WIDTH for line in table), table
    rows = table_rows(table)
    assert list(rows) == ["1", "2", "3", "4", "5", "total"]
    first = rows["1"]
    assert first.split()[:2] == ["1", "scripted"]
    flaky = re.search(r"flaky ok (\d+)ms x3,", first)
    assert flaky is not None, first
    assert int(flaky.group(1)) >= 100  # two retries 50 ms apart: every attempt is counted
    assert re.search(r"big_text ok \d+ms \[ext\],", first), first
    assert re.search(r"always_fails error \d+ms x3$", first), first
    assert "tool_calls" in first
    assert re.search(r"count_me ok \d+ms$", rows["2"]), rows["2"]
    assert rows["4"].endswith("count_me loop_detected")  # no activity ran: no latency
    assert rows["5"].split()[8:] in (["stop", "-"], ["stop"])  # tools beside the row, or under
    # Per step: 100 input, 40 of them cached, 10 output; the scripted model has no price.
    assert rows["3"].split()[3:8] == ["1", "100", "40", "10", "-"]
    total = rows["total"].split()
    assert total[:3] == ["total", "5", "steps"]
    assert total[4:9] == ["5", "500", "200", "50", "-"]
    assert rows["total"].endswith("6 calls: ok 4, error 1, loop_detected 1")
    assert int(total[3]) == sum(int(rows[s].split()[2]) for s in "12345")
    assert "xN: N attempts" in table[-1] and "[ext]" in table[-1]


async def test_trace_json_carries_the_step_records(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = Cli(temporal_env, task_queue, capsys)
    async with serving(temporal_env, task_queue):
        code, out, err = await cli.run(
            traced_script(uuid.uuid4().hex), tmp_path, "--trace", "--json"
        )
        plain_code, plain, _ = await cli.run(count_me_script(2, "plain"), tmp_path, "--json")

    assert code == 0, err
    printed = json.loads(out)  # exactly one JSON object
    assert printed["status"] == "completed" and printed["steps"] == 5
    records = [StepRecord.model_validate(r) for r in printed["trace"]]
    assert [r.step for r in records] == [1, 2, 3, 4, 5]
    assert [(c.name, c.outcome, c.attempts) for c in records[0].tool_calls] == [
        ("flaky", "ok", 3),
        ("big_text", "ok", 1),
        ("always_fails", "error", 3),
    ]
    assert records[0].tool_calls[1].externalised
    assert records[3].tool_calls[0].outcome == "loop_detected"
    assert sum((r.usage for r in records), Usage()).input_tokens == printed["usage"]["input_tokens"]
    assert "step  model" not in err  # with --json, the records instead of the table
    assert plain_code == 0 and "trace" not in json.loads(plain)


async def test_a_failed_run_traces_the_steps_it_made(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = Cli(temporal_env, task_queue, capsys)
    async with serving(temporal_env, task_queue):
        code, out, err = await cli.run(
            count_me_script(5, uuid.uuid4().hex), tmp_path, "--trace", "--max-steps", "2"
        )
        json_code, printed, _ = await cli.run(
            count_me_script(5, uuid.uuid4().hex),
            tmp_path,
            "--trace",
            "--json",
            "--max-steps",
            "2",
        )

    assert code == 1 and out == ""
    assert "failed: AgentStepLimitExceeded" in err
    rows = table_rows(table_of(err))
    assert list(rows) == ["1", "2", "total"]
    assert rows["total"].split()[:3] == ["total", "2", "steps"]
    assert json_code == 1
    failed = json.loads(printed)
    assert failed["status"] == "failed" and [r["step"] for r in failed["trace"]] == [1, 2]


async def test_trace_and_result_read_an_ended_run_without_a_worker(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = Cli(temporal_env, task_queue, capsys)
    async with serving(temporal_env, task_queue):
        code, out, err = await cli.run(traced_script(uuid.uuid4().hex), tmp_path, "--json")
        assert code == 0, err
        completed = json.loads(out)["workflow_id"]
        code, out, err = await cli.run(
            count_me_script(4, uuid.uuid4().hex), tmp_path, "--json", "--max-steps", "3"
        )
        assert code == 1, err
        failed = json.loads(out)["workflow_id"]
    # The worker has stopped: nothing can answer a query any more.

    code, out, err = await cli("trace", completed)
    assert code == 0, err
    rows = table_rows(table_of(out))
    assert list(rows) == ["1", "2", "3", "4", "5", "total"]
    assert "flaky ok" in rows["1"] and rows["4"].endswith("count_me loop_detected")

    code, out, err = await cli("trace", completed, "--json")
    assert code == 0, err
    printed = json.loads(out)
    assert printed["workflow_id"] == completed
    assert [r["step"] for r in printed["trace"]] == [1, 2, 3, 4, 5]

    code, out, err = await cli("trace", failed)  # from the failure's details
    assert code == 0, err
    assert list(table_rows(table_of(out))) == ["1", "2", "3", "total"]

    code, out, err = await cli("result", completed, "--trace")
    assert code == 0, err
    assert out == "all done\n"
    assert list(table_rows(table_of(err))) == ["1", "2", "3", "4", "5", "total"]

    code, out, err = await cli("trace", f"agent-none-{uuid.uuid4().hex[:6]}")
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("trace agent-none-"), err


async def test_trace_of_a_running_run_asks_its_worker(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(temporal_env, task_queue, capsys)
    agents = AgentClient(temporal_env.client, task_queue)
    script = [turn(call("submit_plan", steps=["look", "answer"])), turn(text="done")]
    async with serving(temporal_env, task_queue):
        run = await agents.start(scripted_input(script, tools=["count_me"], plan=True))
        try:

            async def waits() -> bool:
                return (await run.status()).status == "awaiting_approval"

            await eventually(waits)
            code, out, err = await cli("trace", run.id, "--json")
            assert code == 0, err
            records = json.loads(out)["trace"]
            assert [r["step"] for r in records] == [1]
            assert records[0]["finish_reason"] == "tool_calls"  # submit_plan, still waiting
        finally:
            await end_leftovers(agents, [run.id])


@pytest.mark.parametrize(
    "argv",
    [
        ["trace"],
        ["stats", "--limit", "0"],
        [PROMPT, "--trace", "--no-wait"],
        [PROMPT, "--label", " "],
    ],
    ids=["trace-without-id", "zero-limit", "trace-no-wait", "empty-label"],
)
def test_bad_command_lines_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert starter.main([*argv, "--address", "127.0.0.1:1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("starter.py"), err


# The table, as a pure function ----------------------------------------------------------------


def record(step: int, cost: float | None, *calls: ToolCallRecord, **fields: Any) -> StepRecord:
    usage = Usage(
        input_tokens=1000 * step, cached_input_tokens=500, output_tokens=20, cost_usd=cost
    )
    fields = {"model": "gpt-4o-mini", "model_latency_ms": 10 * step, **fields}
    return StepRecord(step=step, usage=usage, tool_calls=list(calls), **fields)


def tool(name: str, outcome: Any = "ok", **fields: Any) -> ToolCallRecord:
    return ToolCallRecord(id=f"id-{name}", name=name, arguments="{}", outcome=outcome, **fields)


def test_the_table_totals_the_cost_only_when_every_step_has_one() -> None:
    known = [record(1, 0.0012, finish_reason="tool_calls"), record(2, 0.0003)]

    rows = table_rows(trace_table(known).splitlines())
    assert rows["1"].split()[7] == "$0.001200"
    assert rows["total"].split()[3:9] == ["30", "2", "3000", "1000", "40", "$0.001500"]
    assert rows["total"].endswith("no tool calls")
    assert rows["2"].split()[8:] == ["-"]  # no finish reason, and no tools under the row

    unknown = [record(1, 0.0012), record(2, None)]
    rows = table_rows(trace_table(unknown).splitlines())
    assert rows["2"].split()[7] == "-" and rows["total"].split()[8] == "-"


CALLS = [
    tool("search_orders", latency_ms=120, attempts=2),
    tool("big_report", latency_ms=30, attempts=1, truncated=True),
    tool("big_export", latency_ms=31, attempts=1, truncated=True, externalised=True),
    tool("delete_everything", "refused"),
    tool("a_tool_with_an_extraordinarily_long_name_that_cannot_fit", latency_ms=1, attempts=1),
]


def test_the_tools_column_marks_attempts_and_cuts_and_wraps_within_the_width() -> None:
    records = [record(1, None, *CALLS, model_attempts=2), record(2, None)]
    compactions = [
        CompactionRecord(step=2, policy="window", messages_removed=4, tokens_removed=900)
    ]

    text = trace_table(records, compactions=compactions)
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines), text
    assert max(len(line) for line in lines) > 90, text  # it uses the width it has
    rows = table_rows(lines)
    first = rows["1"]
    assert "search_orders ok 120ms x2," in first
    assert "big_report ok 30ms [cut]," in first
    assert "big_export ok 31ms [ext]," in first  # externalised results are also cut
    assert "delete_everything refused," in first  # no activity ran: no latency
    assert re.search(r"a_tool_with_\w+\.\.\.$", first), first  # shortened to the column
    tools_at = lines[0].index("tools")
    assert lines[1].index("search_orders") == tools_at
    wrapped = lines[2 : next(i for i, line in enumerate(lines) if line.startswith("    2"))]
    assert len(wrapped) >= 2, text
    assert all(line[:tools_at].strip() == "" and line[tools_at] != " " for line in wrapped)
    assert rows["total"].endswith("5 calls: ok 4, refused 1")
    assert rows["total"].split()[4] == "3"  # model attempts, summed
    assert "xN: N attempts; [cut]: result cut to its bound; [ext]: whole result kept" in text
    assert lines[-1] == "compaction before step 2 (window): 4 messages, ~900 tokens removed"


def test_without_room_beside_the_row_the_tools_go_under_it() -> None:
    long_model = "claude-sonnet-4-6-20260101-experimental"
    records = [
        record(1, 123.45, *CALLS, model=long_model, finish_reason="a-very-long-finish-reason"),
        record(2, 0.5, model=long_model, model_latency_ms=1_234_567),
    ]

    text = trace_table(records)
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines), text
    assert lines[0].split()[-1] == "finish" and lines[1].strip() == "tools"
    row = lines[2].split()
    assert row[1] == long_model[:17] + "..." and row[-1] == "a-very-lo..."
    model_at = lines[0].index("model")
    assert lines[3].index("search_orders ok 120ms x2,") == model_at
    assert "a_tool_with_an_extraordinarily_long_name_that_cannot_fit ok 1ms" in text
    assert lines[lines.index(next(x for x in lines if x.startswith("    2"))) + 1][0] == "-"
    total_at = next(i for i, line in enumerate(lines) if line.startswith("total"))
    assert lines[total_at + 1].strip() == "5 calls: ok 4, refused 1"


# The statistics, as a pure function -----------------------------------------------------------


def result(steps: int, tokens: int = 110, cost: float | None = 0.001) -> AgentResult:
    usage = Usage(input_tokens=tokens - 10, output_tokens=10, cost_usd=cost)
    return AgentResult(answer="a", steps=steps, usage=usage)


def test_percentile_is_nearest_rank() -> None:
    values = [40, 15, 50, 35, 20]  # unordered on purpose
    assert [percentile(values, p) for p in (5, 30, 40, 50, 95, 100)] == [15, 20, 20, 35, 50, 50]
    assert percentile([7], 95) == 7
    assert percentile(list(range(1, 101)), 95) == 95
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1], 0)


def test_step_stats_recommend_twice_the_p95_and_count_what_it_cuts() -> None:
    # 20 runs: 18 of 2 steps, one of 3, one of 9. Nearest rank: p50 is the 10th (2), p95 the
    # 19th (3); twice that is 6, which the 9-step run exceeds.
    results = [result(2, tokens=100)] * 18 + [result(3, tokens=200), result(9, tokens=1000)]

    stats = step_stats("order-status", results, failed=2, other=1)
    assert (stats.label, stats.completed, stats.failed, stats.other) == ("order-status", 20, 2, 1)
    assert stats.runs == 23  # each run counted once
    assert (stats.steps_p50, stats.steps_p95, stats.steps_max) == (2, 3, 9)
    assert stats.recommended_max_steps == 6
    assert stats.cut_short == 1
    assert stats.tokens_mean == pytest.approx((18 * 100 + 200 + 1000) / 20)
    assert stats.tokens_p95 == 200
    assert stats.cost_mean_usd == pytest.approx(0.001)

    few = step_stats("x", [result(1), result(4), result(2)])
    assert (few.steps_p50, few.steps_p95, few.recommended_max_steps, few.cut_short) == (2, 4, 8, 0)

    at_the_limit = step_stats("x", [result(1)] * 19 + [result(2)])
    assert (at_the_limit.recommended_max_steps, at_the_limit.cut_short) == (2, 0)  # 2 steps fit
    assert step_stats("x", [result(0)]).recommended_max_steps == 1  # never below 1

    unknown = step_stats("x", [result(1), result(2, cost=None)])
    assert unknown.cost_mean_usd is None  # an unknown cost is not a zero cost

    none = step_stats("x", [], failed=3)
    assert (none.runs, none.completed, none.failed, none.other) == (3, 0, 3, 0)
    assert (none.steps_p95, none.recommended_max_steps, none.cut_short) == (None, None, 0)


def test_the_stats_table_has_a_row_per_label() -> None:
    groups = [
        step_stats("order-status", [result(2)] * 18 + [result(3), result(9)], failed=2, other=1),
        step_stats("a-label-much-longer-than-the-column", [result(1)]),
        step_stats("(no label)", [], failed=1),
    ]

    lines = stats_table(groups).splitlines()
    assert lines[0].split() == [
        "label",
        "completed",
        "failed",
        "other",
        "p50",
        "p95",
        "max",
        "mean",
        "tok",
        "mean",
        "cost",
        "max_steps",
        "cut",
        "short",
    ]
    expected = ["order-status", "20", "2", "1", "2", "3", "9", "110", "$0.001000", "6", "1"]
    assert lines[1].split() == expected
    assert lines[2].split()[0] == "a-label-much-..."
    assert lines[3].split() == ["(no", "label)", "0", "1", "0", *["-"] * 7]
    assert all(len(line) <= 100 for line in lines)


# stats, over runs on the server ---------------------------------------------------------------


async def test_stats_groups_the_runs_that_ended_by_label(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    label, other = f"t-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    cli = Cli(temporal_env, task_queue, capsys)
    agents = AgentClient(temporal_env.client, task_queue)
    usage = Usage(**USAGE)
    priced = ModelSettings(
        script=[turn(text="done", usage=usage)],
        price=Price(input=10.0, cached_input=1.0, output=100.0),
    )
    async with serving(temporal_env, task_queue):
        # 20 runs of one step and one of five: p95 is the 20th of 21, 1 step; max_steps 2
        # would have cut the five-step run short.
        one_step = scripted_input([turn(text="done", usage=usage)], label=label)
        runs = [await agents.start(one_step) for _ in range(20)]
        failing = scripted_input(
            [turn(call("count_me", key=uuid.uuid4().hex), usage=usage), turn(text="never")],
            label=label,
            limits=Limits(max_steps=1),
        )
        runs.append(await agents.start(failing))
        runs += [
            await agents.start(one_step.model_copy(update={"label": other, "model": priced}))
            for _ in range(2)
        ]
        outcomes = await asyncio.gather(*(r.result() for r in runs), return_exceptions=True)
        code, _, err = await cli.run(
            count_me_script(5, uuid.uuid4().hex), tmp_path, "--label", label
        )
        assert code == 0, err
    assert [type(o) for o in outcomes] == [AgentResult] * 20 + [AgentRunFailed] + [AgentResult] * 2

    async def listed() -> bool:
        code, out, err = await cli("stats", "--label", label, "--json")
        assert code == 0, err
        groups = json.loads(out)["groups"]
        return bool(groups) and groups[0]["runs"] == 22

    await eventually(listed)

    code, out, err = await cli("stats", "--label", label, "--json")
    printed = json.loads(out)
    assert printed["unreadable"] == 0
    (group,) = printed["groups"]
    assert group == {
        "label": label,
        "runs": 22,
        "completed": 21,
        "failed": 1,
        "other": 0,
        "steps_p50": 1,
        "steps_p95": 1,
        "steps_max": 5,
        "tokens_mean": pytest.approx((20 * 110 + 5 * 110) / 21),  # 130.95
        "tokens_p95": 110,
        "cost_mean_usd": None,  # the demo model has no price
        "recommended_max_steps": 2,
        "cut_short": 1,
    }

    code, out, err = await cli("stats", "--label", label)
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith(label))
    assert row.split() == [label, "21", "1", "0", "1", "1", "5", "131", "-", "2", "1"]

    code, out, err = await cli("stats", "--label", label, "--limit", "3", "--json")
    (limited,) = json.loads(out)["groups"]
    assert limited["runs"] == limited["completed"] + limited["failed"] == 3

    async def both() -> bool:
        _, out, _ = await cli("stats", "--json")
        groups = {g["label"]: g for g in json.loads(out)["groups"]}
        return other in groups and groups.get(label, {}).get("completed") == 21

    await eventually(both)  # without --label: every label, each in its own group
    code, out, err = await cli("stats", "--json")
    groups = {g["label"]: g for g in json.loads(out)["groups"]}
    assert (groups[other]["runs"], groups[other]["completed"], groups[other]["failed"]) == (2, 2, 0)
    # Per run: 60 uncached input tokens at $10/M, 40 cached at $1/M, 10 output at $100/M.
    assert groups[other]["cost_mean_usd"] == pytest.approx((60 * 10 + 40 * 1 + 10 * 100) / 1e6)
    assert groups[other]["recommended_max_steps"] == 2


async def test_stats_with_no_run_of_the_label_says_so(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(temporal_env, task_queue, capsys)
    label = f"none-{uuid.uuid4().hex[:8]}"

    code, out, err = await cli("stats", "--label", label)
    assert code == 0 and out == ""
    assert err.strip() == f"no agent run with label '{label}' has ended yet"
    code, out, _ = await cli("stats", "--label", label, "--json")
    assert json.loads(out) == {"label": label, "limit": 500, "unreadable": 0, "groups": []}


async def test_a_run_this_client_cannot_decrypt_is_skipped_not_fatal(
    temporal_env: WorkflowEnvironment, task_queue: str
) -> None:
    """A run encrypted with a key this client lacks (rotated out, another team's) is reported as
    unreadable by `closed_runs`, and the others are still read."""
    keyed = Client(
        temporal_env.client.service_client,
        namespace=temporal_env.client.namespace,
        data_converter=payload_codec.data_converter(
            keys=[payload_codec.PayloadKey("stats-test", bytes(range(32)))]
        ),
    )
    async with build_worker(keyed, task_queue, **TEST_WORKER_OPTIONS):
        handle = await keyed.start_workflow(
            AgentWorkflow.run,
            scripted_input([turn(text="secret")], label="encrypted"),
            id=f"encrypted-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        await handle.result()
    plain = AgentClient(temporal_env.client, task_queue)

    async def seen() -> ClosedRun | None:
        async for closed in plain.closed_runs(limit=50):
            if closed.workflow_id == handle.id:
                return closed
        return None

    deadline = asyncio.get_running_loop().time() + 15
    while (closed := await seen()) is None:  # visibility is eventually consistent
        assert asyncio.get_running_loop().time() < deadline, "the run was never listed"
        await asyncio.sleep(0.1)
    assert closed.result is None and closed.failure is None
    assert closed.error is not None and "binary/encrypted" in closed.error
    assert closed.label is None  # its memo is encrypted too
