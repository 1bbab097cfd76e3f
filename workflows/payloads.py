"""How a run's input is decoded: temporalio.contrib.pydantic's payload converter, with one rule
added, so that an input that does not fit the contract fails its run instead of wedging it.

A client in another language (the `temporal` CLI, TypeScript, Go, raw JSON over HTTP) can start
a run with `{"prompt": null}`, a wrong type or a number outside its bounds. The SDK decodes the
input before any workflow code runs, and a decoding error fails the workflow *task*, which
Temporal retries forever: the run shows RUNNING in the Web UI, answers no query, and nobody is
told. An error that is a Temporal failure fails the workflow instead (the SDK's own rule for
payload conversion, as its `PayloadValidationError` does for Nexus), so the run's input is
refused as `AgentInputInvalid`, its message naming each field and rule. Only the run's input:
an update's undecodable argument is already refused to its sender, and a signal's dropped. And
not a field this code does not know where the contract allows none: that is how a newer
release's run looks to an older worker, and its task is left to fail until a newer worker takes
it (a client that follows the contract sends none: its schemas say `additionalProperties:
false`, and AgentClient and the HTTP API refuse one).

The clients (`AgentClient.start`, the HTTP API) check an input the same way before they start
anything (`check_wire`), so that a Python app never gets as far. Deterministic: pure decoding.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter

from .errors import AgentInputInvalid
from .inputs import AgentInput
from .outcomes import bounded

LONE_SURROGATE = "a string has a lone surrogate (\\ud800-\\udfff): not Unicode text"
"""Why a text with a lone surrogate is refused: JSON's `\\ud800` parses, in Python, into a string
no payload, event or answer can carry as UTF-8."""
MAX_REPORTED_PROBLEMS = 10
"""Problems of one input named in the refusal; the count says how many more there are."""


def refusal(error: ValidationError) -> AgentInputInvalid:
    """The error a run's input that failed `error` is refused with: each problem as its field's
    path and the rule it broke (never the value sent, which may be large or secret)."""
    return AgentInputInvalid(
        "the run's input does not fit the contract (`durable-agent contract`): "
        + named_problems(error)
    )


def named_problems(error: ValidationError) -> str:
    """`error`'s problems, each as its field's path and the rule it broke, in pydantic's words
    without its links (nor the value sent, which may be large or secret); MAX_REPORTED_PROBLEMS
    of them, and how many more."""
    problems = error.errors(include_url=False, include_input=False, include_context=False)
    named = [
        f"{'.'.join(str(part) for part in problem['loc']) or '(input)'}: {bounded(problem['msg'])}"
        for problem in problems[:MAX_REPORTED_PROBLEMS]
    ]
    if len(problems) > MAX_REPORTED_PROBLEMS:
        named.append(f"and {len(problems) - MAX_REPORTED_PROBLEMS} more")
    return "; ".join(named)


def lone_surrogate(error: BaseException) -> bool:
    """An encoding error (UnicodeEncodeError, or pydantic's that wraps one) of a lone surrogate."""
    return "surrogates not allowed" in str(error)


def non_json_number(value: Any) -> list[str | int] | None:
    """The path in `value` (dicts and lists, as JSON parses) to its first float that JSON has no
    number for (NaN, Infinity), which pydantic and the SDK write as null; None when it has none.
    Not recursive: a value nests as deep as Python's parser reads."""
    unread: list[tuple[list[str | int], Any]] = [([], value)]
    while unread:
        path, item = unread.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path
        if isinstance(item, dict | list):
            parts = list(item.items() if isinstance(item, dict) else enumerate(item))
            unread.extend(([*path, key], part) for key, part in reversed(parts))
    return None


def check_wire(agent_input: AgentInput) -> bytes:
    """The input as its payload carries it (JSON), once checked to decode as a worker will decode
    it: a model changed after it was built (a field set to None, `model_construct`), or a float
    that JSON writes as null (NaN or Infinity, anywhere: `max_cost_usd`, a schema's `default`),
    is refused here rather than read by the run as null, as is one that cannot be written at all
    (a text with a lone surrogate, an output_schema nested past what pydantic writes). Raises
    AgentInputInvalid."""
    try:
        data = agent_input.model_dump_json().encode()
        where = non_json_number(agent_input.model_dump())
    except PydanticSerializationError as error:
        why = LONE_SURROGATE if lone_surrogate(error) else str(error)
        raise AgentInputInvalid(f"the run's input cannot be sent: {why}") from None
    if where is not None:
        at = ".".join(map(str, where))
        raise AgentInputInvalid(f"the run's input cannot be sent: {at}: no JSON number (NaN or ∞)")
    try:
        AgentInput.model_validate_json(data)
    except ValidationError as error:
        raise refusal(error) from None
    return data


class RefusesUndecodableInput(PydanticPayloadConverter):
    """A payload converter whose decoding of a run's input (`AgentInput`) raises
    AgentInputInvalid, a Temporal failure, where pydantic's ValidationError would fail the
    workflow task forever."""

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        try:
            return super().from_payloads(payloads, type_hints)
        except ValidationError as error:
            if type_hints is not None and AgentInput in type_hints and not _newer(error):
                raise refusal(error) from None
            raise


def _newer(error: ValidationError) -> bool:
    """Whether the input has a field this code does not know, where the contract allows none
    (a message's): a newer release's run, handed on to this worker in a rolling upgrade or a
    rollback. Its task fails, as before, so that a worker of that release takes it; failing the
    run would lose it."""
    return any(problem["type"] == "extra_forbidden" for problem in error.errors())


@functools.cache
def refusing_undecodable_input(
    converter: type[PydanticPayloadConverter],
) -> type[PydanticPayloadConverter]:
    """`converter` (an app's own subclass of pydantic's, or pydantic's) with the rule added: one
    class for each, made once."""
    if issubclass(converter, RefusesUndecodableInput):
        return converter
    if converter is PydanticPayloadConverter:
        return RefusesUndecodableInput
    return type(converter.__name__, (RefusesUndecodableInput, converter), {})
