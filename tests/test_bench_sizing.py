"""The sizing model's arithmetic on a fixed input, which limit it says binds first, what the
workloads cost a month and a conversation by turn, its command line, and docs/sizing.md as the
committed input generates it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.sizing import (
    DEFAULT_INPUT,
    SCENARIOS,
    Figure,
    action_cost,
    inputs_from,
    main,
    model,
)
from durable_agent.activities.pricing import SHIPPED_PRICES

REPO = Path(__file__).resolve().parent.parent


def capacity_input() -> dict[str, Any]:
    """A capacity JSON with round figures: 5 actions a run and 2 a step, and so on."""
    per_step = {"events": 12, "bytes": 4000, "actions": 2, "workflow_tasks": 2, "activities": 2,
                "transactions": 8}  # fmt: skip
    fixed = {"events": 24, "bytes": 9000, "actions": 5, "workflow_tasks": 2, "activities": 1,
             "transactions": 7}  # fmt: skip
    level = {"queued": False, "run": {"seconds": {"wall": 3.0, "model_running": 2.2,
                                                  "tools_running": 0.3}}}  # fmt: skip
    return {
        "taken_at": "2026-12-02T16:00:00+00:00",
        "steps": 10,
        "delay_seconds": 0.2,
        "sandbox": "fast",
        "machine": {"cpus": 2},
        "processes": [
            {
                "worker_processes": 1,
                "worker_rss_idle_bytes": 200e6,
                "message_store_bytes_per_run": 10_000,
                "probe": {"per_step": per_step, "fixed": fixed},
                "levels": [level],
                "summary": {
                    "worker_cpu_seconds_per_step": 0.01,
                    "server_cpu_seconds_per_step": 0.02,
                    "memory_bytes_per_cached_run": 500_000,
                    "sustainable_runs_per_second": 5,
                },
            }
        ],
    }


TEN_A_SECOND = {"runs_a_day": 864_000, "steps": 10}
"""10 runs a second on average."""


def test_the_arithmetic_on_a_fixed_input() -> None:
    inputs = inputs_from(capacity_input(), None)
    r = model(inputs, TEN_A_SECOND, "openai")
    peak = 3 * 10  # the peak-to-average input
    assert r["units_a_second_average"] == 10 and r["units_a_second_peak"] == peak
    cloud = r["temporal_cloud"]
    # actions a run = fixed + a step's x steps; a second = runs a day x actions a run / 86,400.
    assert cloud["actions_a_unit"] == 5 + 2 * 10
    assert cloud["actions_a_second_average"] == 864_000 * 25 / 86_400
    assert cloud["actions_a_second_peak"] == peak * 25
    assert cloud["actions_a_month"] == pytest.approx(864_000 * 30.4 * 25)
    assert cloud["actions_dollars_a_month"] == action_cost(cloud["actions_a_month"])
    # A run: 11 model calls of 2 s, 10 tools of 0.2 s, and the measured rest: (3.0-2.2-0.3)/10.
    assert r["run_seconds"] == pytest.approx(11 * 2.0 + 10 * (0.2 + 0.05))
    workers = r["workers"]
    assert workers["open_runs"] == pytest.approx(peak * r["run_seconds"])  # Little's law
    # 300 steps a second x 10 ms of worker CPU, at 70% utilisation.
    assert workers["worker_cores"] == pytest.approx(300 * 0.01 / 0.7)
    assert workers["processes_for_cpu"] == 5
    calls = r["model_calls"]
    assert calls["calls_a_second_peak"] == peak * 11
    assert calls["requests_a_minute_peak"] == peak * 11 * 60
    assert calls["concurrent_calls_peak"] == peak * 11 * 2.0
    hosted = r["self_hosted"]
    assert hosted["transactions_a_second_peak"] == peak * (7 + 8 * 10)
    assert hosted["history_events_a_run"] == 24 + 12 * 10
    # 2,610 transactions a second at 100 a shard: 26.1 shards, so 32.
    assert hosted["shards_needed"] == 32
    # 864,000 runs a day x 1,000 B a step x 10 steps x 7 days x 2 (row overhead).
    assert r["store_gb"] == pytest.approx(864_000 * 1000 * 10 * 7 * 2 / 1e9)
    assert r["limits"] == sorted(r["limits"], key=lambda row: -row["utilisation"])
    assert r["binds_first"] == r["limits"][0]["limit"]
    spend = r["spend"]
    # Five worker processes, one vCPU each (their 1.4 GB fit in 4 GB a vCPU), all month.
    assert spend["worker_vcpus"] == 5
    assert spend["workers_usd_a_month"] == pytest.approx(5 * 0.048 * 730)
    # 300 steps a second x 20 ms of the dev server's CPU x 3 for a cluster, at 70%: 25.7 vCPUs.
    assert spend["cluster_vcpus"] == 26
    assert spend["total_usd_a_month_self_hosted"] == pytest.approx(
        spend["model_usd_a_month"] + spend["self_hosted_usd_a_month"] + spend["workers_usd_a_month"]
    )


def test_action_cost_follows_the_published_tiers() -> None:
    # The pricing page's own example: 11.25M actions cost $525.
    assert action_cost(11.25e6) == pytest.approx(525)
    assert action_cost(5e6) == pytest.approx(250)
    assert action_cost(0) == 0


def test_which_limit_binds_first_follows_the_input() -> None:
    inputs = inputs_from(capacity_input(), None)
    # 750 actions a second at the peak against the namespace's 500.
    assert model(inputs, TEN_A_SECOND, "openai")["binds_first"].startswith("Temporal Cloud")
    # On Anthropic's tier, 19,800 requests a minute against 4,000.
    assert model(inputs, TEN_A_SECOND, "anthropic")["binds_first"] == "Anthropic requests a minute"
    raised = inputs | {"cloud_aps_limit": Figure(10_000, "assumed", "a raised limit")}
    # Then requests: 19,800 a minute against 30,000 (tokens: 22.9M against 150M).
    assert model(raised, TEN_A_SECOND, "openai")["binds_first"] == "OpenAI requests a minute"
    # At 100 steps a call carries ten times the transcript: tokens bind before requests.
    hundred_steps = model(raised, {"runs_a_day": 864_000, "steps": 100}, "openai")
    assert hundred_steps["binds_first"] == "OpenAI tokens a minute"
    assert hundred_steps["limits"][0]["utilisation"] > 1


def committed_inputs(model_name: str = "gpt-4o-mini") -> dict[str, Figure]:
    return inputs_from(json.loads(DEFAULT_INPUT.read_text()), None, model_name)


def values(inputs: dict[str, Figure]) -> dict[str, float]:
    return {name: figure.value for name, figure in inputs.items()}


TEN_STEPS = SCENARIOS["1M runs a day, 10 steps"]
CONVERSATIONS = SCENARIOS["10k conversations open for a week"]


def test_a_million_ten_step_runs_spend_most_on_the_model() -> None:
    inputs = committed_inputs()
    v = values(inputs)
    spend = model(inputs, TEN_STEPS, "openai")["spend"]
    # The token curve: the k-th of a run's 11 calls sends a + b x k tokens.
    a_run = sum(v["input_tokens_a_call"] + v["input_tokens_a_step"] * k for k in range(11))
    a_month = 1e6 * 30.4 * a_run
    price, cached_price = (
        v["model_input_usd_a_million_tokens"],
        v["model_cached_input_usd_a_million_tokens"],
    )
    no_cache = a_month * price / 1e6
    share = v["uncached_input_share"]
    with_cache = a_month * (share * price + (1 - share) * cached_price) / 1e6
    assert 57_000 < no_cache < 58_500 and 39_000 < with_cache < 40_500  # gpt-4o-mini's prices
    assert spend["model_input_usd_a_month_without_cache"] == pytest.approx(no_cache)
    assert spend["model_input_usd_a_month"] == pytest.approx(with_cache)
    assert spend["model_cache_write_usd_a_month"] == 0  # OpenAI charges nothing to write
    output = 1e6 * 30.4 * (10 * v["output_tokens_a_step"] + v["output_tokens_an_answer"])
    assert spend["model_output_usd_a_month"] == pytest.approx(
        output * v["model_output_usd_a_million_tokens"] / 1e6
    )
    model_usd = spend["model_usd_a_month"]
    assert model_usd == pytest.approx(with_cache + spend["model_output_usd_a_month"])
    assert model_usd > spend["temporal_cloud_usd_a_month"] > spend["self_hosted_usd_a_month"]
    assert spend["largest_cost_cloud"] == spend["largest_cost_self_hosted"] == "model calls"
    assert spend["total_usd_a_month_cloud"] == pytest.approx(
        model_usd + spend["temporal_cloud_usd_a_month"] + spend["workers_usd_a_month"]
    )


def test_output_and_cache_write_prices_move_the_model_total() -> None:
    inputs = inputs_from(capacity_input(), None, "claude-sonnet-4-6")
    v = values(inputs)
    base = model(inputs, TEN_A_SECOND, "anthropic")["spend"]["model_usd_a_month"]
    runs = 864_000 * 30.4

    def total_with(name: str, price: float) -> float:
        changed = inputs | {name: Figure(price, "assumed", "a test's")}
        return model(changed, TEN_A_SECOND, "anthropic")["spend"]["model_usd_a_month"]

    output_a_run = 10 * v["output_tokens_a_step"] + v["output_tokens_an_answer"]
    price = v["model_output_usd_a_million_tokens"]
    assert total_with("model_output_usd_a_million_tokens", 2 * price) - base == pytest.approx(
        runs * output_a_run * price / 1e6
    )
    # Each token of a run is written once: as many as its last call sends.
    written_a_run = v["input_tokens_a_call"] + 10 * v["input_tokens_a_step"]
    price = v["model_cache_write_usd_a_million_tokens"]
    assert total_with("model_cache_write_usd_a_million_tokens", 2 * price) - base == pytest.approx(
        runs * written_a_run * price / 1e6
    )


def test_an_openai_model_that_bills_cache_writes_pays_for_them() -> None:
    """GPT-5.6 and later write what they cache at 1.25x input: with a cache-write price, the
    uncached share of an OpenAI run is written at it, not read at the input price."""
    inputs = committed_inputs()
    v = values(inputs)
    base = model(inputs, TEN_STEPS, "openai")["spend"]
    price = 1.25 * v["model_input_usd_a_million_tokens"]
    billed = inputs | {
        "model_cache_write_usd_a_million_tokens": Figure(price, "assumed", "a GPT-5.6 model's")
    }
    spend = model(billed, TEN_STEPS, "openai")["spend"]
    assert spend["model_uncached_input_usd_a_month"] == 0
    assert spend["model_cache_write_usd_a_month"] == pytest.approx(
        1.25 * base["model_uncached_input_usd_a_month"]
    )
    assert spend["model_cached_input_usd_a_month"] == base["model_cached_input_usd_a_month"]
    assert "written to it, at the cache-write price" in spend["model_cache"]


@pytest.mark.parametrize("model_name", ["gpt-4o-mini", "claude-sonnet-4-6"])
def test_a_conversation_by_turn_grows_without_compaction_and_is_bounded_with_it(
    model_name: str,
) -> None:
    provider = "anthropic" if model_name.startswith("claude") else "openai"
    inputs = committed_inputs(model_name)
    v = values(inputs)
    r = model(inputs, CONVERSATIONS, provider)
    by_turn = r["model_cost_by_turn"]
    without, with_ = by_turn["without_compaction"], by_turn["with_compaction"]
    assert by_turn["turns"] == 70 == len(without["model_usd_by_turn"])
    # Turn 70 sends about 31,000 tokens a call to turn 1's 600.
    assert without["model_usd_last_turn"] > 10 * without["model_usd_turn_1"]
    assert without["model_usd_a_conversation"] == pytest.approx(sum(without["model_usd_by_turn"]))
    assert r["spend"]["model_usd_a_month"] == pytest.approx(without["model_usd_a_month"])
    # With compaction no prompt passes the threshold, so no turn costs more than its four calls
    # and a summary, each of the threshold at the dearest input price.
    threshold = v["compaction_threshold_tokens"]
    assert with_["compactions"] > 0
    assert with_["largest_prompt_tokens"] <= threshold
    dearest = max(
        v["model_input_usd_a_million_tokens"], v["model_cache_write_usd_a_million_tokens"]
    )
    output = 3 * v["output_tokens_a_step"] + v["output_tokens_an_answer"] + v["summary_tokens"]
    bound = (5 * threshold * dearest + output * v["model_output_usd_a_million_tokens"]) / 1e6
    assert max(with_["model_usd_by_turn"]) <= bound
    assert with_["model_usd_last_turn"] < without["model_usd_last_turn"]
    # It pays from the turn the cumulative cost with it stays below the cost without.
    pays = by_turn["compaction_pays_from_turn"]
    spent_with = spent_without = 0.0
    turns = zip(with_["model_usd_by_turn"], without["model_usd_by_turn"], strict=True)
    for turn, (w, n) in enumerate(turns, 1):
        spent_with, spent_without = spent_with + w, spent_without + n
        assert (spent_with < spent_without) == (turn >= pays), turn


def test_a_late_compaction_needs_more_turns_to_pay_on_a_warm_cache() -> None:
    # Seed 000, at Claude Sonnet's prices: cached reads cost a tenth of the input, so on a warm
    # cache what a compaction saves a call is small and it needs more calls after it to pay.
    inputs = committed_inputs("claude-sonnet-4-6")
    latest = model(inputs, CONVERSATIONS, "anthropic")["model_cost_by_turn"][
        "latest_turn_a_compaction_pays"
    ]
    assert latest["cache_warm_between_turns"] < latest["cache_cold_between_turns"] < 70


REQUIRED_USD = [
    "model_usd_a_month",
    "model_input_usd_a_month",
    "model_uncached_input_usd_a_month",
    "model_cached_input_usd_a_month",
    "model_cache_write_usd_a_month",
    "model_output_usd_a_month",
    "model_input_usd_a_month_without_cache",
    "temporal_cloud_usd_a_month",
    "self_hosted_usd_a_month",
    "workers_usd_a_month",
    "total_usd_a_month_cloud",
    "total_usd_a_month_self_hosted",
]


def written_json(tmp_path: Path, *options: str) -> dict[str, Any]:
    path = tmp_path / "sizing.json"
    assert main([*options, "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_the_json_names_each_cost_in_dollars(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = written_json(tmp_path)
    for r in results.values():
        spend = r["spend"]
        assert spend["model"] == "gpt-4o-mini"
        assert all(spend[name] >= 0 for name in REQUIRED_USD)
        assert spend["largest_cost_cloud"] in ("model calls", "Temporal Cloud", "workers")
    by_turn = results["10k conversations open for a week"]["model_cost_by_turn"]
    for side in ("without_compaction", "with_compaction"):
        assert by_turn[side].keys() >= {
            "model_usd_turn_1", "model_usd_turn_10", "model_usd_last_turn",
            "model_usd_a_conversation", "model_usd_a_month",
        }  # fmt: skip
    printed = capsys.readouterr().out
    assert printed.count("**Largest cost: model calls") == 3
    assert "**Compaction pays for itself from turn" in printed


def test_set_and_model_change_the_prices(tmp_path: Path) -> None:
    title = "1M runs a day, 10 steps"
    base = written_json(tmp_path)[title]["spend"]
    doubled = written_json(tmp_path, "--set", "model_output_usd_a_million_tokens=1.2")[title]
    assert doubled["spend"]["model_output_usd_a_month"] == pytest.approx(
        2 * base["model_output_usd_a_month"]
    )
    other = written_json(tmp_path, "--model", "gpt-4.1-mini")[title]["spend"]
    assert other["model"] == "gpt-4.1-mini"
    ratio = SHIPPED_PRICES["gpt-4.1-mini"].input / SHIPPED_PRICES["gpt-4o-mini"].input
    assert other["model_input_usd_a_month_without_cache"] == pytest.approx(
        base["model_input_usd_a_month_without_cache"] * ratio
    )


def sizing(*options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.sizing", *options],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_docs_sizing_is_what_the_committed_input_generates() -> None:
    done = sizing()
    assert done.returncode == 0, done.stderr
    docs = (REPO / "docs" / "sizing.md").read_text()
    begin, end = "<!-- generated: python -m bench.sizing -->\n", "\n<!-- end generated -->"
    generated = docs.split(begin, 1)[1].split(end, 1)[0]
    assert generated == done.stdout.rstrip("\n"), "regenerate docs/sizing.md"
    assert json.loads(DEFAULT_INPUT.read_text())["processes"], DEFAULT_INPUT


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--set", "peak_to_average=high"], "--set peak_to_average=high: 'high' is not a number"),
        (["--set", "no_such=1"], "--set no_such=1: no input named 'no_such'"),
        (["--input", "missing.json"], "--input missing.json:"),
        (["--processes", "7"], "the input measured 1"),
        (["--model", "gpt-9"], "--model gpt-9: no price for it (priced: gpt-5, "),
        (["--model", "claude-haiku-4-5"], "anthropic's model; add --provider anthropic"),
        (["--set", "summary_tokens=-1"], "'-1' is not a number of zero or more"),
        (["--set", "model_input_usd_a_million_tokens=nan"], "'nan' is not a number of zero"),
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2(options: list[str], message: str) -> None:
    done = sizing(*options)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert message in line
