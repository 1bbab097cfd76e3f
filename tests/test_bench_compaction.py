"""The compaction benchmark runs, and shows what it claims: fewer tokens, a cache lost for them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEPS = 16


def test_compaction_saves_tokens_and_loses_cache_and_late_it_costs_more(tmp_path: Path) -> None:
    out = tmp_path / "compaction.json"
    subprocess.run(
        [sys.executable, "bench/compaction.py", "--steps", str(STEPS), "--json", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    rows = {row["label"]: row for row in json.loads(out.read_text())}
    assert set(rows) == {"none", "window", "summary", "window, late", "summary, late"}
    none = rows["none"]
    assert none["max_context_tokens"] is None and none["compactions"] == 0
    assert none["step_calls"] == STEPS and none["summary_calls"] == 0

    for label in ("window", "summary", "window, late", "summary, late"):
        row = rows[label]
        assert row["step_calls"] == STEPS, label
        # Every compaction is in the run's result, with both sides of its trade.
        assert row["compactions"] == len(row["compaction_records"]) >= 1, label
        for record in row["compaction_records"]:
            assert record["tokens_removed"] > 0, (label, record)
            assert record["cached_tokens_lost"] > 0, (label, record)
            # The edit breaks the prefix: at least the cache's minimum is lost, measurably.
            assert record["simulated_cached_tokens_lost"] >= 1024, (label, record)
            assert record["tokens_after"] < record["tokens_before"], (label, record)
        assert row["input_tokens"] < none["input_tokens"], label
        assert row["largest_call_tokens"] < none["largest_call_tokens"], label
        assert row["cached_share"] < none["cached_share"], label
        expected_summaries = row["compactions"] if row["policy"] == "summary" else 0
        assert row["summary_calls"] == expected_summaries, label

    # Compacting a few times: far fewer tokens, and cheaper even against a warm cache.
    for label in ("window", "summary"):
        row = rows[label]
        assert row["compactions"] >= 2, label
        assert row["input_tokens"] < 0.7 * none["input_tokens"], label
        assert row["cost_usd_with_cache"] < none["cost_usd_with_cache"], label

    # Seed 000: one compaction before the final call saves tokens on that call only, and the
    # cache it breaks costs more than it saves.
    late = rows["window, late"]
    assert [c["step"] for c in late["compaction_records"]] == [STEPS]
    assert late["simulated_cached_tokens_lost"] > late["tokens_removed"]
    assert late["cost_usd_no_cache"] < none["cost_usd_no_cache"]
    assert late["cost_usd_with_cache"] > none["cost_usd_with_cache"]
    assert rows["summary, late"]["cost_usd_with_cache"] > late["cost_usd_with_cache"]
