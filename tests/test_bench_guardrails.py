"""The guardrails benchmark runs every way it reports, each run's guardrail really checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.guardrails import WAYS

REPO = Path(__file__).resolve().parent.parent


def test_the_guardrails_benchmark_measures_every_way(tmp_path: Path) -> None:
    out = tmp_path / "guardrails.json"
    # Medians of 3 runs a way: one slow run of a loaded machine does not decide.
    options = ["--runs", "3", "--model-seconds", "0.1", "--guard-seconds", "0.3"]
    done = subprocess.run(
        [sys.executable, "bench/guardrails.py", *options, "--json", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )
    rows = {row["way"]: row["wall_seconds"] for row in json.loads(out.read_text())}

    assert list(rows) == list(WAYS)
    # A 0.3 s check where nothing else runs is waited for; beside a 0.1 s model call it is too,
    # less the call: so each way with a guardrail takes longer than none.
    assert all(rows[way] > rows["none"] + 0.15 for way in WAYS[2:]), rows
    assert rows["input, beside the call"] > rows["none"] + 0.1, rows
    assert "| none |" in done.stdout
