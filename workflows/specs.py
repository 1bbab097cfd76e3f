"""Tool specs as data: what the model is told about a tool and how the workflow schedules it.

A leaf module (the run's state carries the specs a run was given, and the models use them), so
it imports nothing of the project but its bounds. Pure.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from temporalio.common import RetryPolicy

from .bounds import Attempts, Backoff, ResultChars, Seconds

DEFAULT_MAX_RESULT_CHARS = 8_000


class RetrySettings(BaseModel):
    """A Temporal retry policy as plain data, so it can travel in a run's input."""

    model_config = ConfigDict(frozen=True)

    maximum_attempts: Attempts = 3
    """0: no limit, as Temporal has it."""
    initial_interval_seconds: Seconds = 1.0
    backoff_coefficient: Backoff = 2.0
    maximum_interval_seconds: Seconds = 30.0

    @model_validator(mode="after")
    def _intervals_fit(self) -> RetrySettings:
        # The server refuses such a policy when the activity is scheduled, in the middle of the
        # run; refused here, where the run is built.
        if self.maximum_interval_seconds < self.initial_interval_seconds:
            raise ValueError(
                f"maximum_interval_seconds={self.maximum_interval_seconds:g} is less than "
                f"initial_interval_seconds={self.initial_interval_seconds:g}"
            )
        return self

    def to_policy(self, non_retryable_error_types: list[str] | None = None) -> RetryPolicy:
        return RetryPolicy(
            maximum_attempts=self.maximum_attempts,
            initial_interval=timedelta(seconds=self.initial_interval_seconds),
            backoff_coefficient=self.backoff_coefficient,
            maximum_interval=timedelta(seconds=self.maximum_interval_seconds),
            non_retryable_error_types=non_retryable_error_types,
        )


class ToolSpec(BaseModel):
    """What the model is told about a tool, and how the workflow schedules it."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""
    side_effects: bool = False
    """Side-effecting calls never run concurrently with anything; they keep the model's order."""
    timeout_seconds: Seconds = 30.0
    """start-to-close timeout of one attempt."""
    retry: RetrySettings = RetrySettings()
    max_result_chars: ResultChars = DEFAULT_MAX_RESULT_CHARS
    compensation: str | None = None
    """Activity that undoes this tool's effect when the run ends without an answer; None for a
    side-effecting tool means its effect cannot be undone, and a failed run says so."""
    compensation_timeout_seconds: Seconds = 30.0
    compensation_retry: RetrySettings = RetrySettings(maximum_attempts=5)
    needs_approval: bool | None = None
    """Whether a call waits for a person (unless the run's `ToolApprovalPolicy` approves it).
    None: the default, which asks for side-effecting tools and not for read-only ones."""
    local: bool = False
    """A read-only tool run as a local activity: in the worker that runs the workflow task,
    with no task-queue round trip, and recorded as one marker event instead of an activity's
    three and a workflow task's three. For fast calls (lookups, computations): it does not
    heartbeat, so a call longer than a few seconds belongs in a normal activity."""
    callback: bool = Field(default=False, exclude_if=lambda callback: not callback)
    """A callback tool (workflows/callbacks.py): its body runs on a client, not on a worker. At
    a call the run waits, spending nothing, for `answer_callback`, at most `timeout_seconds`."""
    result: dict[str, Any] | None = Field(default=None, exclude_if=lambda result: result is None)
    """A callback tool's JSON Schema of its result: an answer that does not match is refused to
    its sender. None: any JSON value."""
