"""The load benchmark runs, and its invariants hold: every run completes or fails cleanly, no
transcript breaks the pairing rule, no side effect is applied twice. A high failure rate makes
both outcomes, lost replies after a commit and compensations happen in a small run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_concurrent_runs_with_failing_model_calls_keep_the_invariants(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    options = ["--runs", "20", "--failure-rate", "0.5", "--seed", "7", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.load", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    figures = json.loads(out.read_text())

    assert figures["runs"] == 20
    assert figures["completed"] + figures["failed_cleanly"] == 20
    assert figures["failed_uncleanly"] == 0
    assert figures["invalid_transcripts"] == 0
    assert figures["duplicate_effects"] == 0
    # The faults really happened, and so did both outcomes and the undoing of effects.
    assert figures["model_faults"] > 0 and figures["effect_replies_lost"] > 0
    assert figures["completed"] > 0 and figures["failed_cleanly"] > 0
    assert figures["compensations_applied"] > 0
    assert figures["requests_checked"] > 20
    assert "duplicate effects: 0" in done.stdout
