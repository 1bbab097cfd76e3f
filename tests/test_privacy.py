"""Encryption at rest: with keys configured, a whole run's history holds none of its prompt, tool
arguments, tool results, failure messages or API key, while a client with the keys reads it all.

Each scan decodes every base64 string of the history JSON too (payload data is base64 there), and
a control run without encryption shows that the same scan finds the same texts in plain history.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.query.v1 import WorkflowQuery
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.api.workflowservice.v1 import QueryWorkflowRequest, RegisterNamespaceRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.activities import telemetry
from durable_agent.cli import worker
from durable_agent.client.agent_client import ensure_search_attributes
from durable_agent.encryption.payload_codec import (
    AGENT_DATA_CONVERTER,
    ENCODING,
    EncryptionCodec,
    PayloadKey,
    PayloadKeyError,
    data_converter,
    keys_from_env,
)
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, AgentResult
from durable_agent.workflows.model_settings import ModelSettings
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, call, scripted_input, turn

KEY_A = PayloadKey("key-a", bytes(range(32)))
KEY_B = PayloadKey("key-b", bytes(range(100, 132)))

PROMPT = "Where is my parcel? The code word is QUOKKA-7731."
ARGUMENT = "WOMBAT-ARGUMENT-5150"
"""The argument of a tool that fails with it in its exception's message."""
EMAIL = "a@b.com"
"""A tool argument (get_customer's)."""
TRACKING_NUMBER = "1Z999AA10123456784"
"""A tool result (get_tracking's, for order 1042)."""
CUSTOMER_NAME = "Ada Byron"
"""A tool result (get_customer's)."""
ANSWER = "Ada, order 1042 arrived: PANGOLIN-ANSWER."
API_KEY = "sk-test-SECRET-9f8e7d6c5b4a"

SCRIPTED_SECRETS = (PROMPT, ARGUMENT, EMAIL, TRACKING_NUMBER, CUSTOMER_NAME, ANSWER)
ALLOWED_STATUSES = {"running", "awaiting_approval", "compensating", "completed", "failed"}


ISOLATED_NAMESPACE = "encrypted-runs"


async def in_isolated_namespace(client: Client) -> Client:
    """The session's server, in a namespace of its own: other tests list every closed run of
    `default`, and their clients, without the keys, cannot read encrypted ones."""
    try:
        await client.workflow_service.register_namespace(
            RegisterNamespaceRequest(
                namespace=ISOLATED_NAMESPACE,
                workflow_execution_retention_period=Duration(seconds=86_400),
            )
        )
    except RPCError as error:
        if error.status != RPCStatusCode.ALREADY_EXISTS:
            raise
    isolated = with_converter(client, client.data_converter, namespace=ISOLATED_NAMESPACE)
    await ensure_search_attributes(isolated)
    return isolated


@pytest.fixture
async def client(client: Client) -> Client:
    return await in_isolated_namespace(client)


def with_converter(base: Client, converter: DataConverter, **options: Any) -> Client:
    """Another client on the session's server connection, with its own data converter."""
    options.setdefault("namespace", base.namespace)
    return Client(base.service_client, data_converter=converter, **options)


def texts_of_history(history_json: str) -> list[str]:
    """The history JSON, and the decoded text of each of its base64 strings."""
    texts = [history_json]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and len(value) >= 4:
            with contextlib.suppress(binascii.Error, ValueError):
                texts.append(base64.b64decode(value, validate=True).decode(errors="replace"))

    walk(json.loads(history_json))
    return texts


def found_in(texts: list[str], secrets: tuple[str, ...]) -> list[str]:
    return [s for s in secrets if any(s in text for text in texts)]


async def raw_query(client: Client, workflow_id: str, query_type: str) -> Payload:
    """A query's answer as the server relays it, before any codec."""
    response = await client.workflow_service.query_workflow(
        QueryWorkflowRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=workflow_id),
            query=WorkflowQuery(query_type=query_type),
        )
    )
    return response.query_result.payloads[0]


def scripted_run_input() -> AgentInput:
    return scripted_input(
        [
            turn(call("get_customer", email=EMAIL), call("get_tracking", order_id=1042)),
            turn(call("always_fails", secret=ARGUMENT)),
            turn(text=ANSWER),
        ],
        prompt=PROMPT,
        tools=["get_customer", "get_tracking", "always_fails"],
    )


@dataclass
class Finished:
    handle: WorkflowHandle[Any, AgentResult]
    result: AgentResult
    history_json: str
    status: Any
    """The `status` query's answer, read by the worker's client (so with its converter)."""
    transcript: list[Any]
    status_payload: Payload
    transcript_payload: Payload
    metadata_payload: Payload


