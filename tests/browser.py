"""A real browser for the tests that need one (the Web UI's, the console's): headless Chromium
(Debian's `chromium`; .ci/run installs it), driven over the DevTools protocol, one page. A test
test takes the `browser` fixture (conftest.py: one Chromium a module) and is marked `browser`:
without Chromium it skips and says what to install, and under AGENT_TESTS_STRICT=1 (.ci/run) it
fails instead."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import websockets

from durable_agent.serving.dev_server import free_port
from tests.helpers import eventually, program

PAGE_SECONDS = 30.0
"""How long a page may take to show what is awaited (the UI polls the server)."""
# Everything a page shows: the document's text, then each same-origin frame's (the UI renders
# the summary, the details and the current details as Markdown, each in a frame of its own),
# as text and as HTML, so that the test sees which elements hold the words.
PAGE_CONTENT = """(() => {
  const parts = [document.body ? document.body.innerText : ''];
  const html = [];
  for (const frame of document.querySelectorAll('iframe')) {
    const body = frame.contentDocument && frame.contentDocument.body;
    if (body) { parts.push(body.innerText); html.push(frame.id + ': ' + body.innerHTML); }
  }
  return JSON.stringify({text: parts.join('\\n'), frames: html.join('\\n')});
})()"""


def chromium() -> str:
    return program(("chromium", "chromium-browser", "google-chrome"), "apt-get install chromium")


class Browser:
    """One headless Chromium, driven over the DevTools protocol (one page)."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self._next_id = 0

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        ask = self._next_id
        await self._socket.send(json.dumps({"id": ask, "method": method, "params": params}))
        while True:
            message = json.loads(await self._socket.recv())
            if message.get("id") == ask:
                assert "error" not in message, message
                return dict(message["result"])

    async def content(self) -> tuple[str, str]:
        answer = await self.send("Runtime.evaluate", expression=PAGE_CONTENT, returnByValue=True)
        content = json.loads(answer["result"]["value"])
        return content["text"], content["frames"]

    async def evaluate(self, expression: str) -> Any:
        """`expression`'s value in the page (JSON-able); a script that throws fails the test."""
        answer = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"].get("value")

    async def open(self, url: str, *awaited: str) -> tuple[str, str]:
        """Open `url` and answer its text and its frames' HTML once every one of `awaited` is
        in the text; fail, showing the text, if that takes over PAGE_SECONDS."""
        await self.send("Page.navigate", url=url)
        return await self.shows(*awaited, where=url)

    async def shows(self, *awaited: str, where: str = "the page") -> tuple[str, str]:
        """The page's text and its frames' HTML once every one of `awaited` is in the text (the
        page changes as it goes); fail, showing the text, if that takes over PAGE_SECONDS."""
        text = frames = ""

        async def shown() -> bool:
            nonlocal text, frames
            text, frames = await self.content()
            return all(words in text for words in awaited)

        try:
            await eventually(shown, timeout=PAGE_SECONDS, interval=0.25, what=f"{awaited} shown")
        except AssertionError:
            pytest.fail(f"{where} did not show {awaited}; it showed:\n{text}")
        return text, frames


@contextlib.contextmanager
def chromium_process(port: int) -> Iterator[subprocess.Popen[bytes]]:
    # Chromium's helper processes can still be writing the profile as it is removed (a CI run
    # met "Directory not empty"): they are stopped with it, as one process group, and what they
    # leave is not the test's failure.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen(
            [
                chromium(),
                "--headless",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                f"--remote-debugging-port={port}",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=10)


def _page_socket(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=1) as answer:
            targets = json.load(answer)
    except (urllib.error.URLError, ConnectionError):
        return None
    return next((t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page"), None)


@contextlib.asynccontextmanager
async def headless_chromium() -> AsyncIterator[Browser]:
    """Chromium started headless, and its page; stopped, with its helper processes, after."""
    port = free_port()
    with chromium_process(port):
        found: list[str] = []

        def listening() -> bool:
            address = _page_socket(port)
            found.extend([address] if address else [])
            return bool(found)

        await eventually(listening, timeout=30, what="Chromium's DevTools endpoint")
        async with websockets.connect(found[0], max_size=None) as socket:
            yield Browser(socket)
