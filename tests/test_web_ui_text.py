"""What the run writes for the Web UI's Markdown renderer, without a server: code spans that
hold any text, plain text that stays plain, and a summary that stays one bounded line."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from durable_agent.activities.pricing import DEMO_PRICE
from durable_agent.workflows.decisions import ApprovalCriteria, JudgeVerdict, ToolApproval
from durable_agent.workflows.inputs import (
    AgentInput,
    AutoMode,
    CodeMode,
    Limits,
    ToolApprovalPolicy,
)
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.reporting import (
    CANCELLED,
    calls_markdown,
    code_span,
    cost_text,
    current_details,
    judged_markdown,
    markdown_text,
    plan_markdown,
    verdict_line,
)
from durable_agent.workflows.run_summary import SUMMARY_CHARS, run_details, run_summary
from durable_agent.workflows.usage import Usage


def test_a_code_span_holds_backticks_and_quotes_as_they_are() -> None:
    assert code_span('{"a": "b"}') == '`{"a": "b"}`'
    assert code_span("a`b") == "``a`b``"
    assert code_span("`x`") == "`` `x` ``"
    assert code_span("one\ntwo") == "`one two`"


def test_plain_text_is_escaped_and_kept_on_one_line() -> None:
    assert markdown_text("*not* _emphasis_ <b> $1 / $4\nnext") == (
        "\\*not\\* \\_emphasis\\_ \\<b\\> \\$1 / \\$4 next"
    )
    assert cost_text(0.01234) == "\\$0.0123"
    assert cost_text(None).startswith("unknown")


def test_what_is_not_printable_shows_as_its_escape_and_reorders_nothing() -> None:
    """A bidi override in a plan step reversed what the person read in the Web UI."""
    assert markdown_text("Refund \u202e01 order\x1b[2K") == "Refund \\\\u202e01 order\\\\x1b\\[2K"
    pasted = code_span('{"call_id": "c\u202e1"}')
    assert pasted == '`{"call_id": "c\\u202e1"}`'
    # In the JSON a person pastes, the escape is the same character: the call is found.
    assert json.loads(pasted.strip("`")) == {"call_id": "c\u202e1"}


def test_a_plans_steps_are_a_numbered_list_and_the_input_to_paste_is_code() -> None:
    what, body = plan_markdown(2, ["Look *it* up", "Cancel it"])
    assert what == " to approve plan v2 (2 steps):"
    assert "1. Look \\*it\\* up\n2. Cancel it" in body
    assert '`{"approve": true, "version": 2}`' in body
    details = current_details("awaiting_approval", "ignored line", (what, body), 3, Usage())
    assert details.startswith("**Waiting for a person** to approve plan v2 (2 steps):")
    assert "Steps done: 3 · cost so far: \\$0.0000" in details
    assert "may lag" not in details  # only while running


def test_the_summary_is_the_label_and_the_prompts_first_line_bounded() -> None:
    assert run_summary(AgentInput(prompt="\n  Where is it?  \nmore", label="x")) == (
        "x: Where is it?"
    )
    long = run_summary(AgentInput(prompt="y" * 500))
    assert len(long) == SUMMARY_CHARS and long.endswith("…")
    assert run_summary(AgentInput(prompt="   ")) == "(empty prompt)"


def test_the_details_name_the_model_limits_tools_and_policy() -> None:
    details = run_details(
        AgentInput(
            prompt="p",
            tools=["get_order", "cancel_order"],
            model=ModelSettings(price=DEMO_PRICE),
            limits=Limits(max_steps=7, max_cost_usd=2.5),
            tool_approval=ToolApprovalPolicy(allow=["cancel_order"]),
            sub_agents=True,
        )
    )
    assert "`scripted` `scripted`" in details and "made-up price" in details
    assert "7 steps, \\$2.5" in details
    assert "`get_order`, `cancel_order`; also `delegate` (sub-agents)" in details
    assert "except `cancel_order`" in details
    assert "run_code" not in details
    coded = run_details(
        AgentInput(prompt="p", tools=["get_order"], code_mode=CodeMode(max_calls=7))
    )
    assert "`get_order`; also `run_code` (code mode: a script calls the tools" in coded
    assert "at most 7 calls, 5 s of execution and 64 MiB a script)" in coded


def test_a_cancelled_run_says_cancelled_though_its_agent_status_is_failed() -> None:
    details = current_details("failed", CANCELLED, None, 2, Usage(cost_usd=0.5))
    assert details.startswith("**Cancelled**, after undoing its side effects")
    assert "cost: \\$0.5000" in details


def test_auto_modes_verdicts_are_plain_text_under_their_call() -> None:
    injected = "approve *now* <script>x</script> [x](javascript:y)"
    approval = ToolApproval(
        call_id="call_1_1",
        tool="send_email",
        arguments='{"to": "a@b.com"}',
        step=1,
        asked_at=datetime(2026, 12, 5, tzinfo=UTC),
        verdict=JudgeVerdict(
            criteria="emails",
            decision="approve",
            confidence=0.55,
            min_confidence=0.8,
            reason=injected,
            outcome="escalated",
        ),
    )
    judging = approval.model_copy(update={"call_id": "call_1_2", "verdict": None, "judging": True})
    _, body = calls_markdown([(approval, False), (judging, False)], 80)
    line = "   - judge (emails): approve (confidence 0.55), under the criteria's 0.80: "
    assert line + "a person decides: approve \\*now\\* \\<script\\>x\\</script\\>" in body
    assert "\\[x\\](javascript:y)" in body
    assert "   - auto mode's judge is reviewing it; a person may decide it first" in body
    assert verdict_line(approval.verdict.model_copy(update={"outcome": "late"})).endswith(  # type: ignore[union-attr]
        "came after the call was decided: ignored: " + injected
    )
    approved = approval.verdict.model_copy(update={"outcome": "approved"})  # type: ignore[union-attr]
    decided = judged_markdown(approval, approved, 80)
    assert decided.startswith('`send_email` (call `call_1_1`) with `{"to": "a@b.com"}`')
    assert ": approved: approve \\*now\\*" in decided


def test_the_details_say_which_calls_a_judge_decides_first() -> None:
    policy = ToolApprovalPolicy(
        auto_mode=AutoMode(
            judge=ModelSettings(provider="openai", model="gpt-4o-mini"),
            criteria={"emails": ApprovalCriteria(effect="sends an email")},
            tools={"send_email": "emails"},
            default="emails",
        )
    )
    details = run_details(AgentInput(prompt="p", tools=["send_email"], tool_approval=policy))
    assert (
        "auto mode: a judge (`openai` `gpt-4o-mini`) decides first the calls of `send_email`, "
        "and any other, and hands a person those it is not sure of"
    ) in details
