"""A model reply too large to report: bounded before it leaves the activity, never failed.

Temporal refuses an activity result over its payload limit (2 MB): the SDK reports
`PayloadsTooLarge`, the call is retried, and every retry pays the provider again for the same
reply, until the run fails. A reply that large is rare (hundreds of thousands of tokens), but
the model was paid for it, so the call must succeed: the whole reply is kept in the result store
(shared by a fleet with AGENT_STORE_URL, sealed with the payload keys), and what the workflow
gets is cut to size, saying so and naming where the whole is:

- text over MAX_CONTENT_CHARS keeps its start and end, with a marker in the middle;
- a tool call whose arguments are over MAX_ARGUMENT_CHARS gets, instead of them, a JSON string
  saying so: not an object, so the workflow refuses the call without running the tool
  (workflows/dispatch.py), and the model reads why and may ask again;
- if that is still too large (a great many calls), the calls are dropped, and the text says so
  (and the reasoning with them: no provider needs the reasoning of a turn without calls).
"""

from __future__ import annotations

import json
import logging

from ..workflows.activity_io import ModelResponse
from ..workflows.transcript import AssistantMessage, ToolCall
from .result_store import result_store
from .tools import truncate_middle

logger = logging.getLogger(__name__)

MAX_REPLY_BYTES = 512 * 1024
"""A reply larger than this (as JSON) is bounded: Temporal's warning size for a payload, a
quarter of the 2 MB it refuses, which leaves room for the codec's envelope and for the next
request that carries the reply."""
MAX_CONTENT_CHARS = 64_000
MAX_ARGUMENT_CHARS = 16_000


def size_of(response: ModelResponse) -> int:
    return len(response.model_dump_json().encode())


def bounded_reply(response: ModelResponse) -> ModelResponse:
    """The response as it is when it fits; else cut to fit, the whole kept in the result store."""
    size = size_of(response)
    if size <= MAX_REPLY_BYTES:
        return response
    message = response.message
    ref = result_store().put(message.model_dump_json())
    logger.warning(
        "a model reply of %d bytes is over %d: cut, the whole kept in the result store as %s",
        size,
        MAX_REPLY_BYTES,
        ref,
    )
    where = f"; the whole reply is kept as {ref}"
    content = message.content
    if content is not None:
        content, _ = truncate_middle(content, MAX_CONTENT_CHARS, where)
    calls = tuple(_bounded_call(call, where) for call in message.tool_calls)
    # The reasoning stays: a provider refuses the calls' results without it.
    bounded = response.model_copy(
        update={"message": message.model_copy(update={"content": content, "tool_calls": calls})}
    )
    if size_of(bounded) <= MAX_REPLY_BYTES:
        return bounded
    note = f"[{len(calls)} tool calls dropped: the reply was {size} bytes{where}]"
    return response.model_copy(
        update={
            "message": AssistantMessage(content=f"{content or ''}\n\n{note}".strip(), tool_calls=())
        }
    )


def _bounded_call(call: ToolCall, where: str) -> ToolCall:
    if len(call.arguments) <= MAX_ARGUMENT_CHARS:
        return call
    refused = json.dumps(
        f"arguments of {len(call.arguments)} characters, over {MAX_ARGUMENT_CHARS}, were cut"
        f"{where}: call again with smaller arguments"
    )
    return call.model_copy(update={"arguments": refused})