async def run_to_the_end(
    worker_client: Client, reader: Client, task_queue: str, agent_input: AgentInput
) -> Finished:
    """Run on a worker of `worker_client`; the history and raw query answers read by `reader`."""
    async with build_worker(worker_client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await worker_client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"privacy-{uuid.uuid4()}", task_queue=task_queue
        )
        result = await handle.result()
        status = await handle.query("status")
        transcript = await handle.query("transcript")
        answers = [
            await raw_query(reader, handle.id, name)
            for name in ("status", "transcript", "__temporal_workflow_metadata")
        ]
    history = await reader.get_workflow_handle(handle.id).fetch_history()
    return Finished(handle, result, history.to_json(), status, transcript, *answers)


@pytest.fixture
def encrypted(client: Client) -> Client:
    return with_converter(client, data_converter(keys=[KEY_A]))


async def test_plain_history_shows_the_texts_the_scan_looks_for(
    client: Client, task_queue: str
) -> None:
    """The control: without encryption, the scan finds every text (so it can find a leak)."""
    run = await run_to_the_end(client, client, task_queue, scripted_run_input())
    assert found_in(texts_of_history(run.history_json), SCRIPTED_SECRETS) == list(SCRIPTED_SECRETS)


async def test_encrypted_history_holds_no_content_and_the_keys_read_it_all(
    client: Client, encrypted: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    run = await run_to_the_end(encrypted, client, task_queue, scripted_run_input())

    assert run.result.answer == ANSWER
    texts = texts_of_history(run.history_json)
    assert found_in(texts, SCRIPTED_SECRETS) == []
    # Every payload is ciphertext: inputs, results, activity summaries, failure attributes.
    history = json.loads(run.history_json)
    payloads = list(_payloads(history))
    assert payloads and all(_encoding(p) == ENCODING for p in payloads), {
        _encoding(p) for p in payloads
    }
    summaries = [e for e in history["events"] if e.get("userMetadata", {}).get("summary")]
    assert summaries, "the activities' summaries are missing: nothing checked"
    failures = [_failure(e) for e in history["events"] if _failure(e)]
    assert failures, "no activity failed: the failure converter is not checked"
    for failure in failures:
        assert failure["message"] == "Encoded failure" and not failure.get("stackTrace")
        assert _encoding(failure["encodedAttributes"]) == ENCODING

    # Query answers (the status, the transcript, the current details) are ciphertext too.
    for payload in (run.status_payload, run.transcript_payload, run.metadata_payload):
        assert payload.metadata["encoding"] == ENCODING
    codec = EncryptionCodec([KEY_A])
    metadata = WorkflowMetadata()
    json_format.Parse(codec.decrypt(run.metadata_payload).data, metadata)
    assert metadata.current_details.startswith("**Completed**: completed in 3 steps")

    # Search attributes are not encoded: they say only how far the run got.
    description = await run.handle.describe()
    attributes = {k.name: v for k, v in description.typed_search_attributes}
    assert attributes["AgentStatus"] == "completed" and attributes["AgentStep"] == 3

    # With the keys, everything reads: the result, the queries, every payload of the history.
    assert run.status["status"] == "completed" and run.transcript[0]["content"] == PROMPT
    assert (await encrypted.get_workflow_handle(run.handle.id).result())["answer"] == ANSWER
    readable = [codec.decrypt(json_format.ParseDict(p, Payload())).data for p in payloads]
    assert found_in([b.decode() for b in readable], SCRIPTED_SECRETS) == list(SCRIPTED_SECRETS)

    # The worker's own log lines say which tool ran, not with what.
    logged = [record.getMessage() for record in caplog.records]
    assert logged and found_in(logged, SCRIPTED_SECRETS) == []


def _payloads(value: Any) -> Iterator[dict[str, Any]]:
    """Every Payload in the history JSON: a dict with `metadata` holding an `encoding`, outside
    search attributes (never encoded, checked apart), the SDK's patch markers (a patch's id,
    which the SDK writes past the codec) and the `data` of a local activity's marker (its
    sequence number, attempt, activity type and times, which the SDK core writes past the
    codec; the activity's result beside it, the run's tool specs, is encoded)."""
    if isinstance(value, dict):
        if "encoding" in value.get("metadata", {}):
            yield value
            return
        skipped = {"searchAttributes", "patch-data"}
        if value.get("markerName") == "core_local_activity":
            details = value.get("details", {})
            assert "result" in details, "a local activity's result is missing: nothing checked"
            yield from _payloads(details["result"])
            return
        for key, item in value.items():
            if key not in skipped:
                yield from _payloads(item)
    elif isinstance(value, list):
        for item in value:
            yield from _payloads(item)


def _encoding(payload: dict[str, Any]) -> bytes:
    return base64.b64decode(payload["metadata"]["encoding"])


def _failure(event: dict[str, Any]) -> dict[str, Any] | None:
    for key in ("activityTaskFailedEventAttributes", "activityTaskStartedEventAttributes"):
        failure = event.get(key, {}).get("failure") or event.get(key, {}).get("lastFailure")
        if failure:
            return dict(failure)
    return None


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on, through a test-local provider, with content capture off (its default)."""
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT_VARIABLE, raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(provider)
    try:
        yield exporter
    finally:
        telemetry.configure(None)
        provider.shutdown()


def span_texts(exporter: InMemorySpanExporter) -> list[str]:
    """What each span holds: name, status, attributes and its events' attributes."""
    return [
        json.dumps(
            [
                span.name,
                span.status.description,
                dict(span.attributes or {}),
                [(e.name, dict(e.attributes or {})) for e in span.events],
            ],
            default=str,
        )
        for span in exporter.get_finished_spans()
    ]


async def test_traces_hold_no_content_not_even_a_failing_tools_message(
    client: Client, task_queue: str, spans: InMemorySpanExporter
) -> None:
    """Temporal's interceptor would put `ValueError: internal detail <argument>` in the failed
    RunActivity spans; telemetry keeps the type only."""
    traced = with_converter(
        client, data_converter(keys=[KEY_A]), interceptors=telemetry.interceptors()
    )
    run = await run_to_the_end(traced, client, task_queue, scripted_run_input())

    assert run.result.answer == ANSWER
    failed = [s for s in spans.get_finished_spans() if s.name == "RunActivity:always_fails"]
    assert len(failed) == 3 and {s.status.description for s in failed} == {"ValueError"}
    assert {e.name for s in failed for e in s.events} == {"exception"}
    assert found_in(span_texts(spans), SCRIPTED_SECRETS) == []


async def test_an_openai_run_keeps_the_api_key_out_of_history_logs_and_spans(
    client: Client,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    spans: InMemorySpanExporter,
) -> None:
    """Through the real openai SDK, against the local fake, with tracing and encryption on."""
    caplog.set_level(logging.INFO)
    script = [
        Reply(tool_calls=[("call_cust", "get_customer", json.dumps({"email": EMAIL}))]),
        Reply(ANSWER),
    ]
    with FakeOpenAI(script, api_key=API_KEY) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        worker_client = with_converter(
            client, data_converter(keys=[KEY_A]), interceptors=telemetry.interceptors()
        )
        agent_input = AgentInput(
            prompt=PROMPT,
            tools=["get_customer"],
            model=ModelSettings(provider="openai", model="gpt-fake", retry=FAST_MODEL_RETRY),
        )
        run = await run_to_the_end(worker_client, client, task_queue, agent_input)

    assert run.result.answer == ANSWER
    # The key was really sent, and the tool really ran: there was something to leak.
    assert [r.headers["authorization"] for r in fake.requests] == [f"Bearer {API_KEY}"] * 2
    assert CUSTOMER_NAME in json.dumps(fake.requests[1].body)
    secrets = (API_KEY, PROMPT, EMAIL, CUSTOMER_NAME, ANSWER)
    assert found_in(texts_of_history(run.history_json), secrets) == []
    # The key is not even in the ciphertext: decrypted, the history holds the content only.
    codec = EncryptionCodec([KEY_A])
    decrypted = [
        codec.decrypt(json_format.ParseDict(p, Payload())).data.decode()
        for p in _payloads(json.loads(run.history_json))
    ]
    assert found_in(decrypted, secrets) == [PROMPT, EMAIL, CUSTOMER_NAME, ANSWER]

    # Logs (tracebacks included) and spans hold neither the key nor the content.
    assert caplog.records and found_in([caplog.text], secrets) == []
    names = {s.name for s in spans.get_finished_spans()}
    assert {"chat gpt-fake", "execute_tool get_customer", "RunActivity:call_model"} <= names
    assert found_in(span_texts(spans), secrets) == []


async def test_runs_from_before_a_rotation_still_read(
    client: Client, encrypted: Client, task_queue: str
) -> None:
    old = await run_to_the_end(encrypted, client, task_queue, scripted_run_input())
    rotated = with_converter(client, data_converter(keys=[KEY_B, KEY_A]))
    async with build_worker(rotated, task_queue, **TEST_WORKER_OPTIONS):
        old_run = rotated.get_workflow_handle_for(AgentWorkflow.run, old.handle.id)
        # A worker that never saw the run replays it to answer: it decodes key A's payloads.
        transcript = await old_run.query(AgentWorkflow.transcript)
        assert transcript[0].content == PROMPT
        assert (await old_run.result()).answer == ANSWER
        new_run = await rotated.start_workflow(
            AgentWorkflow.run,
            scripted_run_input(),
            id=f"rotated-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        assert (await new_run.result()).answer == ANSWER
    new_history = (await client.get_workflow_handle(new_run.id).fetch_history()).to_json()
    assert _key_ids(old.history_json) == {b"key-a"}
    assert _key_ids(new_history) == {b"key-b"}

    # A client that lost key A says which key it lacks.
    only_b = with_converter(client, data_converter(keys=[KEY_B]))
    with pytest.raises(PayloadKeyError, match=r"key id 'key-a', which is not configured"):
        await only_b.get_workflow_handle(old.handle.id).result()


async def test_encryption_turned_on_later_still_reads_the_plain_runs(
    client: Client, encrypted: Client, task_queue: str
) -> None:
    plain = await run_to_the_end(client, client, task_queue, scripted_run_input())
    handle = encrypted.get_workflow_handle_for(AgentWorkflow.run, plain.handle.id)
    assert (await handle.result()).answer == ANSWER


def _key_ids(history_json: str) -> set[bytes]:
    return {
        base64.b64decode(p["metadata"]["encryption-key-id"])
        for p in _payloads(json.loads(history_json))
    }


# --- the key configuration -------------------------------------------------------------------

KEY_TEXT = base64.b64encode(KEY_A.key).decode()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (" , ", "no keys"),
        ("key-a", "entry 1 is not id=base64key"),
        (f"={KEY_TEXT}", "entry 1 is not id=base64key"),
        (f"key a={KEY_TEXT}", "may only have letters"),
        ("key-a=%%%", "the key of id 'key-a' is not base64"),
        (f"key-a={base64.b64encode(b'short').decode()}", "is 5 bytes; AES-GCM needs 16, 24 or 32"),
        (f"key-a={KEY_TEXT},key-a={KEY_TEXT}", "key id 'key-a' appears twice"),
    ],
)
def test_a_malformed_key_configuration_is_one_clear_line(value: str, error: str) -> None:
    with pytest.raises(PayloadKeyError) as raised:
        data_converter({"AGENT_PAYLOAD_KEYS": value})
    message = str(raised.value)
    assert message.startswith("AGENT_PAYLOAD_KEYS: ") and error in message
    assert "\n" not in message and KEY_TEXT not in message


