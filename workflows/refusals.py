"""Refusals: how a run turns down a decision it cannot take, by update or by signal.

A decision has one rule for whether it is taken: the `validate...` of the part it concerns
(a gate, the conversation, the callbacks), which raises ValueError with the reason. Sent as an
update, it is refused by the update's validator with that reason, one line and no stack trace
(`refused`). Sent as a signal of the same name (`temporal workflow signal`, the Web UI's signal
dialog), it cannot be refused to its sender, so it is logged and ignored (`ignored`); the gates
say why on the run's page too. Input over a bound of input_limits.py is refused as TOO_LARGE,
and taken by signal still in a run recorded before the bounds. Deterministic code only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec

from temporalio import workflow
from temporalio.api.failure.v1 import ApplicationFailureInfo, Failure
from temporalio.converter import DefaultFailureConverter, PayloadConverter
from temporalio.exceptions import ApplicationError

from . import versioning
from .input_limits import TOO_LARGE, InputTooLarge

REFUSED = "DecisionRefused"
"""The type of the error an update's validator refuses a decision with."""

P = ParamSpec("P")


def refusal(reason: str, type: str = REFUSED) -> ApplicationError:
    """A validator's refusal: a non-retryable ApplicationError whose failure is its one-line
    message and nothing else. Built from a finished failure, so the failure converter copies it
    as it is and adds no Python stack trace (the Web UI's update dialog would show one)."""
    failure = Failure(
        message=reason,
        application_failure_info=ApplicationFailureInfo(type=type, non_retryable=True),
    )
    error = DefaultFailureConverter().from_failure(failure, PayloadConverter.default)
    assert isinstance(error, ApplicationError)
    return error


def validator_refusal(refused: ValueError) -> ApplicationError:
    """What an update's validator raises for a refused input: TOO_LARGE for one over a bound
    of workflows/input_limits.py, REFUSED for any other."""
    kind = TOO_LARGE if isinstance(refused, InputTooLarge) else REFUSED
    return refusal(str(refused), kind)


def ignored_by_signal(refused: ValueError) -> bool:
    """A signal's input was refused: whether to ignore it. One over a bound is taken still by a
    run recorded before the bounds (versioning.ignores_oversized_signal)."""
    return not isinstance(refused, InputTooLarge) or versioning.ignores_oversized_signal()


def refused(check: Callable[P, None], *args: P.args, **kwargs: P.kwargs) -> None:
    """An update's validator: `check`, its ValueError refused as one line."""
    try:
        check(*args, **kwargs)
    except ValueError as refusal:
        raise validator_refusal(refusal) from None


def ignored(what: str, check: Callable[P, None], *args: P.args, **kwargs: P.kwargs) -> str | None:
    """A decision sent by signal, checked by the update's own rule: why it is ignored (and
    logged), or None to take it."""
    try:
        check(*args, **kwargs)
    except ValueError as refusal:
        if ignored_by_signal(refusal):
            workflow.logger.warning("%s ignored: %s", what, refusal)
            return str(refusal)
    return None
