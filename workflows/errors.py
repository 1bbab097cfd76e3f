"""The project's errors.

Errors that end a run cross Temporal boundaries as `ApplicationError`s whose `type` is the class
name, so callers (and `RetryPolicy.non_retryable_error_types`) can match them without importing
this module.
"""

from __future__ import annotations

from typing import Any

from temporalio.exceptions import ActivityError, ApplicationError


class AgentError(ApplicationError):
    """Base of every error the agent loop raises on purpose. Never retried by default."""

    def __init__(self, message: str, *details: Any, non_retryable: bool = True) -> None:
        super().__init__(message, *details, type=type(self).__name__, non_retryable=non_retryable)


class AgentStepLimitExceeded(AgentError):
    """The run made `max_steps` model calls without reaching an answer."""


class AgentBudgetExceeded(AgentError):
    """A token, context or wall-time budget ran out before an answer."""


class AgentApprovalTimeout(AgentError):
    """A plan waited longer than the run's approval timeout for a person's decision."""


class AgentFatalToolError(AgentError):
    """Raised by a tool when retrying, or letting the model try again, can never help
    (a credential that can never work, say). It fails the run instead of becoming a result."""


class AgentProviderError(AgentError):
    """The model provider refused the request for a reason a retry cannot fix (400, 401, ...)."""


class AgentConfigurationError(AgentError):
    """The run asked for something the worker cannot provide (an unknown tool, a missing key)."""


class AgentInputTooLarge(AgentError):
    """Input over one of the bounds of workflows/input_limits.py: a run's input, a message, a
    comment or a reason. An update's validator refuses with this type too."""


class AgentInputInvalid(AgentError):
    """A run's input that does not fit the contract (`durable-agent contract`): a null where a
    text goes, a wrong type, a number outside its bounds. AgentClient and the HTTP API refuse it
    before anything starts; a run another client started with one fails with it at once, its
    message naming each field and rule (workflows/payloads.py), rather than retrying a workflow
    task that can never decode it."""


class AgentGuardrailTripped(AgentError):
    """A guardrail's tripwire stopped the run (docs/guardrails.md): an input guardrail on the
    prompt or a message, or an output guardrail past the revisions it allows. The message names
    the guardrail and its reason; the details' `guardrail` is its record. What the run did is
    undone first."""


class ScriptedModelMismatch(AgentError):
    """The scripted model was asked for a reply its script does not have."""


FATAL_ERROR_TYPES = [
    cls.__name__
    for cls in (
        AgentFatalToolError,
        AgentProviderError,
        AgentConfigurationError,
        ScriptedModelMismatch,
    )
]
"""Error types that end a run at once, whatever an activity's retry policy says."""


def error_class(type_name: str | None) -> type[AgentError]:
    """The class of an error that crossed an activity boundary by its type name."""
    return _ERROR_CLASSES.get(type_name or "", AgentProviderError)


_ERROR_CLASSES: dict[str, type[AgentError]] = {
    cls.__name__: cls for cls in AgentError.__subclasses__()
}


def failure_type(cause: BaseException | None) -> str:
    """An activity failure's type as the model may see it (never its message)."""
    if isinstance(cause, ApplicationError) and cause.type:
        return cause.type
    return type(cause).__name__ if cause is not None else "unknown error"


def activity_failure_cause(error: ActivityError | ApplicationError) -> BaseException | None:
    """What made an activity call fail: the ActivityError's cause, or the error itself, since a
    local activity's own non-retryable failure can arrive as a bare ApplicationError, without
    its ActivityError."""
    return error.cause if isinstance(error, ActivityError) else error


def describe_failure(cause: BaseException | None) -> str:
    if isinstance(cause, ApplicationError):
        return f"{cause.type or 'ApplicationError'}: {cause.message}"
    return str(cause) if cause is not None else "unknown error"
