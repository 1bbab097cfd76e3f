"""OpenAI's Responses API, stateless: one `responses.create` per activity attempt, SDK retries off.

The workflow holds the conversation, so OpenAI keeps none of it: every call sends `store=False`
and the whole input, never a `previous_response_id`, and asks for the reasoning back encrypted
(`include=["reasoning.encrypted_content"]`). The reply's `reasoning` items are kept in the
transcript as reasoning parts, exactly as sent, and go back in their place, each before the item
it preceded: with `store=False` the API can only read a reasoning item from its encrypted
content ("Item with id 'rs_...' not found" otherwise). Another provider's reasoning is left out,
and the step's record counts it. Each `function_call` goes back with its `call_id`, followed by
its `function_call_output`. An assistant message goes back with its `phase` ("commentary",
"final_answer"), which the API asks to have resent on every assistant message for its newer
models: the transcript keeps it (`TextItem`), for this API only.

The key comes from OPENAI_API_KEY and the endpoint from OPENAI_BASE_URL, as for Chat Completions
(`provider="openai"`, which stays Chat Completions for OpenAI-compatible servers). Errors are
the Chat Completions adapter's, classified in `_http_errors`: the same SDK, the same classes, the
same retries.
"""

from __future__ import annotations

import json
from typing import Any

from openai.types.responses import Response
from temporalio.exceptions import ApplicationError

from ...workflows.activity_io import ModelRequest, ModelResponse
from ...workflows.specs import ToolSpec
from ...workflows.transcript import (
    AssistantMessage,
    Message,
    ReasoningPart,
    TextItem,
    ToolCall,
    ToolResult,
    UserMessage,
    reasoning_for,
)
from ...workflows.usage import Usage
from . import _streaming
from ._http_errors import cut_off_reply, incomplete_reply
from .openai_provider import openai_client, usage_count

PROVIDER = "OpenAI"
PROVIDER_ID, API = "openai-responses", "responses"
"""How the transcript tags the reasoning this adapter keeps."""
INCLUDE = ["reasoning.encrypted_content"]
MESSAGE_FIELDS_SENT_BACK = ("phase",)
"""The fields of an assistant message item the API asks to have sent back with its text. Not its
`id` (with store=false it names nothing the API could look up, and the API refuses ids it did not
store), nor `status` or the text parts' `annotations` and `logprobs` (the reply's own record)."""


async def complete(request: ModelRequest) -> ModelResponse:
    """Make one Responses API call for `request` and map the reply back."""
    settings = request.settings
    params, left_out = request_params_counted(request)
    async with openai_client(settings) as client:
        publisher = _streaming.current()
        if publisher is None:
            response = await client.responses.create(**params)
        else:
            async with client.responses.stream(**params) as stream:
                async for event in stream:
                    if event.type == "response.output_text.delta":
                        publisher.text(event.delta)
                    elif event.type == "response.reasoning_summary_text.delta":
                        publisher.reasoning(event.delta)
                # The response the stream assembled: the same as create's.
                try:
                    response = await stream.get_final_response()
                except RuntimeError as unfinished:  # failed, or cut short, mid-stream
                    raise incomplete_reply(
                        f"OpenAI's stream for model {settings.model!r} ended without a "
                        f"complete response: {unfinished}"
                    ) from None
    reply = to_model_response(response, request)
    return reply.model_copy(update={"reasoning_left_out": left_out}) if left_out else reply


def request_params(request: ModelRequest) -> dict[str, Any]:
    """The Responses parameters for `request`: the same request, the same bytes."""
    return request_params_counted(request)[0]


def request_params_counted(request: ModelRequest) -> tuple[dict[str, Any], int]:
    """The parameters, and how many of the transcript's reasoning parts they leave out."""
    settings = request.settings
    items, left_out = to_input_items(request.messages)
    params: dict[str, Any] = {"model": settings.model}
    if request.system:
        params["instructions"] = request.system
    params["input"] = items
    params["store"] = False
    params["include"] = list(INCLUDE)
    if request.tools:
        params["tools"] = [_tool(spec) for spec in request.tools]
        params["parallel_tool_calls"] = request.tool_choice is None
        if request.tool_choice is not None:  # a judge's verdict: that one call
            params["tool_choice"] = {"type": "function", "name": request.tool_choice}
    if settings.reasoning_effort is not None:
        params["reasoning"] = {"effort": settings.reasoning_effort}
    if settings.temperature is not None:
        params["temperature"] = settings.temperature
    if settings.max_output_tokens is not None:
        params["max_output_tokens"] = settings.max_output_tokens
    return params, left_out


def to_input_items(
    messages: list[Message] | tuple[Message, ...],
) -> tuple[list[dict[str, Any]], int]:
    """The transcript as Responses input items, and the reasoning parts left out (another
    provider's). No item carries an id but the reasoning items, which need theirs: with
    `store=False` an id names nothing the API could look up."""
    out: list[dict[str, Any]] = []
    left_out = 0
    for message in messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.content})
        elif isinstance(message, ToolResult):
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.content,
                }
            )
        else:
            items, dropped = reasoning_for(message, PROVIDER_ID, API)
            left_out += dropped
            for item in items:
                if isinstance(item, ReasoningPart):
                    out.append(json.loads(item.data))  # every field as the API sent it
                elif isinstance(item, str):
                    out += [
                        {"role": "assistant", "content": text, **fields}
                        for text, fields in _text_items(message, item)
                    ]
                else:
                    # Arguments go back exactly as the model wrote them, even when not valid JSON.
                    out.append(
                        {
                            "type": "function_call",
                            "call_id": item.id,
                            "name": item.name,
                            "arguments": item.arguments,
                        }
                    )
    return out, left_out


