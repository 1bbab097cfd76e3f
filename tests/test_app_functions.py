"""How an activity calls an app's function, sync or async (activities/_calling.py): tools,
compensations and guardrails all go through it."""

from __future__ import annotations

import asyncio
import functools
import threading

from durable_agent.activities._calling import call_app_function


async def test_a_sync_function_runs_off_the_event_loop_and_an_async_one_on_it() -> None:
    loop_thread = threading.get_ident()

    def sync(x: int) -> tuple[int, int]:
        return x + 1, threading.get_ident()

    async def coroutine(x: int) -> tuple[int, int]:
        await asyncio.sleep(0)
        return x * 2, threading.get_ident()

    assert (await call_app_function(sync, 1))[0] == 2
    assert (await call_app_function(sync, 1))[1] != loop_thread
    assert await call_app_function(coroutine, x=3) == (6, loop_thread)


async def test_what_a_sync_callable_hands_back_to_be_awaited_is_awaited() -> None:
    async def lookup(city: str) -> str:
        return f"sunny in {city}"

    class Tool:
        async def __call__(self, city: str) -> str:
            return await lookup(city)

    # Neither is a coroutine function to inspect; each answers an awaitable.
    assert await call_app_function(Tool(), "Lisbon") == "sunny in Lisbon"
    assert await call_app_function(lambda city: lookup(city), "Porto") == "sunny in Porto"
    assert await call_app_function(functools.partial(lookup, "Faro")) == "sunny in Faro"
