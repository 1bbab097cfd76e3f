"""A codec server, so the Web UI and the `temporal` CLI show decrypted payloads.

    AGENT_PAYLOAD_KEYS=... AGENT_CODEC_TOKEN=... python codec_server.py \\
        [--host 127.0.0.1] [--port 8081] [--ui-origin http://localhost:8233] \\
        [--session-hours 8] [--behind-tls]

(or AGENT_PAYLOAD_KEYS_FILE and AGENT_CODEC_TOKEN_FILE, files holding the same).

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
`localhost` and `127.0.0.1` are different sites to a browser.) Each sign-in gets its own random
session, which ends after --session-hours or when the server restarts; behind a TLS proxy,
--behind-tls marks the cookie Secure.

Nothing is read before it is known to be wanted: an unknown path or a missing token is answered
without reading the body, and a body without a plain Content-Length within the limit is refused
(411, 400, 413) before a byte of it is read, on a connection that is then closed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import click
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payloads

from ..serving.command_line import Command, CommandLineError, invoked_name, parse, refuse
from .payload_codec import (
    KEYS_FILE_VARIABLE,
    KEYS_VARIABLE,
    EncryptionCodec,
    PayloadKeyError,
    associated_data_from_env,
    keys_from_env,
)

PROGRAM = "python -m durable_agent.encryption.codec_server"
"""How people run it (docker-compose.yml, docs/encryption.md)."""
TOKEN_VARIABLE = "AGENT_CODEC_TOKEN"
TOKEN_FILE_VARIABLE = "AGENT_CODEC_TOKEN_FILE"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
DEFAULT_UI_ORIGIN = "http://localhost:8233"
MAX_BODY_BYTES = 64 * 1024 * 1024
"""A whole history's payloads at most; anything bigger is refused before it is read."""
MAX_LOGIN_BYTES = 4096
"""The sign-in form: a token and its field name."""
DEFAULT_SESSION_HOURS = 8.0
MAX_SESSIONS = 1024
"""Sign-ins kept at once; past it the one nearest its end is dropped (that browser signs in
again)."""
READ_TIMEOUT_SECONDS = 30.0
"""A client that stops sending mid-request loses its connection after this long."""
_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")
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
        self,
        address: tuple[str, int],
        codec: EncryptionCodec,
        token: str,
        ui_origin: str,
        *,
        session_seconds: float = DEFAULT_SESSION_HOURS * 3600,
        secure_cookie: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not token:
            raise ValueError(f"the codec server needs a token ({TOKEN_VARIABLE})")
        if session_seconds <= 0:
            raise ValueError("a session must last longer than 0 seconds")
        super().__init__(address, _Handler)
        self.codec = codec
        self.token = token
        self.ui_origin = ui_origin.rstrip("/")
        self.session_seconds = session_seconds
        self.secure_cookie = secure_cookie
        self._clock = clock
        # Each sign-in's session: its SHA-256 (the cookie itself is not kept, so the table
        # reveals none) and when it ends. In memory: a restart signs every browser out.
        self._sessions: dict[bytes, float] = {}
        self._sessions_lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def new_session(self) -> str:
        """A fresh random session value, valid for session_seconds."""
        value = secrets.token_urlsafe(32)
        now = self._clock()
        with self._sessions_lock:
            self._sessions = {k: end for k, end in self._sessions.items() if end > now}
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[min(self._sessions, key=self._sessions.__getitem__)]
            self._sessions[_digest(value)] = now + self.session_seconds
        return value

    def session_valid(self, value: str) -> bool:
        if not value:
            return False
        key = _digest(value)
        with self._sessions_lock:
            end = self._sessions.get(key)
            if end is None:
                return False
            if end <= self._clock():
                del self._sessions[key]
                return False
            return True


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode(errors="replace")).digest()


