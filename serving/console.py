"""The browser console of `durable-agent serve` (docs/console.md): its page at `/` and
`/runs/{id}`, and its script and style from the package (serving/console/: no Node build, no
CDN). The page carries no data and needs no token; the script takes the token from the console
link's `#token=` fragment, which browsers never send to a server, and calls the HTTP API with it.

Every response of the server says the Content-Security-Policy below: the console's own script
only, no inline script, no other origin. The script puts every text on the page as text; the
policy is the second guard, should a change ever let a run's text reach the page as HTML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

# Resolved: an editable install serves this module through a link, and StaticFiles refuses a
# file whose real path is outside its folder (each asset is a link into the checkout there).
ASSETS = Path(__file__).resolve().parent / "console"
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def add_console(app: FastAPI) -> None:
    """The console's page and assets on `app`, and the security headers on all its answers."""

    @app.get("/", include_in_schema=False)
    @app.get("/runs/{workflow_id:path}", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(ASSETS / "index.html", headers={"cache-control": "no-store"})

    app.mount("/console", StaticFiles(directory=ASSETS), name="console")
    app.add_middleware(_SecurityHeaders)


class _SecurityHeaders:
    """SECURITY_HEADERS on every HTTP answer (the API's too: a browser that opened a JSON
    answer as a page would run nothing from it either)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                given = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [
                    *message.get("headers", []),
                    *[
                        (name.encode(), value.encode())
                        for name, value in SECURITY_HEADERS.items()
                        if name.encode() not in given
                    ],
                ]
            await send(message)

        await self.app(scope, receive, with_headers)
