"""An app's function called from an activity, whether it is written sync or async: a tool, a
compensation, a guardrail. The one place that decides how.

An async function is awaited on the worker's event loop. A sync one runs in a thread, so that it
cannot block the loop (and the heartbeats with it); `to_thread` copies the context, so
`current_call()` works there. What a sync function hands back that is still to be awaited (a
wrapper around an async function, an object whose `__call__` is async) is awaited too, rather
than taken for the answer."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any


async def call_app_function(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    value = await asyncio.to_thread(fn, *args, **kwargs)
    return await value if inspect.isawaitable(value) else value
