"""The scaling benchmark runs the workload on one and then two worker processes started as a
deployment starts them (`worker.py --tools bench.workload`), and reads their CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_scaling_bench_runs_on_one_and_two_worker_processes(tmp_path: Path) -> None:
    out = tmp_path / "scaling.json"
    subprocess.run(
        [sys.executable, "bench/scaling.py", "--runs", "4", "--steps", "2", "--delay", "0.05",
         "--json", str(out)],
        cwd=REPO, check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    rows = json.loads(out.read_text())
    assert [row["worker_processes"] for row in rows] == [1, 2]
    for row in rows:
        assert row["runs"] == 4 and row["seconds"] > 0
        # The runs' work was done by the worker processes measured, not by this one.
        assert row["worker_cpu_seconds"] > 0 and row["server_cpu_seconds"] > 0, row
