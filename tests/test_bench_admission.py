"""The admission benchmark runs in a quick mode, and its figures say what they must: with the
provider's limit configured, on one worker or split over two, no 429 and never more calls at
once than the limit; without admission control, the same runs do meet 429s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_admission_benchmark_runs_and_admitted_setups_see_no_429(tmp_path: Path) -> None:
    out = tmp_path / "admission.json"
    only = ["--only", "before", "--only", "concurrency 5", "--only", "2 workers"]
    done = subprocess.run(
        # Calls of a second: the 20 runs' calls overlap past the limit even on a busy machine
        # (at 200 ms, one run of CI under load 7 never had six in flight, so no 429 came).
        [
            sys.executable,
            "-m",
            "bench.admission",
            "--quick",
            "--latency",
            "1.0",
            *only,
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = {row["setup"]: row for row in json.loads(out.read_text())}
    assert set(rows) == {"before", "concurrency 5", "2 workers x 2"}

    for name in ("concurrency 5", "2 workers x 2"):
        row = rows[name]
        assert row["refused_429"] == 0 and row["failed_runs"] == 0, row
        assert row["served"] == 2 * row["runs"] == 40, row
        assert row["peak_in_flight"] <= 5, row
        assert row["seconds"] >= row["ideal_seconds"], row
    assert rows["2 workers x 2"]["peak_in_flight"] <= 4
    before = rows["before"]
    assert before["refused_429"] > 0, "the fake never refused: the comparison shows nothing"
    assert before["served"] + before["refused_429"] == before["requests"]
    assert "| concurrency 5 | AGENT_MODEL_CONCURRENCY_OPENAI=5 | 0 (0 / 0) |" in done.stdout
