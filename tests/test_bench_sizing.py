"""The sizing model's arithmetic on a fixed input, which limit it says binds first, its command
line, and docs/sizing.md as the committed input generates it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.sizing import DEFAULT_INPUT, Figure, action_cost, inputs_from, model

REPO = Path(__file__).resolve().parent.parent


def capacity_input() -> dict[str, Any]:
    """A capacity JSON with round figures: 5 actions a run and 2 a step, and so on."""
    per_step = {"events": 12, "bytes": 4000, "actions": 2, "workflow_tasks": 2, "activities": 2,
                "transactions": 8}  # fmt: skip
    fixed = {"events": 24, "bytes": 9000, "actions": 5, "workflow_tasks": 2, "activities": 1,
             "transactions": 7}  # fmt: skip
    level = {"queued": False, "run": {"seconds": {"wall": 3.0, "model_running": 2.2,
                                                  "tools_running": 0.3}}}  # fmt: skip
    return {
        "taken_at": "2026-12-02T16:00:00+00:00",
        "steps": 10,
        "delay_seconds": 0.2,
        "sandbox": "fast",
        "machine": {"cpus": 2},
        "processes": [
            {
                "worker_processes": 1,
                "worker_rss_idle_bytes": 200e6,
                "message_store_bytes_per_run": 10_000,
                "probe": {"per_step": per_step, "fixed": fixed},
                "levels": [level],
                "summary": {
                    "worker_cpu_seconds_per_step": 0.01,
                    "memory_bytes_per_cached_run": 500_000,
                    "sustainable_runs_per_second": 5,
                },
            }
        ],
    }


TEN_A_SECOND = {"runs_a_day": 864_000, "steps": 10}
"""10 runs a second on average."""


def test_the_arithmetic_on_a_fixed_input() -> None:
    inputs = inputs_from(capacity_input(), None)
    r = model(inputs, TEN_A_SECOND, "openai")
    peak = 3 * 10  # the peak-to-average input
    assert r["units_a_second_average"] == 10 and r["units_a_second_peak"] == peak
    cloud = r["temporal_cloud"]
    # actions a run = fixed + a step's x steps; a second = runs a day x actions a run / 86,400.
    assert cloud["actions_a_unit"] == 5 + 2 * 10
    assert cloud["actions_a_second_average"] == 864_000 * 25 / 86_400
    assert cloud["actions_a_second_peak"] == peak * 25
    assert cloud["actions_a_month"] == pytest.approx(864_000 * 30.4 * 25)
    assert cloud["actions_dollars_a_month"] == action_cost(cloud["actions_a_month"])
    # A run: 11 model calls of 2 s, 10 tools of 0.2 s, and the measured rest: (3.0-2.2-0.3)/10.
    assert r["run_seconds"] == pytest.approx(11 * 2.0 + 10 * (0.2 + 0.05))
    workers = r["workers"]
    assert workers["open_runs"] == pytest.approx(peak * r["run_seconds"])  # Little's law
    # 300 steps a second x 10 ms of worker CPU, at 70% utilisation.
    assert workers["worker_cores"] == pytest.approx(300 * 0.01 / 0.7)
    assert workers["processes_for_cpu"] == 5
    calls = r["model_calls"]
    assert calls["calls_a_second_peak"] == peak * 11
    assert calls["requests_a_minute_peak"] == peak * 11 * 60
    assert calls["concurrent_calls_peak"] == peak * 11 * 2.0
    hosted = r["self_hosted"]
    assert hosted["transactions_a_second_peak"] == peak * (7 + 8 * 10)
    assert hosted["history_events_a_run"] == 24 + 12 * 10
    # 2,610 transactions a second at 100 a shard: 26.1 shards, so 32.
    assert hosted["shards_needed"] == 32
    # 864,000 runs a day x 1,000 B a step x 10 steps x 7 days x 2 (row overhead).
    assert r["store_gb"] == pytest.approx(864_000 * 1000 * 10 * 7 * 2 / 1e9)
    assert r["limits"] == sorted(r["limits"], key=lambda row: -row["utilisation"])
    assert r["binds_first"] == r["limits"][0]["limit"]


def test_action_cost_follows_the_published_tiers() -> None:
    # The pricing page's own example: 11.25M actions cost $525.
    assert action_cost(11.25e6) == pytest.approx(525)
    assert action_cost(5e6) == pytest.approx(250)
    assert action_cost(0) == 0


def test_which_limit_binds_first_follows_the_input() -> None:
    inputs = inputs_from(capacity_input(), None)
    # 750 actions a second at the peak against the namespace's 500.
    assert model(inputs, TEN_A_SECOND, "openai")["binds_first"].startswith("Temporal Cloud")
    # On Anthropic's tier, 19,800 requests a minute against 4,000.
    assert model(inputs, TEN_A_SECOND, "anthropic")["binds_first"] == "Anthropic requests a minute"
    raised = inputs | {"cloud_aps_limit": Figure(10_000, "assumed", "a raised limit")}
    # Then requests: 19,800 a minute against 30,000 (tokens: 22.9M against 150M).
    assert model(raised, TEN_A_SECOND, "openai")["binds_first"] == "OpenAI requests a minute"
    # At 100 steps a call carries ten times the transcript: tokens bind before requests.
    hundred_steps = model(raised, {"runs_a_day": 864_000, "steps": 100}, "openai")
    assert hundred_steps["binds_first"] == "OpenAI tokens a minute"
    assert hundred_steps["limits"][0]["utilisation"] > 1


def sizing(*options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.sizing", *options],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_docs_sizing_is_what_the_committed_input_generates() -> None:
    done = sizing()
    assert done.returncode == 0, done.stderr
    docs = (REPO / "docs" / "sizing.md").read_text()
    begin, end = "<!-- generated: python -m bench.sizing -->\n", "\n<!-- end generated -->"
    generated = docs.split(begin, 1)[1].split(end, 1)[0]
    assert generated == done.stdout.rstrip("\n"), "regenerate docs/sizing.md"
    assert json.loads(DEFAULT_INPUT.read_text())["processes"], DEFAULT_INPUT


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--set", "peak_to_average=high"], "--set peak_to_average=high: 'high' is not a number"),
        (["--set", "no_such=1"], "--set no_such=1: no input named 'no_such'"),
        (["--input", "missing.json"], "--input missing.json:"),
        (["--processes", "7"], "the input measured 1"),
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2(options: list[str], message: str) -> None:
    done = sizing(*options)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert message in line