def test_keys_come_from_the_variable_or_a_file(tmp_path: Any) -> None:
    assert keys_from_env({}) is None
    assert data_converter({}) is AGENT_DATA_CONVERTER
    pair_b = f"key-b={base64.b64encode(KEY_B.key).decode()}"
    assert keys_from_env({"AGENT_PAYLOAD_KEYS": f"{pair_b}, key-a={KEY_TEXT}"}) == [KEY_B, KEY_A]

    path = tmp_path / "keys"
    path.write_text(f"# rotated on 2026-11-29\n{pair_b}\nkey-a={KEY_TEXT}  # the old one\n")
    assert keys_from_env({"AGENT_PAYLOAD_KEYS_FILE": str(path)}) == [KEY_B, KEY_A]
    converter = data_converter({"AGENT_PAYLOAD_KEYS_FILE": str(path)})
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert converter.payload_codec.key_id == "key-b"

    with pytest.raises(PayloadKeyError, match=r"cannot read .*missing"):
        keys_from_env({"AGENT_PAYLOAD_KEYS_FILE": str(tmp_path / "missing")})
    with pytest.raises(PayloadKeyError, match="not both"):
        keys_from_env({"AGENT_PAYLOAD_KEYS": pair_b, "AGENT_PAYLOAD_KEYS_FILE": str(path)})


def test_tampered_or_misattributed_ciphertext_does_not_decrypt() -> None:
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')
    sealed = EncryptionCodec([KEY_A]).encrypt(plain)
    assert EncryptionCodec([KEY_A]).decrypt(sealed) == plain
    tampered = Payload()
    tampered.CopyFrom(sealed)
    tampered.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(PayloadKeyError, match="does not decrypt"):
        EncryptionCodec([KEY_A]).decrypt(tampered)
    # Another key under the same id: the tag check catches it.
    with pytest.raises(PayloadKeyError, match="does not decrypt"):
        EncryptionCodec([PayloadKey("key-a", KEY_B.key)]).decrypt(sealed)
    # Two encryptions of one payload differ (a fresh nonce each).
    assert EncryptionCodec([KEY_A]).encrypt(plain).data != sealed.data


def test_the_worker_exits_2_on_a_malformed_key_configuration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", "key-a=c2hvcnQ=")
    assert worker.main(["--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "worker.py: error: AGENT_PAYLOAD_KEYS: the key of id 'key-a' is 5 bytes; AES-GCM needs "
        "16, 24 or 32\n"
    )
