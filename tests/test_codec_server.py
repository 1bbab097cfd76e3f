"""The codec server: Temporal's remote codec protocol over HTTP, behind a bearer token, with CORS
for the Web UI's origin only."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client

from durable_agent.encryption import codec_server
from durable_agent.encryption.codec_server import serving
from durable_agent.encryption.payload_codec import (
    AAD_METADATA,
    ENCODING,
    KEY_ID_METADATA,
    EncryptionCodec,
    PayloadKey,
    PayloadKeyError,
    associated_data,
    associated_data_from_env,
    data_converter,
)
from durable_agent.serving.dev_server import temporal_binary
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from tests.helpers import TEST_WORKER_OPTIONS, scripted_input, turn
from tests.test_privacy import in_isolated_namespace

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "codec-token-for-tests"
UI_ORIGIN = "http://localhost:8233"
OLD = PayloadKey("old", bytes(range(32)))
NEW = PayloadKey("new", bytes(range(50, 82)))


@pytest.fixture
def server() -> Iterator[codec_server.CodecServer]:
    with serving(EncryptionCodec([NEW, OLD]), TOKEN, ui_origin=UI_ORIGIN) as running:
        yield running


def request(
    server: codec_server.CodecServer,
    path: str,
    body: Any = None,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    data = None if body is None else json.dumps(body).encode()
    sent = urllib.request.Request(
        server.url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(sent, timeout=5) as response:
            raw = response.read()
            return response.status, dict(response.headers), json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, dict(error.headers), json.loads(raw) if raw else None


def payloads_json(*payloads: Payload) -> Any:
    return json_format.MessageToDict(Payloads(payloads=list(payloads)))


def parsed(body: Any) -> list[Payload]:
    return list(json_format.ParseDict(body, Payloads()).payloads)


PLAIN = Payload(metadata={"encoding": b"json/plain"}, data=b'{"prompt": "my secret question"}')
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}],
    ids=["no-token", "wrong-token", "not-bearer"],
)
@pytest.mark.parametrize("path", ["/encode", "/decode"])
def test_every_post_needs_the_token(
    server: codec_server.CodecServer, path: str, headers: dict[str, str]
) -> None:
    status, _, body = request(server, path, payloads_json(PLAIN), headers=headers)
    assert status == 401 and body == {"error": "a bearer token is required"}


def test_encode_then_decode_round_trips_and_decodes_older_keys(
    server: codec_server.CodecServer,
) -> None:
    status, headers, body = request(server, "/encode", payloads_json(PLAIN), headers=BEARER)
    assert status == 200 and headers["Content-Type"] == "application/json"
    [encrypted] = parsed(body)
    assert encrypted.metadata["encoding"] == ENCODING
    assert encrypted.metadata[KEY_ID_METADATA] == b"new"
    assert b"secret" not in encrypted.data

    # A payload from before a rotation (old key), one encrypted now, and a plain one.
    before_rotation = EncryptionCodec([OLD]).encrypt(PLAIN)
    status, _, body = request(
        server,
        "/decode",
        payloads_json(encrypted, before_rotation, PLAIN),
        headers={**BEARER, "X-Namespace": "default"},
    )
    assert status == 200
    assert parsed(body) == [PLAIN, PLAIN, PLAIN]


def test_a_payload_of_an_unknown_key_is_a_clear_400(server: codec_server.CodecServer) -> None:
    foreign = EncryptionCodec([PayloadKey("gone", bytes(32))]).encrypt(PLAIN)
    status, _, body = request(server, "/decode", payloads_json(foreign), headers=BEARER)
    assert status == 400
    assert "key id 'gone'" in body["error"] and "new, old" in body["error"]


def test_a_malformed_body_is_a_400(server: codec_server.CodecServer) -> None:
    status, _, body = request(server, "/decode", {"payloads": "nope"}, headers=BEARER)
    assert status == 400 and body["error"].startswith("not a Payloads JSON body")


def test_the_wire_format_is_protobuf_json_with_base64(server: codec_server.CodecServer) -> None:
    """What the Web UI and the CLI send: metadata values and data as base64 strings."""
    body = {
        "payloads": [
            {
                "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
                "data": base64.b64encode(b'"hello"').decode(),
            }
        ]
    }
    status, _, encoded = request(server, "/encode", body, headers=BEARER)
    assert status == 200
    status, _, decoded = request(server, "/decode", encoded, headers=BEARER)
    assert status == 200 and decoded == body


def test_cors_preflight_answers_only_the_ui_origin(server: codec_server.CodecServer) -> None:
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
    }
    status, headers, _ = request(
        server, "/decode", method="OPTIONS", headers={**preflight, "Origin": UI_ORIGIN}
    )
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert "POST" in headers["Access-Control-Allow-Methods"]
    allowed = {h.strip() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type", "x-namespace"} <= allowed

    status, headers, _ = request(
        server,
        "/decode",
        method="OPTIONS",
        headers={**preflight, "Origin": "http://evil.example"},
    )
    assert status == 403 and "Access-Control-Allow-Origin" not in headers

    # The answer to the UI's POST carries the header too; another origin's does not.
    _, headers, _ = request(
        server, "/decode", payloads_json(PLAIN), headers={**BEARER, "Origin": UI_ORIGIN}
    )
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    _, headers, _ = request(
        server, "/decode", payloads_json(PLAIN), headers={**BEARER, "Origin": "http://evil.example"}
    )
    assert "Access-Control-Allow-Origin" not in headers


def sign_in(server: codec_server.CodecServer, token: str) -> tuple[int, dict[str, str]]:
    """The browser's form POST to /login."""
    sent = urllib.request.Request(
        server.url + "/login",
        data=urllib.parse.urlencode({"token": token}).encode(),
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    try:
        with urllib.request.urlopen(sent, timeout=5) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def test_the_web_ui_signs_in_once_and_its_cookie_decodes(
    server: codec_server.CodecServer,
) -> None:
    """The Web UI cannot send the bearer token; a person signs it in at /login instead, and its
    requests (with cross-origin credentials) carry the session cookie."""
    with urllib.request.urlopen(server.url + "/login", timeout=5) as page:
        assert page.status == 200 and b'name="token"' in page.read()

    status, headers = sign_in(server, "not the token")
    assert status == 401 and "Set-Cookie" not in headers
    status, headers = sign_in(server, TOKEN)
    assert status == 200
    cookie = headers["Set-Cookie"]
    attributes = {part.strip() for part in cookie.split(";")}
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= attributes
    session = cookie.split(";")[0]
    assert TOKEN not in session, "the cookie must not be the token itself"

    encrypted = EncryptionCodec([NEW]).encrypt(PLAIN)
    from_ui = {"Cookie": session, "Origin": UI_ORIGIN}
    status, headers, body = request(server, "/decode", payloads_json(encrypted), headers=from_ui)
    assert status == 200 and parsed(body) == [PLAIN]
    assert headers["Access-Control-Allow-Credentials"] == "true"

    # A forged cookie, or the right one on a request that would skip the CORS preflight, is
    # refused like a missing token.
    status, _, _ = request(
        server, "/decode", payloads_json(encrypted), headers={"Cookie": session + "0"}
    )
    assert status == 401
    status, _, _ = request(
        server,
        "/decode",
        payloads_json(encrypted),
        headers={"Cookie": session, "Content-Type": "text/plain"},
    )
    assert status == 401


def test_it_refuses_to_start_without_a_token_or_keys(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AGENT_CODEC_TOKEN", raising=False)
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", f"new={base64.b64encode(NEW.key).decode()}")
    assert codec_server.main(["--port", "0"]) == 2
    assert "AGENT_CODEC_TOKEN is not set" in capsys.readouterr().err

    monkeypatch.setenv("AGENT_CODEC_TOKEN", TOKEN)
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", "new=not-base64!")
    assert codec_server.main(["--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the key of id 'new' is not base64" in err

    monkeypatch.delenv("AGENT_PAYLOAD_KEYS")
    monkeypatch.delenv("AGENT_PAYLOAD_KEYS_FILE", raising=False)
    assert codec_server.main(["--port", "0"]) == 2
    assert "no keys" in capsys.readouterr().err


def test_the_command_serves_on_localhost_and_prints_neither_key_nor_token(
    tmp_path: Path,
) -> None:
    """`python -m durable_agent.encryption.codec_server` as a person runs it: it says where it
    listens, then serves."""
    key_text = base64.b64encode(NEW.key).decode()
    process = subprocess.Popen(
        [sys.executable, "-m", "durable_agent.encryption.codec_server", "--port", "0"],
        cwd=tmp_path,
        env={"AGENT_PAYLOAD_KEYS": f"new={key_text}", "AGENT_CODEC_TOKEN": TOKEN},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "codec server on http://127.0.0.1:" in line and "key id new" in line, line
        url = line.split("codec server on ", 1)[1].split()[0]
        sent = urllib.request.Request(
            url + "/encode",
            data=json.dumps(payloads_json(PLAIN)).encode(),
            headers={**BEARER, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(sent, timeout=5) as response:
            assert response.status == 200
    finally:
        process.terminate()
        _, rest = process.communicate(timeout=10)
    printed = line + rest
    assert TOKEN not in printed and key_text not in printed
    assert "POST /encode" in printed  # the access log: request lines, not headers


async def test_the_temporal_cli_shows_an_encrypted_run_through_it(
    client: Client, task_queue: str
) -> None:
    """`temporal workflow show --codec-endpoint ... --codec-auth ...` against the session's
    server: every payload of an encrypted run comes back decrypted."""
    client = await in_isolated_namespace(client)
    prompt = "Is my order on its way? (asked by CLI-READER-3141)"
    encrypted = Client(
        client.service_client, namespace=client.namespace, data_converter=data_converter(keys=[NEW])
    )
    async with build_worker(encrypted, task_queue, **TEST_WORKER_OPTIONS):
        handle = await encrypted.start_workflow(
            AgentWorkflow.run,
            scripted_input([turn(text="On its way.")], prompt=prompt),
            id=f"codec-cli-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        await handle.result()
    with serving(EncryptionCodec([NEW]), TOKEN, ui_origin=UI_ORIGIN) as running:
        shown = await asyncio.to_thread(
            subprocess.run,
            [
                temporal_binary(),
                "workflow",
                "show",
                "--workflow-id",
                handle.id,
                "--address",
                client.service_client.config.target_host,
                "--namespace",
                client.namespace,
                "--codec-endpoint",
                running.url,
                "--codec-auth",
                f"Bearer {TOKEN}",
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert shown.returncode == 0, shown.stderr
    events = json.loads(shown.stdout)["events"]
    started = events[0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]
    assert base64.b64decode(started["metadata"]["encoding"]) == b"json/plain"
    assert prompt in base64.b64decode(started["data"]).decode()
    assert base64.b64encode(ENCODING).decode() not in shown.stdout


# --- what is read, and when ----------------------------------------------------------------------


def raw_exchange(
    server: codec_server.CodecServer, head: str, body: bytes = b"", *, wait: float = 1.0
) -> tuple[int, dict[str, str], bool]:
    """Send `head` (request line and headers, without the blank line) and `body` over a socket
    that stays open for writing, and read the answer for at most `wait` seconds: (status, headers,
    whether the server closed the connection after it). A server still reading a body it should
    have refused gives no answer, and the socket's timeout fails the test."""
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), port), timeout=wait) as conn:
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + body)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = conn.recv(65536)
            assert chunk, f"the server closed without answering: {received!r}"
            received += chunk
        header_block, _, rest = received.partition(b"\r\n\r\n")
        status_line, *lines = header_block.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            rest += conn.recv(65536)
        try:
            closed = conn.recv(1) == b""
        except (TimeoutError, ConnectionResetError):
            closed = False
    return int(status_line.split()[1]), headers, closed


def post_head(path: str, *headers: str) -> str:
    return "\n".join([f"POST {path} HTTP/1.1", "Host: localhost", *headers])


AUTHORIZED = ("Content-Type: application/json", f"Authorization: Bearer {TOKEN}")
LOGIN = ("Content-Type: application/x-www-form-urlencoded",)
HUGE = str(200 * 1024 * 1024)


@pytest.mark.parametrize(
    ("path", "extra"),
    [("/login", LOGIN), ("/encode", AUTHORIZED), ("/decode", AUTHORIZED)],
    ids=["login", "encode", "decode"],
)
@pytest.mark.parametrize(
    ("length_headers", "status"),
    [
        ((), 411),
        (("Transfer-Encoding: chunked",), 411),
        (("Content-Length: -1",), 400),
        (("Content-Length: abc",), 400),
        (("Content-Length: 1e3",), 400),
        (("Content-Length: +5",), 400),
        (("Content-Length: 5", "Content-Length: 500"), 400),
        ((f"Content-Length: {HUGE}",), 413),
        (("Content-Length: 99999999999999999999999",), 400),
    ],
    ids=[
        "missing",
        "chunked",
        "negative",
        "garbage",
        "exponent",
        "signed",
        "twice",
        "huge",
        "long",
    ],
)
def test_a_body_is_refused_before_a_byte_of_it_is_read(
    server: codec_server.CodecServer,
    path: str,
    extra: tuple[str, ...],
    length_headers: tuple[str, ...],
    status: int,
) -> None:
    """-1 was once rfile.read(-1): the server read until the client hung up, 200 MiB of it into
    memory, before any reply. Now the answer comes at once, the body unread, and the connection
    closes (what was sent would otherwise be read as the next request)."""
    started = time.monotonic()
    got, headers, closed = raw_exchange(
        server, post_head(path, *extra, *length_headers), b'{"payloads": ['
    )
    assert (got, headers.get("connection"), closed) == (status, "close", True)
    assert time.monotonic() - started < 1.0


def test_the_login_form_is_small(server: codec_server.CodecServer) -> None:
    status, _, closed = raw_exchange(server, post_head("/login", *LOGIN, "Content-Length: 4097"))
    assert (status, closed) == (413, True)


@pytest.mark.parametrize("path", ["/encode", "/decode", "/elsewhere"])
def test_no_body_is_read_without_the_token(server: codec_server.CodecServer, path: str) -> None:
    """A caller without the token is answered before its body: 200 MiB announced, none sent."""
    head = post_head(path, "Content-Type: application/json", f"Content-Length: {HUGE}")
    status, headers, closed = raw_exchange(server, head)
    assert (status, headers.get("connection"), closed) == (
        401 if path != "/elsewhere" else 404,
        "close",
        True,
    )


def test_a_body_shorter_than_its_length_is_a_400(server: codec_server.CodecServer) -> None:
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), port), timeout=2) as conn:
        head = post_head("/decode", *AUTHORIZED, "Content-Length: 100")
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + b'{"payloads"')
        conn.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 400 ") and b"ended before its Content-Length" in answer


def test_a_body_is_invited_only_once_it_is_wanted(server: codec_server.CodecServer) -> None:
    """`Expect: 100-continue` (curl sends it for large bodies): a refused request gets its error
    without the "100 Continue" that would invite the body; an accepted one gets it, then 200."""
    refused = post_head("/decode", *AUTHORIZED, "Expect: 100-continue", f"Content-Length: {HUGE}")
    assert raw_exchange(server, refused)[0] == 413
    unauthorized = post_head("/decode", "Expect: 100-continue", "Content-Length: 10")
    assert raw_exchange(server, unauthorized)[0] == 401

    body = json.dumps(payloads_json(PLAIN)).encode()
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), port), timeout=2) as conn:
        head = post_head(
            "/decode", *AUTHORIZED, "Expect: 100-continue", f"Content-Length: {len(body)}"
        )
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n")
        assert conn.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(body)
        assert conn.recv(65536).startswith(b"HTTP/1.1 200 OK")


