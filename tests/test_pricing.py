"""Prices, costs and the cost budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent.activities import pricing
from durable_agent.cli import starter, worker
from durable_agent.workflows.errors import AgentConfigurationError
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import Price
from durable_agent.workflows.usage import Usage
from tests.helpers import call, run_agent, scripted_input, turn

SONNET = pricing.SHIPPED_PRICES["claude-sonnet-4-5"]


def test_cost_bills_each_kind_of_token_at_its_rate() -> None:
    usage = Usage(
        input_tokens=10_000, cached_input_tokens=6_000, cache_write_tokens=1_000, output_tokens=500
    )
    expected = (3_000 * 3.0 + 6_000 * 0.30 + 1_000 * 3.75 + 500 * 15.0) / 1_000_000
    assert pricing.cost_usd(usage, SONNET) == pytest.approx(expected)
    assert pricing.cost_usd(usage, None) is None


def test_dated_model_names_take_the_longest_known_prefix() -> None:
    assert pricing.price_for("gpt-4o-mini-2024-07-18") == pricing.SHIPPED_PRICES["gpt-4o-mini"]
    assert pricing.price_for("gpt-4o-2024-11-20") == pricing.SHIPPED_PRICES["gpt-4o"]
    assert pricing.price_for("claude-sonnet-4-5-20250929") == SONNET
    assert (
        pricing.price_for("claude-3-5-haiku-latest") == pricing.SHIPPED_PRICES["claude-3-5-haiku"]
    )
    assert pricing.price_for("my-local-llama") is None


def test_a_name_that_only_starts_like_a_known_one_is_another_model() -> None:
    """o3-mini costs about half of o3, claude-opus-4-8 a third of claude-opus-4: priced by the
    longest known prefix, each was billed (and held to max_cost_usd) at the wrong rate."""
    assert (
        pricing.price_for("o3-mini") == pricing.SHIPPED_PRICES["o3-mini"] != pricing.price_for("o3")
    )
    assert pricing.price_for("o3-mini-2025-01-31") == pricing.SHIPPED_PRICES["o3-mini"]
    for other in (
        "claude-opus-4-8",
        "claude-opus-4-8-20261001",
        "o3-pro",
        "gpt-5-codex",
        "gpt-4o-audio-preview",
    ):
        assert pricing.price_for(other) is None, other
    assert pricing.price_for("claude-opus-4-20250514") == pricing.SHIPPED_PRICES["claude-opus-4"]


def test_openai_prices_say_what_a_cache_write_costs() -> None:
    """Every OpenAI model in the table is from before GPT-5.6, which writes its cache for free:
    each says so (0, not a default), and where the table learnt it."""
    openai = {n: p for n, p in pricing.SHIPPED_PRICES.items() if not n.startswith("claude")}
    for name, price in openai.items():
        assert "cache_write" in price.model_fields_set and price.cache_write == 0, name
    source = pricing.OPENAI_CACHE_WRITES
    assert "developers.openai.com/api/docs/guides/prompt-caching" in source
    assert "2026" in source and "GPT-5.6" in source and "1.25x" in source


def test_a_later_version_is_not_priced_as_an_earlier_one() -> None:
    """gpt-5.6 bills cache writes and costs otherwise: gpt-5's price would be wrong twice.
    Unknown is not zero: the cost is None until a price file names it."""
    assert pricing.price_for("gpt-5.6-sol") is None
    assert pricing.price_for("gpt-5.5-2026-04-23") is None
    assert pricing.price_for("gpt-5-2025-08-07") == pricing.SHIPPED_PRICES["gpt-5"]
    assert pricing.price_for("gpt-4.1-mini-2025-04-14") == pricing.SHIPPED_PRICES["gpt-4.1-mini"]
    usage = Usage(input_tokens=4020, cache_write_tokens=4012, output_tokens=4)
    priced = Price(input=5.0, cached_input=0.5, cache_write=6.25, output=30.0)
    assert pricing.cost_usd(usage, priced) == pytest.approx((8 * 5 + 4012 * 6.25 + 4 * 30) / 1e6)


def test_a_price_file_overrides_the_shipped_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps(
            {
                "gpt-4o": {"input": 1.0, "cached_input": 0.5, "output": 2.0},
                "my-local-llama": {"input": 0.0, "cached_input": 0.0, "output": 0.0},
            }
        )
    )
    monkeypatch.setenv("AGENT_PRICES", str(prices))
    assert pricing.price_for("gpt-4o") == Price(input=1.0, cached_input=0.5, output=2.0)
    assert pricing.price_for("my-local-llama") is not None
    assert pricing.price_for("gpt-4o-mini") == pricing.SHIPPED_PRICES["gpt-4o-mini"]


def test_usage_with_an_unknown_cost_stays_unknown() -> None:
    priced = Usage(input_tokens=1, cost_usd=0.5)
    assert (priced + priced).cost_usd == 1.0
    assert (priced + Usage(input_tokens=1, cost_usd=None)).cost_usd is None


def _priced_input(limit: float | None, script_len: int = 5) -> AgentInput:
    agent_input = scripted_input(
        [
            turn(call("count_me", key=f"cost{limit}-{i}"), usage=Usage(input_tokens=1_000_000))
            for i in range(script_len)
        ],
        tools=["count_me"],
        limits=Limits(max_cost_usd=limit),
    )
    agent_input.model = agent_input.model.model_copy(
        update={"price": Price(input=1.0, cached_input=0.1, output=4.0)}
    )
    return agent_input


async def test_cost_per_step_and_the_cost_budget(client: Client, task_queue: str) -> None:
    run = await run_agent(client, task_queue, _priced_input(2.5))

    # $1 a call: the third call takes the run to $3, past $2.50, before its tool runs.
    assert run.failure.type == "AgentBudgetExceeded"
    assert "max_cost_usd=2.5 exceeded: the run has cost $3.000000" in run.failure.message
    details = run.failure.details[0]
    assert details["usage"]["cost_usd"] == 3.0
    assert [r["usage"]["cost_usd"] for r in details["step_records"]] == [1.0, 1.0, 1.0]


async def test_a_cost_budget_needs_a_price(client: Client, task_queue: str) -> None:
    # The scripted model has no price, so its cost is unknown, not zero.
    agent_input = scripted_input([turn(text="hi")], limits=Limits(max_cost_usd=1.0))
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentConfigurationError"
    assert "max_cost_usd=1 cannot be enforced" in run.failure.message


BAD_PRICE_FILES = {
    "missing.json": (None, "No such file or directory"),
    "not-json.json": ('{"gpt-4o": ', "not JSON"),
    "a-list.json": ("[]", "a JSON object of prices by model name"),
    "a-typo.json": (
        {"m": {"input": 1, "cached_input": 0.1, "output": 4, "cache_wirte": 1.25}},
        "m: unknown field 'cache_wirte'",
    ),
    "negative.json": ({"m": {"input": -1, "cached_input": 0, "output": 1}}, "m.input: "),
    "infinite.json": ('{"m": {"input": 1e400, "cached_input": 0, "output": 1}}', "m.input: "),
    "no-output.json": ({"m": {"input": 1, "cached_input": 0}}, "m.output: Field required"),
}


def _price_file(tmp_path: Path, name: str) -> tuple[Path, str]:
    content, said = BAD_PRICE_FILES[name]
    path = tmp_path / name
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path, said


@pytest.mark.parametrize("name", BAD_PRICE_FILES)
def test_a_price_file_that_cannot_be_used_is_refused_naming_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Each, read as it stood, would have billed wrongly or failed after a paid model call: a
    misspelt rate was a rate of 0, an unreadable file a traceback in the model activity."""
    path, said = _price_file(tmp_path, name)
    monkeypatch.setenv("AGENT_PRICES", str(path))
    with pytest.raises(AgentConfigurationError) as refused:
        pricing.price_table()
    assert refused.value.message.startswith(f"$AGENT_PRICES {path}: ")
    assert said in refused.value.message
    path.write_text(json.dumps({"m": {"input": 1, "cached_input": 0.1, "output": 4}}))
    assert pricing.price_table()["m"] == Price(input=1, cached_input=0.1, output=4)  # read again


