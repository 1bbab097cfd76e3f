"""A codec server, so the Web UI and the `temporal` CLI show decrypted payloads.

    AGENT_PAYLOAD_KEYS=... AGENT_CODEC_TOKEN=... python codec_server.py \\
        [--host 127.0.0.1] [--port 8081] [--ui-origin http://localhost:8233]

Temporal's remote codec protocol: POST /encode and /decode with `{"payloads": [...]}` (payloads
as protobuf JSON, base64 data and metadata), answered in the same shape. Every POST needs
`Authorization: Bearer $AGENT_CODEC_TOKEN`: whoever holds the token reads every run, so the server
listens on localhost unless told otherwise, and its CORS answers only the Web UI's origin.

    temporal workflow show -w ID --codec-endpoint http://127.0.0.1:8081 \\
        --codec-auth "Bearer $AGENT_CODEC_TOKEN"

The Web UI cannot send that header (it sends only its own login's access token), so a person
signs it in once: open http://localhost:8081/login in the browser, enter the token, and the
server sets a session cookie. In the Web UI's codec settings, set the endpoint to
http://localhost:8081 and turn on "include cross-origin credentials": its requests then carry the
cookie. (Use `localhost` in both places: the cookie is sent to the same site only, and
`localhost` and `127.0.0.1` are different sites to a browser.)
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payloads

from payload_codec import (
    KEYS_FILE_VARIABLE,
    KEYS_VARIABLE,
    EncryptionCodec,
    PayloadKeyError,
    keys_from_env,
)

TOKEN_VARIABLE = "AGENT_CODEC_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
DEFAULT_UI_ORIGIN = "http://localhost:8233"
MAX_BODY_BYTES = 64 * 1024 * 1024
"""A whole history's payloads at most; anything bigger is refused before it is read."""
_ALLOWED_HEADERS = "authorization, content-type, x-namespace"
SESSION_COOKIE = "agent_codec_session"
_LOGIN_FORM = b"""<!doctype html><meta charset="utf-8"><title>Codec server sign-in</title>
<form method="post" action="/login"><p>Token (AGENT_CODEC_TOKEN):
<input name="token" type="password" autofocus> <button>Sign in</button></p></form>"""
_SIGNED_IN = b"""<!doctype html><meta charset="utf-8"><title>Signed in</title>
<p>Signed in. The Web UI decodes payloads through this server once its codec settings name it
and include cross-origin credentials.</p>"""

_log = logging.getLogger("codec_server")


class CodecServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], codec: EncryptionCodec, token: str, ui_origin: str
    ) -> None:
        if not token:
            raise ValueError(f"the codec server needs a token ({TOKEN_VARIABLE})")
        super().__init__(address, _Handler)
        self.codec = codec
        self.token = token
        self.ui_origin = ui_origin.rstrip("/")
        # The cookie proves the token was presented without being the token: a cookie that
        # leaks (a browser profile, a HAR file) does not reveal it for the CLI or a new session.
        self.session = hmac.new(token.encode(), b"web-ui-session", hashlib.sha256).hexdigest()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: CodecServer
    protocol_version = "HTTP/1.1"

    def do_OPTIONS(self) -> None:
        """A CORS preflight: allowed only from the Web UI's origin (no token: browsers send
        none with a preflight)."""
        if self._path() not in ("/encode", "/decode") or not self._cors_allowed():
            self._send(HTTPStatus.FORBIDDEN, b"")
            return
        self._send(
            HTTPStatus.NO_CONTENT,
            b"",
            {
                "Access-Control-Allow-Methods": "POST, OPTIONS",
                "Access-Control-Allow-Headers": _ALLOWED_HEADERS,
                "Access-Control-Max-Age": "600",
            },
        )

    def do_GET(self) -> None:
        if self._path() != "/login":
            self._send_error(HTTPStatus.NOT_FOUND, "POST /encode or /decode; GET /login")
            return
        self._send(HTTPStatus.OK, _LOGIN_FORM, {"Content-Type": "text/html; charset=utf-8"})

    def _login(self) -> None:
        """The form's POST: the right token sets the session cookie the Web UI's requests
        carry; a wrong one is a 401, like a wrong bearer token."""
        length = min(int(self.headers.get("Content-Length") or 0), 4096)
        form = parse_qs(self.rfile.read(length).decode(errors="replace"))
        given = (form.get("token") or [""])[0].strip()
        if not hmac.compare_digest(given.encode(), self.server.token.encode()):
            self._send_error(HTTPStatus.UNAUTHORIZED, "wrong token")
            return
        cookie = f"{SESSION_COOKIE}={self.server.session}; HttpOnly; SameSite=Strict; Path=/"
        headers = {"Content-Type": "text/html; charset=utf-8", "Set-Cookie": cookie}
        self._send(HTTPStatus.OK, _SIGNED_IN, headers)

    def do_POST(self) -> None:
        path = self._path()
        if path == "/login":
            self._login()
            return
        if path not in ("/encode", "/decode"):
            self._send_error(HTTPStatus.NOT_FOUND, "POST /encode or /decode")
            return
        if not self._authorized():
            self._send_error(HTTPStatus.UNAUTHORIZED, "a bearer token is required")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too many payloads at once")
            return
        try:
            payloads = json_format.Parse(self.rfile.read(length), Payloads())
        except (json_format.ParseError, DecodeError, UnicodeDecodeError) as error:
            self._send_error(HTTPStatus.BAD_REQUEST, f"not a Payloads JSON body: {error}")
            return
        codec = self.server.codec
        try:
            if path == "/encode":
                converted = [codec.encrypt(p) for p in payloads.payloads]
            else:
                converted = [codec.decrypt(p) for p in payloads.payloads]
        except PayloadKeyError as error:
            self._send_error(HTTPStatus.BAD_REQUEST, str(error))
            return
        body = json_format.MessageToJson(Payloads(payloads=converted)).encode()
        self._send(HTTPStatus.OK, body, {"Content-Type": "application/json"})

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def _authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        expected = f"Bearer {self.server.token}"
        if hmac.compare_digest(given.encode(), expected.encode()):
            return True
        # The Web UI's session cookie, on a JSON request only: a JSON body needs a CORS
        # preflight, which only the UI's origin passes, so no other page can use the cookie.
        json_body = self.headers.get("Content-Type", "").startswith("application/json")
        return json_body and hmac.compare_digest(
            self._cookie(SESSION_COOKIE).encode(), self.server.session.encode()
        )

    def _cookie(self, name: str) -> str:
        for part in self.headers.get("Cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return ""

    def _cors_allowed(self) -> bool:
        return self.headers.get("Origin", "").rstrip("/") == self.server.ui_origin

    def _send_error(self, status: HTTPStatus, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"Content-Type": "application/json"})

    def _send(self, status: HTTPStatus, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if self._cors_allowed():
            self.send_header("Access-Control-Allow-Origin", self.server.ui_origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # The request line and status only: never headers (the token) or bodies.
        _log.info("%s %s", self.address_string(), format % args)


@contextmanager
def serving(
    codec: EncryptionCodec,
    token: str,
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    ui_origin: str = DEFAULT_UI_ORIGIN,
) -> Iterator[CodecServer]:
    """A codec server in a background thread, for the tests and for embedding."""
    server = CodecServer((host, port), codec, token, ui_origin)
    thread = threading.Thread(target=server.serve_forever, name="codec-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _OneLineArgumentParser(argparse.ArgumentParser):
    """Bad command lines get one line on stderr and exit status 2, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SystemExit(_usage_error(message))


def _usage_error(message: str) -> int:
    sys.stderr.write(f"codec_server.py: error: {message} (see --help)\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineArgumentParser(
        prog="codec_server.py", description="Decrypt payloads for the Web UI and the CLI."
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="default: 127.0.0.1 (this machine)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--ui-origin",
        default=DEFAULT_UI_ORIGIN,
        help="the Web UI's origin, the only one CORS allows (default: http://localhost:8233)",
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    token = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        return _usage_error(f"{TOKEN_VARIABLE} is not set: the server does not start without one")
    try:
        keys = keys_from_env()
    except PayloadKeyError as error:
        return _usage_error(str(error))
    if not keys:
        return _usage_error(f"no keys: set {KEYS_VARIABLE} or {KEYS_FILE_VARIABLE}")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    codec = EncryptionCodec(keys)
    try:
        server = CodecServer((args.host, args.port), codec, token, args.ui_origin)
    except OSError as error:
        _log.error("cannot listen on %s:%d: %s", args.host, args.port, error.strerror)
        return 1
    # Key ids only: neither the keys nor the token are printed.
    _log.info(
        "codec server on %s for %s, encrypting with key id %s",
        server.url,
        args.ui_origin,
        codec.key_id,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
