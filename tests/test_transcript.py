"""The pairing rule, enforced by the transcript type at append time."""

from __future__ import annotations

import pytest

from durable_agent.workflows.transcript import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    Transcript,
    TranscriptError,
    UserMessage,
)


def two_calls() -> AssistantMessage:
    return AssistantMessage(
        tool_calls=(
            ToolCall(id="call_a", name="get_tracking", arguments='{"order_id": 1042}'),
            ToolCall(id="call_b", name="get_customer", arguments='{"email": "a@b.com"}'),
        )
    )


def result(call_id: str, name: str = "get_tracking") -> ToolResult:
    return ToolResult(tool_call_id=call_id, tool_name=name, content="ok")


def started() -> Transcript:
    transcript = Transcript()
    transcript.append(UserMessage(content="where is order 1042"))
    transcript.append(two_calls())
    return transcript


def test_results_in_call_order_complete_the_group() -> None:
    transcript = started()
    assert [c.id for c in transcript.pending_calls()] == ["call_a", "call_b"]
    transcript.append(result("call_a"))
    transcript.append(result("call_b", "get_customer"))
    assert transcript.is_complete()
    transcript.append(UserMessage(content="thanks"))


def test_a_message_before_every_result_names_the_missing_id() -> None:
    transcript = started()
    transcript.append(result("call_a"))
    with pytest.raises(TranscriptError, match=r"missing their results: 'call_b' \(get_customer\)"):
        transcript.append(UserMessage(content="and?"))
    with pytest.raises(TranscriptError, match="missing their results"):
        transcript.append(AssistantMessage(content="done"))


def test_unknown_and_out_of_order_ids_are_refused() -> None:
    transcript = started()
    with pytest.raises(TranscriptError, match=r"unknown id 'call_x'.*must answer 'call_a'"):
        transcript.append(result("call_x"))
    with pytest.raises(TranscriptError, match=r"out of call order 'call_b'"):
        transcript.append(result("call_b"))
    assert len(transcript.messages) == 2  # refused appends leave nothing behind


def test_a_result_with_no_call_waiting_is_refused() -> None:
    transcript = Transcript()
    transcript.append(UserMessage(content="hi"))
    with pytest.raises(TranscriptError, match="no tool call is waiting"):
        transcript.append(result("call_a"))
    transcript = started()
    transcript.append(result("call_a"))
    transcript.append(result("call_b"))
    with pytest.raises(TranscriptError, match="no tool call is waiting"):
        transcript.append(result("call_b"))


def test_repeated_or_empty_call_ids_are_refused() -> None:
    transcript = Transcript(messages=[UserMessage(content="hi")])
    call = ToolCall(id="same", name="t", arguments="{}")
    with pytest.raises(TranscriptError, match="repeat"):
        transcript.append(AssistantMessage(tool_calls=(call, call)))
    with pytest.raises(TranscriptError, match="empty id"):
        transcript.append(AssistantMessage(tool_calls=(call.model_copy(update={"id": ""}),)))


def test_a_transcript_starts_with_the_user() -> None:
    with pytest.raises(TranscriptError, match="starts with the user"):
        Transcript().append(AssistantMessage(content="hello"))


def test_a_loaded_transcript_is_checked_too() -> None:
    with pytest.raises(ValueError, match="missing their results: 'call_b'"):
        Transcript(
            messages=[
                UserMessage(content="q"),
                two_calls(),
                result("call_a"),
                UserMessage(content="x"),
            ]
        )
    # And the round trip through JSON (how it travels through Temporal) keeps it whole.
    transcript = started()
    copy = Transcript.model_validate_json(transcript.model_dump_json())
    assert copy == transcript and [c.id for c in copy.pending_calls()] == ["call_a", "call_b"]


def test_messages_cannot_be_edited() -> None:
    transcript = started()
    with pytest.raises(ValueError, match="frozen"):
        transcript.messages[0].content = "something else"  # type: ignore[misc]
