"""The replay benchmark runs, replays both runs' histories, and shows the local tool's run with
fewer events for the same steps (docs/performance.md, "Replay")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_replay_bench_replays_both_kinds_of_run(tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    subprocess.run(
        [sys.executable, "bench/replay.py", "--steps", "20", "--runs", "1", "--json", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=180,
    )
    rows = {row["tool"]: row for row in json.loads(out.read_text())}
    assert rows["activity"]["steps"] == rows["local"]["steps"] == 20
    assert rows["local"]["events"] < rows["activity"]["events"] * 0.8, rows
    assert all(len(row["seconds"]) == 1 and row["median"] > 0 for row in rows.values())
    assert all(row["cold_seconds"] > 0 for row in rows.values())