def test_the_worker_and_a_self_contained_run_refuse_a_bad_price_file_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _price_file(tmp_path, "a-typo.json")
    monkeypatch.setenv("AGENT_PRICES", str(path))
    said = f"$AGENT_PRICES {path}: m: unknown field 'cache_wirte'"
    # Port 1: nothing listens there, and nothing gets as far as trying.
    assert worker.main(["--address", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.startswith(f"worker.py: error: {said} (the fields: ")
    assert starter.main(["Where is my order?", "--no-stream"]) == 2
    err = capsys.readouterr().err
    assert "embedded Temporal dev server" not in err
    assert err.splitlines()[-1].startswith(f"starter.py: error: {said}")


async def test_a_run_on_a_worker_with_a_bad_price_file_fails_before_its_first_model_call(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker an app built itself (build_worker, no check_worker): the model activity reads
    the file before it calls the model, and its error is not retried."""
    path, _ = _price_file(tmp_path, "not-json.json")
    monkeypatch.setenv("AGENT_PRICES", str(path))
    run = await run_agent(client, task_queue, scripted_input([turn(text="never said")]))

    assert run.failure.type == "AgentConfigurationError"
    assert f"$AGENT_PRICES {path}: not JSON" in run.failure.message
    assert run.trace == [] and run.transcript[-1].role == "user"
