"""The code-mode benchmark runs, and shows what it claims: fewer model calls and input tokens
than one call a turn, and no more history events a tool call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_code_mode_spends_fewer_model_calls_and_tokens_than_one_call_a_turn(
    tmp_path: Path,
) -> None:
    out = tmp_path / "code_mode.json"
    options = ["--lookups", "8", "--model-seconds", "0", "--json", str(out)]
    subprocess.run(
        [sys.executable, "bench/code_mode.py", *options],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=180,
    )
    rows = {row["way"]: row for row in json.loads(out.read_text())}
    plain, code = rows["plain"], rows["code mode"]

    assert (plain["model_calls"], code["model_calls"]) == (9, 2)
    assert plain["tool_calls"] == code["tool_calls"] == 8
    assert plain["input_tokens"] > 3 * code["input_tokens"]
    assert code["events_per_tool_call"] <= plain["events_per_tool_call"]
