"""The HTTP API's benchmark runs and reports what docs/http-api.md cites: no figure is asserted
(timings are the benchmark's to report), only that every start and every event was measured, and
what the event streams cost the server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_http_benchmark_measures_starts_every_way_and_every_events_lag(
    tmp_path: Path,
) -> None:
    out = tmp_path / "http.json"
    subprocess.run(
        [
            sys.executable,
            "bench/http_api.py",
            *("--starts", "5", "--runs", "2", "--steps", "3", "--streams", "3", "--seconds", "2"),
            "--json",
            str(out),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=180,
    )
    measured = json.loads(out.read_text())
    start, lag = measured["start"], measured["event_lag"]
    assert start["starts"] == 5
    assert start["direct_median_ms"] > 0 and start["http_median_ms"] > 0
    # A three-step run publishes at least a start and an end of each step, and completed.
    assert lag["runs"] == 2 and lag["events"] >= 2 * 7
    assert lag["sse_p95_ms"] >= lag["sse_median_ms"] > 0
    # What the streams cost the server, counted by the server, each way (no figure asserted).
    cost = measured["streams_cost"]
    assert cost["streams"] == 3
    for state in ("waiting_for_a_person", "in_a_model_call"):
        assert cost[state]["queries_per_s"] > 0, cost
    # A conversation started each way through serve --agent: the HTTP API, A2A, AG-UI.
    protocols = measured["protocol_start"]
    assert protocols["starts"] == 5
    for way in ("http", "a2a", "ag_ui"):
        assert protocols[f"{way}_p95_ms"] >= protocols[f"{way}_median_ms"] > 0, protocols
