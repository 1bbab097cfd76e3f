"""The follow benchmark runs, and shows what docs/performance.md claims: a run followed by
`AgentRun.events()` has no update in its history, while the stream's update-based subscriber
adds events to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_following_by_query_costs_the_history_nothing(tmp_path: Path) -> None:
    out = tmp_path / "follow.json"
    subprocess.run(
        [sys.executable, "bench/follow.py", "--steps", "6", "--runs", "1", "--json", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=180,
    )
    rows = {row["way"]: row for row in json.loads(out.read_text())}
    alone, query, update = (rows[w] for w in ("not followed", "followed by query",
                                              "followed by update"))  # fmt: skip
    # A few events either way: how many workflow tasks a run takes depends on timing.
    assert abs(query["events"] - alone["events"]) <= 6, rows
    # Following by query writes no update; each poll of the update-based subscriber writes an
    # accepted and a completed one (how many polls a run takes depends on timing).
    assert alone["update_events"] == query["update_events"] == 0, rows
    assert update["update_events"] >= 2, rows
    assert update["events"] >= alone["events"] + 2, rows
    assert query["lag_median_ms"] is not None and update["lag_median_ms"] is not None
