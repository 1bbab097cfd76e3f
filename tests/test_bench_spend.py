"""bench/spend.py on small figures checked by hand: a run's tokens by the price they pay, a
conversation call by call with and without compaction, and where compaction pays."""

from __future__ import annotations

import pytest

from bench.spend import Tokens, conversation, dollars, pays_from, run_tokens, usd

V = {
    "input_tokens_a_call": 1000,
    "input_tokens_a_step": 100,
    "output_tokens_a_step": 10,
    "output_tokens_an_answer": 40,
    "uncached_input_share": 0.25,
    "turn_cache_warm_share": 0.0,
    "compaction_target_ratio": 0.6,
    "summary_tokens": 50,
    "model_input_usd_a_million_tokens": 1.0,
    "model_cached_input_usd_a_million_tokens": 0.1,
    "model_cache_write_usd_a_million_tokens": 1.25,
    "model_output_usd_a_million_tokens": 5.0,
}
OPENAI = V | {"model_cache_write_usd_a_million_tokens": 0.0}
"""An OpenAI model from before GPT-5.6: it charges nothing to write its cache."""


def test_a_run_on_openai_reads_the_measured_share_from_the_cache() -> None:
    # Two steps: three calls of 1,000, 1,100 and 1,200 tokens; two replies asking for tools and
    # the answer.
    assert run_tokens(OPENAI, 2, anthropic=False) == Tokens(uncached=825, cached=2475, output=60)


def test_an_openai_model_that_bills_cache_writes_writes_what_it_does_not_read() -> None:
    # GPT-5.6 and later: the same run, its uncached share written at the cache-write price.
    tokens = run_tokens(V, 2, anthropic=False)
    assert tokens == Tokens(written=825, cached=2475, output=60)
    assert usd(tokens, V)["model_cache_write_usd"] == pytest.approx(825 * 1.25 / 1e6)
    # A conversation's call on a cold cache writes its whole prompt, as on Anthropic.
    cold = conversation(V, turns=2, steps=1, anthropic=False, threshold=None)
    assert cold[1].tokens == Tokens(written=1100 + 100, cached=1100, output=50)


def test_a_run_on_anthropic_writes_each_token_once_and_reads_it_after() -> None:
    # The first call writes its 1,000; each later call reads the call before's prompt and
    # writes the 100 the step added.
    tokens = run_tokens(V, 2, anthropic=True)
    assert tokens == Tokens(cached=1000 + 1100, written=1200, output=60)
    priced = usd(tokens, V)
    assert priced["model_cached_input_usd"] == pytest.approx(2100 * 0.1 / 1e6)
    assert priced["model_cache_write_usd"] == pytest.approx(1200 * 1.25 / 1e6)
    assert priced["model_output_usd"] == pytest.approx(60 * 5.0 / 1e6)
    assert priced["model_usd"] == pytest.approx((210 + 1500 + 300) / 1e6)


def test_a_conversation_turn_by_turn_on_a_cold_and_a_warm_cache() -> None:
    # One step a turn: a call that asks for a tool, then the answer, 100 tokens later.
    cold = conversation(OPENAI, turns=2, steps=1, anthropic=False, threshold=None)
    assert cold[0].tokens == Tokens(uncached=1000 + 100, cached=1000, output=50)
    # The second turn starts on a cold cache, so its first call pays for all 1,100 tokens.
    assert cold[1].tokens == Tokens(uncached=1100 + 100, cached=1100, output=50)
    warm = conversation(OPENAI, turns=2, steps=1, anthropic=False, threshold=None, warm_share=1)
    assert warm[1].tokens == Tokens(uncached=100, cached=1100 + 1100, output=50)
    half = conversation(OPENAI, turns=2, steps=1, anthropic=False, threshold=None, warm_share=0.5)
    assert half[1].tokens == Tokens(uncached=650, cached=1650, output=50)
    on_anthropic = conversation(V, turns=2, steps=1, anthropic=True, threshold=None)
    assert on_anthropic[1].tokens == Tokens(written=1200, cached=1100, output=50)


def test_a_compaction_costs_a_summary_and_the_cache() -> None:
    turns = conversation(OPENAI, turns=2, steps=1, anthropic=False, threshold=1150)
    assert turns[0].compactions == 0
    # The second turn's answer would send 1,200 tokens, over 1,150: a summary call reads what
    # the prompt loses (1,200 - 690 + the 50-token summary) and the answer sends 690 (60% of
    # the threshold), all uncached: the edit invalidated the prefix.
    second = turns[1]
    assert second.compactions == 1
    assert second.summary == Tokens(uncached=560, output=50)
    assert second.tokens == Tokens(uncached=1100 + 560 + 690, output=10 + 50 + 40)
    assert second.largest_prompt == 1100


def test_a_late_compaction_on_a_warm_cache_costs_more_than_none() -> None:
    # Seed 000. Cached reads at a tenth of the price: compacting before the last call saves
    # 40% of its cheap reads and pays for a summary and a cold prompt.
    steps, turns = 3, 5
    last_answer = 1000 + 100 * steps * turns
    none = conversation(V, turns, steps, anthropic=True, threshold=None, warm_share=1)
    late = conversation(V, turns, steps, anthropic=True, threshold=last_answer - 1, warm_share=1)
    assert sum(t.compactions for t in late) == 1
    assert sum(dollars(t.tokens, V) for t in late) > sum(dollars(t.tokens, V) for t in none)


def test_compaction_pays_from_the_turn_it_stays_cheaper() -> None:
    # Cumulative: with 1, 2, 7, 8, 9 against 1, 2, 4, 7, 10: cheaper from turn 5 only.
    assert pays_from([1, 1, 5, 1, 1], [1, 1, 2, 3, 3]) == 5
    # Cheaper at turn 2, dearer again at 3: it has not paid until it stays cheaper.
    assert pays_from([1, 1, 3, 0.5], [1, 2, 1, 2]) == 4
    assert pays_from([1, 2], [1, 2]) is None
