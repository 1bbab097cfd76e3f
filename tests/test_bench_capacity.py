"""The capacity benchmark drives worker processes at an open-loop rate, steps it up, reads the
runs' histories, and reports figures that agree with one another. No timed assertions: which
rate a loaded machine sustains is what it measures."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench.capacity import queued, read_history, summary

REPO = Path(__file__).resolve().parent.parent


def run_capacity(tmp_path: Path, *options: str) -> dict[str, Any]:
    out = tmp_path / "capacity.json"
    subprocess.run(
        [sys.executable, "-m", "bench.capacity", "--quick", "--json", str(out), *options],
        cwd=REPO, check=True, capture_output=True, timeout=200,
    )  # fmt: skip
    return json.loads(out.read_text())


@pytest.mark.timeout(240)
def test_an_open_loop_run_reports_every_figure_and_they_agree(tmp_path: Path) -> None:
    figures = run_capacity(tmp_path, "--sandbox", "fast")
    steps = figures["steps"]
    assert figures["sandbox"] == "fast" and figures["machine"]["cpus"] >= 1
    (host,) = figures["processes"]
    # The setting reached the worker processes themselves.
    assert host["worker_processes"] == 1 and host["worker_sandbox_settings"] == ["fast"]
    assert host["worker_rss_idle_bytes"] > 0 and host["message_store_bytes_per_run"] > 0

    levels = host["levels"]
    assert 1 <= len(levels) <= 2
    for earlier, later in itertools.pairwise(levels):
        assert later["offered_runs_per_second"] == 2 * earlier["offered_runs_per_second"]
        assert not earlier["queued"]  # stepping stops at the first level that queued
    for row in levels:
        assert row["runs"] == round(row["offered_runs_per_second"] * figures["level_seconds"])
        slowest = max(row["model_schedule_to_start_p95"], row["model_wait_p95"])
        assert row["queued"] == (slowest > figures["threshold_seconds"])
        assert 0 <= row["model_schedule_to_start_p50"] <= row["model_schedule_to_start_p95"]
        # A call's wait holds its schedule-to-start and the workflow task ahead of it.
        assert row["model_schedule_to_start_p95"] < row["model_wait_p95"]
        assert row["model_wait_p50"] <= row["model_wait_p95"]
        assert row["worker_cpu_seconds"] > 0 and row["server_cpu_seconds"] > 0
        steps_run = row["runs"] * steps
        assert row["worker_cpu_seconds_per_step"] == pytest.approx(
            row["worker_cpu_seconds"] / steps_run
        )
        run = row["run"]
        # The workload: `steps` tool calls and steps + 1 model calls, each an activity.
        assert run["model_calls"] == steps + 1 and run["activities"] == 2 * steps + 1
        assert row["model_calls_sampled"] == row["sampled_runs"] * (steps + 1)
        # Where the time went adds up to the run's wall time.
        spent = dict(run["seconds"])
        wall = spent.pop("wall")
        assert wall > 0 and sum(spent.values()) == pytest.approx(wall, rel=1e-6)
        assert spent["model_running"] >= (steps + 1) * figures["delay_seconds"] * 0.9

    # The per-step figures: the probe's two runs are what fixed + per step x K says.
    probe = host["probe"]
    for k in probe["steps"]:
        for name, per_step in probe["per_step"].items():
            assert probe["fixed"][name] + per_step * k == pytest.approx(probe["runs"][str(k)][name])
    # A run of the levels costs what the probe's run of the same length did.
    for name in ("events", "actions", "workflow_tasks", "activities", "transactions"):
        assert levels[0]["run"][name] == probe["runs"][str(steps)][name], name
    # Each step schedules two activities, both actions; a run has one start at least.
    assert probe["per_step"]["activities"] == 2 and probe["per_step"]["actions"] >= 2
    assert probe["fixed"]["actions"] >= 1

    s = host["summary"]
    rate = s["sustainable_runs_per_second"]
    best = [row for row in levels if not row["queued"]][-1]
    assert rate == best["offered_runs_per_second"]
    assert s["steps_per_run"] == steps
    assert s["steps_per_second"] == pytest.approx(rate * steps)
    for name in ("workflow_tasks", "activities", "model_calls", "actions"):
        assert s[f"{name}_per_second"] == pytest.approx(rate * best["run"][name]), name
    assert s["history_events_per_second"] == pytest.approx(rate * best["run"]["events"])
    assert s["history_bytes_per_second"] == pytest.approx(rate * best["run"]["bytes"])
    assert s["memory_bytes_per_cached_run"] >= 0

    # The floor, driven at the same rates on the same server beside the agent.
    floor = host["floor"]
    assert [row["offered_runs_per_second"] for row in floor["levels"]] == [
        row["offered_runs_per_second"] for row in levels[: len(floor["levels"])]
    ] or [row["offered_runs_per_second"] for row in levels] == [
        row["offered_runs_per_second"] for row in floor["levels"][: len(levels)]
    ]
    floor_run = floor["probe"]["runs"][str(steps)]
    # The same workload: K+1 model calls and K tool calls, each an activity, and no more.
    assert floor_run["model_calls"] == steps + 1 and floor_run["activities"] == 2 * steps + 1
    assert floor["probe"]["per_step"]["activities"] == 2
    assert set(floor_run["kinds"]) <= {
        "WORKFLOW_EXECUTION_STARTED", "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED",
        "WORKFLOW_TASK_COMPLETED", "ACTIVITY_TASK_SCHEDULED", "ACTIVITY_TASK_STARTED",
        "ACTIVITY_TASK_COMPLETED", "WORKFLOW_EXECUTION_COMPLETED",
    }  # fmt: skip
    compared = host["against_floor"]
    agent_run = probe["runs"][str(steps)]
    assert compared["agent_runs_per_second"] == rate
    assert compared["floor_runs_per_second"] == floor["summary"]["sustainable_runs_per_second"]
    if compared["floor_runs_per_second"]:
        ratio = compared["agent_runs_per_second"] / compared["floor_runs_per_second"]
        assert compared["ratio"] == pytest.approx(ratio)
        assert compared["met"] == (ratio >= compared["goal"] == 0.9)
    # The events the agent has more of are the whole difference between the two runs.
    more = compared["events_the_agent_has_more_of"]
    assert sum(more.values()) == agent_run["events"] - floor_run["events"]
    assert sum(agent_run["kinds"].values()) == agent_run["events"]
    # One patch marker, with the SDK's TemporalChangeVersion upsert (versioning.ONE_MARKER).
    assert agent_run["kinds"]["MARKER_RECORDED (core_patch)"] == 1
    assert agent_run["kinds"]["UPSERT_WORKFLOW_SEARCH_ATTRIBUTES (TemporalChangeVersion)"] == 1


def test_the_sustainable_rate_is_the_last_level_that_did_not_queue() -> None:
    def row(rate: float, queued: bool) -> dict[str, Any]:
        run = {"workflow_tasks": 4, "activities": 3, "model_calls": 2, "actions": 6, "events": 30,
               "bytes": 9000, "seconds": {"wall": 1.0}}  # fmt: skip
        return {"offered_runs_per_second": rate, "queued": queued, "run": run,
                "model_schedule_to_start_p95": 0.0, "model_wait_p95": 2.0 if queued else 0.1,
                "worker_cpu_seconds_per_step": 0.01, "server_cpu_seconds_per_step": 0.02,
                "memory_bytes_per_cached_run": rate * 1000, "worker_cores_busy": 0.5,
                "peak_runs_in_flight": int(rate * 10),
                "worker_rss_peak_bytes": 100_000_000 + int(rate * 10) * 2_000_000,
                "server_cores_busy": 0.7}  # fmt: skip

    s = summary([row(2, False), row(3, False), row(4.5, True)], steps=1)
    assert s["saturated"] and s["sustainable_runs_per_second"] == 3
    assert s["actions_per_second"] == 18 and s["at_saturation"]["offered_runs_per_second"] == 4.5
    # The slope of RSS over runs open, not a level's RSS growth over its runs.
    assert s["memory_bytes_per_cached_run"] == pytest.approx(2_000_000)
    assert summary([row(2, True)], steps=1)["memory_bytes_per_cached_run"] == 2000
    s = summary([row(2, False), row(3, False)], steps=1)
    assert not s["saturated"] and s["sustainable_runs_per_second"] == 3
    assert s["at_saturation"] is None
    # Queued from the first level: nothing was sustained.
    assert summary([row(2, True)], steps=1)["sustainable_runs_per_second"] == 0


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--processes", "1,x"], "--processes: '1,x' is not a list of counts such as 1,2"),
        (["--rate-factor", "1"], "--rate-factor must be above 1"),
        (["--sandbox", "slow"], "Invalid value for '--sandbox': 'slow' is not one of"),
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2(option: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.capacity", *option],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert message in line


def history(*events: tuple[str, float, dict[str, Any]]) -> list[HistoryEvent]:
    """Events from (type, seconds, attributes): ids in order, times from a fixed start."""
    built = []
    for event_id, (kind, seconds, attributes) in enumerate(events, start=1):
        event = HistoryEvent(event_id=event_id, event_type=EventType.Value(f"EVENT_TYPE_{kind}"))
        event.event_time.FromDatetime(datetime(2026, 12, 2, 16, 0) + timedelta(seconds=seconds))
        field = f"{kind.lower()}_event_attributes"
        getattr(event, field).CopyFrom(type(getattr(event, field))(**attributes))
        built.append(event)
    return built


def test_a_model_call_queued_behind_its_workflow_task_counts_as_queued() -> None:
    # The activity starts at once, but the workflow task that asks for it waited 2 s for a
    # worker: the run queued, though the call's schedule-to-start is 0.
    events = history(
        ("WORKFLOW_EXECUTION_STARTED", 0.0, {}),
        ("WORKFLOW_TASK_SCHEDULED", 0.0, {}),
        ("WORKFLOW_TASK_STARTED", 2.0, {"scheduled_event_id": 2}),
        ("WORKFLOW_TASK_COMPLETED", 2.1, {"scheduled_event_id": 2, "started_event_id": 3}),
        ("ACTIVITY_TASK_SCHEDULED", 2.1,
         {"activity_type": {"name": "call_model"}, "workflow_task_completed_event_id": 4}),
        ("ACTIVITY_TASK_STARTED", 2.1, {"scheduled_event_id": 5, "attempt": 1}),
        ("ACTIVITY_TASK_COMPLETED", 2.3, {"scheduled_event_id": 5, "started_event_id": 6}),
        ("WORKFLOW_TASK_SCHEDULED", 2.3, {}),
        ("WORKFLOW_TASK_STARTED", 2.4, {"scheduled_event_id": 8}),
        ("WORKFLOW_TASK_COMPLETED", 2.5, {"scheduled_event_id": 8, "started_event_id": 9}),
        ("WORKFLOW_EXECUTION_COMPLETED", 2.5, {"workflow_task_completed_event_id": 10}),
    )  # fmt: skip
    run = read_history(events)
    assert run.model_schedule_to_start == [0.0]
    assert run.model_waits == [pytest.approx(2.1)]
    assert queued([run], threshold=1.0)
    assert not queued([run], threshold=3.0)
    assert run.seconds["task_queued"] == pytest.approx(2.1)
    assert run.actions == 2 and run.workflow_tasks == 2 and run.model_calls == 1
