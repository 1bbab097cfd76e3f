"""What a person types: standard input line by line, read without blocking the loop, and Ctrl-C
presses counted. One reader of stdin for the process (`stdin()`), shared by a run's questions
and a conversation's lines."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from typing import ClassVar


class Lines:
    """Standard input, line by line, without blocking the loop; None at its end. Read in a
    daemon thread from the unbuffered stream, so that a line can come while a turn works or a
    question waits, and the process can exit while a read is pending: `asyncio.to_thread(input)`
    would keep it (the executor's threads are joined at exit, and a daemon thread inside the
    buffered reader's lock aborts the interpreter). One reader for the process: `stdin()`."""

    shared: ClassVar[Lines | None] = None

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def read() -> None:
            stdin = sys.stdin
            raw = getattr(stdin.buffer, "raw", stdin.buffer) if stdin is not None else None
            line: str | None = ""
            while line is not None:
                try:
                    data = raw.readline() if raw is not None else b""
                except (AttributeError, OSError, ValueError):
                    data = b""
                line = data.decode(stdin.encoding or "utf-8", errors="replace") if data else None
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(self._queue.put_nowait, line)

        threading.Thread(target=read, name="stdin-lines", daemon=True).start()

    async def next(self, stop: asyncio.Event | None = None) -> str | None:
        """The next line; None at the end of stdin (for every later call too), or once `stop`
        is set."""
        if stop is None:
            line = await self._queue.get()
        else:
            getting = asyncio.ensure_future(self._queue.get())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not getting.done():
                getting.cancel()
                return None
            line = getting.result()
        if line is None:
            self._queue.put_nowait(None)
        return line


def stdin() -> Lines:
    """The process's reader of standard input."""
    Lines.shared = Lines.shared or Lines()
    return Lines.shared


class CtrlC:
    """Ctrl-C presses, counted (`presses`) rather than raised, until `close` gives SIGINT back to
    its default handler."""

    def __init__(self) -> None:
        self.presses: asyncio.Queue[None] = asyncio.Queue()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGINT, self.presses.put_nowait, None
            )

    def close(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