def _text_items(message: AssistantMessage, text: str) -> list[tuple[str, dict[str, Any]]]:
    """The message's text as the items it came in, each with the fields to send back with it;
    the text whole, with none, when it kept none of this API's. Each item takes its share of
    the text in order, and the last whatever is left (a text cut to fit the history is shorter
    than its items were)."""
    kept = [item for item in message.text_items if (item.provider, item.api) == (PROVIDER_ID, API)]
    if not kept:
        return [(text, {})]
    out: list[tuple[str, dict[str, Any]]] = []
    start = 0
    for number, item in enumerate(kept):
        end = len(text) if number == len(kept) - 1 else start + item.chars
        if text[start:end]:
            out.append((text[start:end], json.loads(item.fields)))
        start = end
    return out


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
        "strict": False,
    }


def to_model_response(response: Response, request: ModelRequest) -> ModelResponse:
    """The reply as a neutral response; an unusable reply raises `ProviderIncompleteReply`."""
    settings = request.settings
    model = getattr(response, "model", None) or settings.model
    try:
        texts: list[str] = []
        refusals: list[str] = []
        calls: list[ToolCall] = []
        thoughts: list[tuple[Any, bool, int]] = []
        # Per message item: its text, its refusal, and the fields to send back with it.
        messages: list[tuple[str, str, dict[str, Any]]] = []
        last_type: str | None = None
        for item in response.output:
            last_type = item.type
            if item.type == "reasoning":
                thoughts.append((item, bool(texts), len(calls)))
            elif item.type == "message":
                said = [part.text for part in item.content if part.type == "output_text"]
                refused = [part.refusal for part in item.content if part.type == "refusal"]
                texts += said
                refusals += refused
                fields = {
                    name: value
                    for name in MESSAGE_FIELDS_SENT_BACK
                    if (value := getattr(item, name, None)) is not None
                }
                messages.append(("".join(said), "".join(refused), fields))
            elif item.type == "function_call":
                # Arguments are kept as raw text, even invalid JSON: the workflow answers that.
                calls.append(
                    ToolCall(id=item.call_id or "", name=item.name, arguments=item.arguments or "")
                )
            # Other items (built-in tools) are never asked for and are left out.
        usage = response.usage
        input_details = usage.input_tokens_details if usage else None
        output_details = usage.output_tokens_details if usage else None
        # input_tokens counts cache reads and writes too, as Usage.input_tokens does.
        neutral_usage = Usage(
            input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0,
            cached_input_tokens=usage_count(input_details, "cached_tokens"),
            cache_write_tokens=usage_count(input_details, "cache_write_tokens"),
            reasoning_tokens=usage_count(output_details, "reasoning_tokens"),
        )
        status = response.status
        details = response.incomplete_details
        incomplete_reason = details.reason if details is not None else None
        failure = response.error.message if response.error is not None else None
    except ApplicationError:
        raise
    except (AttributeError, TypeError, ValueError, RecursionError) as error:
        raise incomplete_reply(
            f"OpenAI sent a reply for model {model!r} that could not be read: "
            f"{type(error).__name__}: {error}"
        ) from error

    # A refusal stands in for the text, so the loop sees why there is no answer.
    text = "".join(texts) or "".join(refusals) or None
    has_text = bool(text and text.strip())
    if status == "failed":
        raise incomplete_reply(f"OpenAI model {model!r} failed to reply: {failure or 'no reason'}")
    if status == "incomplete" and incomplete_reason == "max_output_tokens":
        raise cut_off_reply(
            PROVIDER,
            model,
            settings.max_output_tokens,
            in_tool_call=last_type == "function_call",
            has_text=has_text,
        )
    if status == "incomplete":
        raise incomplete_reply(
            f"OpenAI model {model!r} sent an incomplete reply ({incomplete_reason or 'no reason'})"
        )
    if not has_text and not calls:
        raise incomplete_reply(
            f"OpenAI model {model!r} sent an empty reply: no text and no tool calls "
            f"(status={status!r})"
        )
    reasoning = tuple(
        ReasoningPart(
            provider=PROVIDER_ID,
            api=API,
            model=model,
            kind="reasoning",
            data=json.dumps(item.to_dict(), ensure_ascii=False, separators=(",", ":")),
            # The text is one item, first: a reasoning item after a call or the text follows it.
            position=before + (1 if text and (after_text or before) else 0),
        )
        for item, after_text, before in thoughts
    )
    # The text is the items' texts joined (their refusals when none wrote text): each item's
    # share of it, with its fields, when any item has fields to send back.
    shares = [(said if texts else refused, fields) for said, refused, fields in messages]
    text_items = tuple(
        TextItem(
            provider=PROVIDER_ID,
            api=API,
            chars=len(share),
            fields=json.dumps(fields, ensure_ascii=False, separators=(",", ":")),
        )
        for share, fields in shares
        if share
    )
    if not any(fields for share, fields in shares if share):
        text_items = ()
    return ModelResponse(
        message=AssistantMessage(
            content=text, tool_calls=tuple(calls), reasoning=reasoning, text_items=text_items
        ),
        usage=neutral_usage,
        model=model,
        finish_reason="tool_calls" if calls else "stop",
        response_id=getattr(response, "id", None) or None,
    )
