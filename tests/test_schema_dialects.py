"""No schema check does I/O (issue 47).

The root `$schema` of an output schema or a callback tool's schema named a meta-schema that the
engine fetched over HTTP, from inside the workflow task and again at every replay: a blind
request from the worker's network position, whose answer was then trusted; an unreachable one
raised an error that wedged the run. A schema may now declare Draft 2020-12 or nothing; another
dialect fails the run as it starts, with the reason, and nothing is fetched. Here a local server
plays the URL a schema names (answering a meta-schema that accepts anything, as an attacker
would) and counts the requests it gets, under the worker `durable-agent worker` runs.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

import durable_agent.workflows.json_schema as json_schema
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, AgentResult, CallbackTool
from tests.helpers import call, scripted_input, turn

ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


class MetaSchemaServer:
    """A URL a schema may name, on this machine, counting the requests it gets."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Answer(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                body = json.dumps({"$id": f"http://{self.headers['Host']}{self.path}"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/meta-schema"

    def __enter__(self) -> MetaSchemaServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def meta_schema() -> Iterator[MetaSchemaServer]:
    with MetaSchemaServer() as server:
        yield server


async def refused_as_it_starts(client: Client, task_queue: str, agent_input: AgentInput) -> str:
    """The run's failure, before any model call, under the shipped worker's settings."""
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"dialect-{uuid.uuid4()}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), timeout=30)
        history = await handle.fetch_history()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "AgentConfigurationError", cause
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "call_model" not in scheduled
    return cause.message


def finishing(schema: dict[str, Any]) -> AgentInput:
    return scripted_input(
        [turn(call("finish", answer="delivered"))], tools=[], output_schema=schema
    )


async def test_an_output_schema_naming_a_url_fails_the_run_and_nothing_is_fetched(
    client: Client, task_queue: str, meta_schema: MetaSchemaServer
) -> None:
    said = await refused_as_it_starts(
        client, task_queue, finishing({"$schema": meta_schema.url, **ANSWER})
    )
    assert said.startswith("output_schema declares $schema")
    assert meta_schema.url in said and json_schema.DRAFT_2020_12 in said
    assert meta_schema.requests == []


async def test_a_callback_tools_schemas_naming_a_url_fail_the_run_and_nothing_is_fetched(
    client: Client, task_queue: str, meta_schema: MetaSchemaServer
) -> None:
    for part in ("parameters", "result"):
        schema = {"$schema": f"{meta_schema.url}/{part}", "type": "object"}
        tool = CallbackTool(name="ask_user", description="Ask the user.", **{part: schema})
        agent_input = scripted_input([turn(text="never asked")], callback_tools=[tool])
        said = await refused_as_it_starts(client, task_queue, agent_input)
        assert said.startswith(f"callback tool 'ask_user' {part} declares $schema"), said
    assert meta_schema.requests == []


async def test_an_unreachable_schema_url_fails_the_run_typed(
    client: Client, task_queue: str
) -> None:
    with MetaSchemaServer() as gone:
        url = gone.url
    said = await refused_as_it_starts(client, task_queue, finishing({"$schema": url, **ANSWER}))
    assert "declares $schema" in said


async def test_draft_2020_12_declared_or_not_is_checked_as_before(
    client: Client, task_queue: str
) -> None:
    for declared in ({}, {"$schema": json_schema.DRAFT_2020_12}):
        async with build_worker(client, task_queue):
            result: AgentResult = await client.execute_workflow(
                AgentWorkflow.run,
                finishing({**declared, **ANSWER}),
                id=f"dialect-{uuid.uuid4()}",
                task_queue=task_queue,
            )
        assert result.output == {"answer": "delivered"}


@pytest.mark.parametrize(
    "schema",
    [
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
        {"$schema": 5},
        {"$dynamicRef": "http://127.0.0.1:9/elsewhere"},
        {"$ref": "#/$defs/missing"},
        {"$id": "http://127.0.0.1:9/base", "properties": {"a": {"$ref": "other"}}},
    ],
    ids=["another draft", "not a URI", "a dynamic ref outside", "a missing ref", "a relative ref"],
)
def test_every_error_of_the_engine_is_the_typed_refusal(schema: dict[str, Any]) -> None:
    with pytest.raises(json_schema.SchemaRefused):
        json_schema.check(schema)


def test_a_run_recorded_before_reads_a_dialect_the_engine_carries_and_fetches_none(
    meta_schema: MetaSchemaServer,
) -> None:
    """As runs recorded before the refusal replay it (tests/histories/foreign_dialect.json):
    a dialect the engine carries is read as it was, another is left out, never fetched."""
    draft_07 = {"$schema": "http://json-schema.org/draft-07/schema#", **ANSWER}
    json_schema.check(draft_07, foreign_dialects_refused=False)
    with pytest.raises(json_schema.SchemaRefused, match="declares"):
        json_schema.check(draft_07)
    json_schema.check({"$schema": meta_schema.url, **ANSWER}, foreign_dialects_refused=False)
    assert meta_schema.requests == []