class _Refused(Exception):
    """A request refused for its body: answered without reading (the rest of) it, on a
    connection that then closes."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    server: CodecServer
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_SECONDS
    _body_read = False

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
        """The form's POST: the right token starts a session, whose cookie the Web UI's requests
        carry; a wrong one is a 401, like a wrong bearer token."""
        body = self._body(MAX_LOGIN_BYTES)
        form = parse_qs(body.decode(errors="replace"))
        given = (form.get("token") or [""])[0].strip()
        if not hmac.compare_digest(given.encode(), self.server.token.encode()):
            self._send_error(HTTPStatus.UNAUTHORIZED, "wrong token")
            return
        attributes = [
            f"{SESSION_COOKIE}={self.server.new_session()}",
            "HttpOnly",
            "SameSite=Strict",
            "Path=/",
            f"Max-Age={int(self.server.session_seconds)}",
        ]
        if self.server.secure_cookie:
            attributes.append("Secure")
        headers = {"Content-Type": "text/html; charset=utf-8", "Set-Cookie": "; ".join(attributes)}
        self._send(HTTPStatus.OK, _SIGNED_IN, headers)

    def do_POST(self) -> None:
        try:
            self._post()
        except _Refused as refused:
            # Whatever the client sent is unread, or its extent unknown: close after the answer.
            self._send_error(refused.status, str(refused), close=True)

    def _post(self) -> None:
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
        try:
            payloads = json_format.Parse(self._body(MAX_BODY_BYTES), Payloads())
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

    def _body(self, limit: int) -> bytes:
        """The request's body, read only once its Content-Length is one plain number within
        `limit`; raises _Refused (411, 400 or 413) before reading a byte otherwise."""
        if "Transfer-Encoding" in self.headers:
            raise _Refused(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length, not chunks")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            raise _Refused(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
        if len(lengths) > 1 or not _CONTENT_LENGTH.fullmatch(lengths[0].strip()):
            raise _Refused(HTTPStatus.BAD_REQUEST, "Content-Length is not one number of bytes")
        length = int(lengths[0])
        if length > limit:
            raise _Refused(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body may have at most {limit} bytes"
            )
        if self.headers.get("Expect", "").strip().lower() == "100-continue":
            self.send_response_only(HTTPStatus.CONTINUE)
            self.end_headers()
        try:
            body = self.rfile.read(length)
        except OSError:  # the read timed out, or the client went away
            body = b""
        if len(body) != length:
            self._body_read = True  # as much as there will be: the connection closes anyway
            raise _Refused(HTTPStatus.BAD_REQUEST, "the body ended before its Content-Length")
        self._body_read = True
        return body

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
        return json_body and self.server.session_valid(self._cookie(SESSION_COOKIE))

    def _cookie(self, name: str) -> str:
        for part in self.headers.get("Cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return ""

    def _cors_allowed(self) -> bool:
        return self.headers.get("Origin", "").rstrip("/") == self.server.ui_origin

    def _unread_body(self) -> bool:
        """Whether the request announced a body this handler has not read: the connection must
        close then, or the rest of that body would be read as the next request."""
        if self._body_read:
            return False
        announced = self.headers.get("Content-Length", "0").strip()
        return "Transfer-Encoding" in self.headers or announced != "0"

    def _send_error(self, status: HTTPStatus, message: str, *, close: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"Content-Type": "application/json"}, close=close)

    def parse_request(self) -> bool:
        self._body_read = False  # per request: one handler serves a whole kept-alive connection
        return super().parse_request()

    def handle_expect_100(self) -> bool:
        # "100 Continue" invites the body: sent by _body, once the body is wanted.
        return True

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        close: bool = False,
    ) -> None:
        self.send_response(status)
        if self._cors_allowed():
            self.send_header("Access-Control-Allow-Origin", self.server.ui_origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if close or self._unread_body():
            self.send_header("Connection", "close")
            self.close_connection = True
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
    **options: Any,
) -> Iterator[CodecServer]:
    """A codec server in a background thread, for the tests and for embedding. `options` go to
    CodecServer (session_seconds, secure_cookie, clock)."""
    server = CodecServer((host, port), codec, token, ui_origin, **options)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name="codec-server",
        daemon=True,
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def token_from_env(environ: Mapping[str, str] | None = None) -> str:
    """AGENT_CODEC_TOKEN, or the contents of the file AGENT_CODEC_TOKEN_FILE names; raises
    ValueError (one line, without the token) when neither gives one."""
    env = os.environ if environ is None else environ
    inline = env.get(TOKEN_VARIABLE, "").strip()
    path = env.get(TOKEN_FILE_VARIABLE, "").strip()
    if inline and path:
        raise ValueError(f"set {TOKEN_VARIABLE} or {TOKEN_FILE_VARIABLE}, not both")
    if path:
        try:
            inline = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or type(error).__name__
            raise ValueError(f"{TOKEN_FILE_VARIABLE}: cannot read {path}: {reason}") from None
        if not inline:
            raise ValueError(f"{TOKEN_FILE_VARIABLE}: {path} is empty")
    if not inline:
        raise ValueError(
            f"{TOKEN_VARIABLE} is not set: the server does not start without one "
            f"(or {TOKEN_FILE_VARIABLE}, a file that holds it)"
        )
    return inline


@click.command(cls=Command, help="Decrypt payloads for the Web UI and the CLI.")
@click.option("--host", default=DEFAULT_HOST, help="the interface to listen on (this machine)")
@click.option("--port", type=int, default=DEFAULT_PORT)
@click.option(
    "--ui-origin",
    default=DEFAULT_UI_ORIGIN,
    help="the Web UI's origin as the browser shows it, the only one CORS allows (the dev "
    "server's UI; docker-compose's is http://localhost:8080)",
)
@click.option(
    "--session-hours", type=float, default=DEFAULT_SESSION_HOURS, help="how long a sign-in lasts"
)
@click.option(
    "--behind-tls",
    is_flag=True,
    help="browsers reach this server over HTTPS (a TLS proxy in front): mark the cookie Secure",
)
def _command(**options: Any) -> dict[str, Any]:
    """The options, and the token and keys from the environment: each missing or malformed one
    is a bad command line."""
    if not options["session_hours"] > 0:
        refuse(f"--session-hours must be more than 0, not {options['session_hours']:g}")
    try:
        options["token"] = token_from_env()
        options["keys"] = keys_from_env()
        options["associated_data"] = associated_data_from_env()
    except (ValueError, PayloadKeyError) as error:
        refuse(str(error))
    if not options["keys"]:
        refuse(f"no keys: set {KEYS_VARIABLE} or {KEYS_FILE_VARIABLE}")
    return options


def main(argv: Sequence[str] | None = None, *, prog: str = PROGRAM) -> int:
    """Serve until interrupted: 0 then, 1 when the port cannot be had, 2 for a bad command line
    or environment. `prog` names the command in its messages."""
    try:
        options = parse(_command, argv, prog)
    except CommandLineError as stop:
        return int(stop.code or 0)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    codec = EncryptionCodec(options["keys"], associated_data=options["associated_data"])
    try:
        server = CodecServer(
            (options["host"], options["port"]),
            codec,
            options["token"],
            options["ui_origin"],
            session_seconds=options["session_hours"] * 3600,
            secure_cookie=options["behind_tls"],
        )
    except OSError as error:
        _log.error("cannot listen on %s:%d: %s", options["host"], options["port"], error.strerror)
        return 1
    # Key ids only: neither the keys nor the token are printed.
    _log.info(
        "codec server on %s for %s, encrypting with key id %s",
        server.url,
        options["ui_origin"],
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
    sys.exit(main(prog=invoked_name()))