def test_a_kept_alive_connection_still_serves_request_after_request(
    server: codec_server.CodecServer,
) -> None:
    """Refusals close their connection; answers to whole requests do not."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(host), port, timeout=5)
    try:
        body = json.dumps(payloads_json(PLAIN))
        for _ in range(3):
            connection.request(
                "POST", "/encode", body, {**BEARER, "Content-Type": "application/json"}
            )
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("Connection") is None
            response.read()
        connection.request("POST", "/decode", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        # Refused unread, the body would be taken for the next request: the 401 closes, and
        # the client opens a new connection for what follows.
        assert response.status == 401 and response.getheader("Connection") == "close"
        response.read()
        connection.request("POST", "/encode", body, {**BEARER, "Content-Type": "application/json"})
        assert connection.getresponse().status == 200
    finally:
        connection.close()


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_the_server_does_not_grow_on_an_unbounded_login(tmp_path: Path) -> None:
    """The reproduction against `python -m durable_agent.encryption.codec_server`: Content-Length
    -1 on /login and 200 MiB behind it. The answer comes before the body, and the process stays its
    size."""
    key_text = base64.b64encode(NEW.key).decode()
    process = subprocess.Popen(
        [sys.executable, "-m", "durable_agent.encryption.codec_server", "--port", "0"],
        cwd=tmp_path,
        env={"AGENT_PAYLOAD_KEYS": f"new={key_text}", "AGENT_CODEC_TOKEN": TOKEN},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        host, port = line.split("codec server on http://", 1)[1].split()[0].split(":")
        before = resident_bytes(process.pid)
        chunk = b"token=" + b"x" * (1024 * 1024)
        with socket.create_connection((host, int(port)), timeout=2) as conn:
            head = post_head("/login", *LOGIN, "Content-Length: -1")
            conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + chunk)
            assert conn.recv(65536).startswith(b"HTTP/1.1 400 ")
            sent = 0
            with contextlib.suppress(OSError):  # the server has closed: the pipe breaks
                while sent < 200:
                    conn.sendall(chunk)
                    sent += 1
            assert sent < 200, "the server took 200 MiB it had already refused"
        grown = resident_bytes(process.pid) - before
        assert grown < 16 * 1024 * 1024, f"the server grew by {grown / 2**20:.0f} MiB"
    finally:
        process.terminate()
        process.communicate(timeout=10)


# --- sessions ------------------------------------------------------------------------------------


def cookie_of(headers: dict[str, str]) -> tuple[str, set[str]]:
    """(name=value, the attributes) of a Set-Cookie header."""
    value, *attributes = (part.strip() for part in headers["Set-Cookie"].split(";"))
    return value, set(attributes)


def decodes_with(server: codec_server.CodecServer, session: str) -> int:
    encrypted = EncryptionCodec([NEW]).encrypt(PLAIN)
    headers = {"Cookie": session, "Origin": UI_ORIGIN}
    status, _, _ = request(server, "/decode", payloads_json(encrypted), headers=headers)
    return status


def test_each_sign_in_is_its_own_random_session(server: codec_server.CodecServer) -> None:
    """Once, the cookie was derived from the token: the same in every browser, forever, and
    valid on any server with that token. Now each sign-in draws its own."""
    first, attributes = cookie_of(sign_in(server, TOKEN)[1])
    second, _ = cookie_of(sign_in(server, TOKEN)[1])
    assert first != second
    assert f"Max-Age={codec_server.DEFAULT_SESSION_HOURS * 3600:.0f}" in attributes
    assert "Secure" not in attributes  # plain HTTP on localhost: a Secure cookie would not stick
    assert decodes_with(server, first) == 200 and decodes_with(server, second) == 200
    with serving(EncryptionCodec([NEW]), TOKEN, ui_origin=UI_ORIGIN) as restarted:
        assert decodes_with(restarted, first) == 401, "a session outlived its server"


def test_a_session_ends_on_the_server_too() -> None:
    """Max-Age asks the browser to forget the cookie; the server does not rely on it."""
    now = [1000.0]
    with serving(
        EncryptionCodec([NEW]), TOKEN, ui_origin=UI_ORIGIN, session_seconds=60, clock=lambda: now[0]
    ) as short:
        session, attributes = cookie_of(sign_in(short, TOKEN)[1])
        assert "Max-Age=60" in attributes
        now[0] += 59
        assert decodes_with(short, session) == 200
        now[0] += 1
        assert decodes_with(short, session) == 401
        now[0] -= 30  # gone for good once seen expired, whatever the clock says next
        assert decodes_with(short, session) == 401


def test_sign_ins_past_the_limit_push_out_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_server, "MAX_SESSIONS", 2)
    now = [0.0]
    with serving(EncryptionCodec([NEW]), TOKEN, ui_origin=UI_ORIGIN, clock=lambda: now[0]) as srv:
        sessions = []
        for _ in range(3):
            now[0] += 1
            sessions.append(cookie_of(sign_in(srv, TOKEN)[1])[0])
        assert [decodes_with(srv, s) for s in sessions] == [401, 200, 200]


def test_behind_tls_the_cookie_is_secure() -> None:
    with serving(EncryptionCodec([NEW]), TOKEN, ui_origin=UI_ORIGIN, secure_cookie=True) as srv:
        _, attributes = cookie_of(sign_in(srv, TOKEN)[1])
    assert {"Secure", "HttpOnly", "SameSite=Strict"} <= attributes


def test_the_command_reads_its_token_from_a_file_and_marks_the_cookie(tmp_path: Path) -> None:
    """As docker-compose runs it: the key and the token in files, behind a TLS proxy."""
    (tmp_path / "keys").write_text(f"new={base64.b64encode(NEW.key).decode()}\n")
    (tmp_path / "token").write_text(TOKEN + "\n")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durable_agent.encryption.codec_server",
            "--port",
            "0",
            "--behind-tls",
        ],
        cwd=tmp_path,
        env={
            "AGENT_PAYLOAD_KEYS_FILE": str(tmp_path / "keys"),
            "AGENT_CODEC_TOKEN_FILE": str(tmp_path / "token"),
        },
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        url = process.stderr.readline().split("codec server on ", 1)[1].split()[0]
        sent = urllib.request.Request(
            url + "/login",
            data=urllib.parse.urlencode({"token": TOKEN}).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(sent, timeout=5) as response:
            assert "Secure" in cookie_of(dict(response.headers))[1]
    finally:
        process.terminate()
        process.communicate(timeout=10)


def test_bad_token_and_session_settings_are_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", f"new={base64.b64encode(NEW.key).decode()}")
    monkeypatch.delenv("AGENT_CODEC_TOKEN", raising=False)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    cases = [
        ({"AGENT_CODEC_TOKEN_FILE": str(tmp_path / "missing")}, [], "cannot read"),
        ({"AGENT_CODEC_TOKEN_FILE": str(empty)}, [], "is empty"),
        ({"AGENT_CODEC_TOKEN_FILE": str(empty), "AGENT_CODEC_TOKEN": TOKEN}, [], "not both"),
        ({"AGENT_CODEC_TOKEN": TOKEN}, ["--session-hours", "0"], "more than 0"),
        ({"AGENT_CODEC_TOKEN": TOKEN, "AGENT_PAYLOAD_AAD": "maybe"}, [], "on or off"),
    ]
    for env, argv, expected in cases:
        with monkeypatch.context() as scoped:
            for name, value in env.items():
                scoped.setenv(name, value)
            assert codec_server.main(["--port", "0", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expected in err and TOKEN not in err, err


# --- associated data -----------------------------------------------------------------------------


def sealed_without_associated_data(key: PayloadKey, payload: Payload) -> Payload:
    """A payload as releases before associated data wrote it."""
    nonce = bytes(12)
    sealed = AESGCM(key.key).encrypt(nonce, payload.SerializeToString(), None)
    return Payload(
        metadata={"encoding": ENCODING, KEY_ID_METADATA: key.id.encode()}, data=nonce + sealed
    )


def test_payloads_are_sealed_with_associated_data_and_older_ones_still_open() -> None:
    codec = EncryptionCodec([NEW, OLD])
    sealed = codec.encrypt(PLAIN)
    assert sealed.metadata[AAD_METADATA] == b"v1"
    data = sealed.data
    with pytest.raises(InvalidTag):  # it really is bound: without the data it does not open
        AESGCM(NEW.key).decrypt(data[:12], data[12:], None)
    assert AESGCM(NEW.key).decrypt(data[:12], data[12:], associated_data("new"))
    assert codec.decrypt(sealed) == PLAIN
    assert codec.decrypt(sealed_without_associated_data(OLD, PLAIN)) == PLAIN


def test_moving_the_marker_on_or_off_a_payload_fails_it() -> None:
    codec = EncryptionCodec([NEW])
    stripped = codec.encrypt(PLAIN)
    del stripped.metadata[AAD_METADATA]
    added = sealed_without_associated_data(NEW, PLAIN)
    added.metadata[AAD_METADATA] = b"v1"
    relabelled = codec.encrypt(PLAIN)
    relabelled.metadata[AAD_METADATA] = b"v9"
    for altered in (stripped, added):
        with pytest.raises(PayloadKeyError, match="does not decrypt"):
            codec.decrypt(altered)
    with pytest.raises(PayloadKeyError, match="'v9', which this release does not know"):
        codec.decrypt(relabelled)


def test_associated_data_can_be_held_back_for_a_fleet_mid_upgrade() -> None:
    """AGENT_PAYLOAD_AAD=off: what an older release can open, read back all the same."""
    converter = data_converter({"AGENT_PAYLOAD_AAD": "off"}, keys=[NEW])
    codec = converter.payload_codec
    assert isinstance(codec, EncryptionCodec) and not codec.associated_data
    sealed = codec.encrypt(PLAIN)
    assert AAD_METADATA not in sealed.metadata
    assert Payload.FromString(AESGCM(NEW.key).decrypt(sealed.data[:12], sealed.data[12:], None))
    assert EncryptionCodec([NEW]).decrypt(sealed) == PLAIN
    assert associated_data_from_env({}) and associated_data_from_env({"AGENT_PAYLOAD_AAD": "ON"})
    with pytest.raises(PayloadKeyError, match="AGENT_PAYLOAD_AAD is 'yes'; expected on or off"):
        associated_data_from_env({"AGENT_PAYLOAD_AAD": "yes"})


def test_the_codec_server_decodes_both_forms(server: codec_server.CodecServer) -> None:
    both = payloads_json(
        EncryptionCodec([NEW]).encrypt(PLAIN), sealed_without_associated_data(OLD, PLAIN)
    )
    status, _, body = request(server, "/decode", both, headers=BEARER)
    assert status == 200 and parsed(body) == [PLAIN, PLAIN]


# --- corrupt payloads ----------------------------------------------------------------------------


def encrypted_data(data: bytes) -> Payload:
    """A payload that says it is encrypted with a known key, holding `data`."""
    metadata = {"encoding": ENCODING, KEY_ID_METADATA: b"new", AAD_METADATA: b"v1"}
    return Payload(metadata=metadata, data=data)


TOO_SHORT = [0, 7, 8, 27]
"""Bytes of data: less than a nonce (AESGCM itself refuses those with a bare ValueError), and
less than a nonce and its tag."""


@pytest.mark.parametrize("length", TOO_SHORT)
def test_a_payload_too_short_to_be_sealed_is_a_clear_400(
    server: codec_server.CodecServer, length: int
) -> None:
    """It used to drop the connection with a traceback, and no answer, under 8 bytes."""
    corrupt = encrypted_data(bytes(length))
    status, _, body = request(server, "/decode", payloads_json(corrupt), headers=BEARER)
    assert status == 400
    assert body["error"] == (
        f"a payload with key id 'new' has {length} bytes, too few for a nonce and a tag: it was "
        "cut short or altered"
    )


@pytest.mark.parametrize("length", TOO_SHORT)
def test_the_workers_codec_names_a_payload_too_short_to_be_sealed(length: int) -> None:
    with pytest.raises(PayloadKeyError, match=f"has {length} bytes, too few for a nonce"):
        asyncio.run(EncryptionCodec([NEW]).decode([encrypted_data(bytes(length))]))


def test_a_payload_that_decrypts_to_no_payload_is_a_clear_400(
    server: codec_server.CodecServer,
) -> None:
    """Sealed with the right key, but not a serialized payload: protobuf's DecodeError was
    another dropped connection."""
    nonce = bytes(12)
    sealed = AESGCM(NEW.key).encrypt(nonce, b"\xff\xff\xff", associated_data("new"))
    status, _, body = request(
        server, "/decode", payloads_json(encrypted_data(nonce + sealed)), headers=BEARER
    )
    assert status == 400
    assert body["error"] == (
        "a payload with key id 'new' decrypts to something that is not a payload: it was "
        "sealed by something other than this codec"
    )
