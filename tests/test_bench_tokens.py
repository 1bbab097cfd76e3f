"""The token benchmark runs, and shows what it claims: superlinear input, a cache it keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_input_grows_faster_than_steps_and_a_stable_prefix_is_cached(tmp_path: Path) -> None:
    out = tmp_path / "tokens.json"
    subprocess.run(
        [sys.executable, "bench/tokens.py", "--steps", "4", "8", "16", "--json", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    rows = {row["steps"]: row for row in json.loads(out.read_text())}

    # Doubling the steps more than doubles the input: every call resends the transcript.
    assert rows[8]["input_tokens"] > 2.4 * rows[4]["input_tokens"]
    assert rows[16]["input_tokens"] > 2.8 * rows[8]["input_tokens"]
    # The byte-stable prefix is served from cache more and more; a clock in the prompt kills it.
    assert rows[16]["cached_share"] > 0.5
    assert rows[16]["cached_share"] > rows[8]["cached_share"]
    assert rows[16]["cached_share_with_clock_in_system"] == 0
    assert rows[16]["input_cost_usd_with_cache"] < rows[16]["input_cost_usd_no_cache"]
