"""The streaming benchmark runs, and shows what docs/providers.md claims: streaming adds no
event to the history, while the reader gets the text as it is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_streaming_adds_no_history_event(tmp_path: Path) -> None:
    out = tmp_path / "streaming.json"
    subprocess.run(
        [
            sys.executable,
            "bench/streaming.py",
            "--steps",
            "2",
            "--text-chars",
            "600",
            "--json",
            str(out),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=180,
    )
    off, on = json.loads(out.read_text())
    assert (off["stream"], on["stream"]) == (False, True)
    assert on["steps"] == off["steps"] == 2
    assert on["events"] == off["events"]
    # The same bytes, but for `"stream":true` in each model call's settings (and the lengths
    # that grow with it): tens of bytes a step, where a signal per delta batch is hundreds.
    assert 0 < on["history_bytes"] - off["history_bytes"] <= 64 * on["steps"]
    assert off["deltas_read"] == 0 and on["deltas_read"] >= 1
