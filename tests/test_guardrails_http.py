"""Guardrails through the doors other languages use: a run started over the HTTP API with
`guardrails` as a stranger writes them (plain names) is guarded; a policy the run could not
keep is refused at the door, typed; the contract's schema says what a name may be."""

from __future__ import annotations

import json
from typing import Any

import httpx2 as httpx
import jsonschema
import pytest

import tests.guardrails_for_tests  # noqa: F401  (the worker beside serve serves these)
from durable_agent.client.contract import contract
from tests.helpers import scripted_input, turn
from tests.test_http_api import sse


async def test_a_run_started_over_http_with_guardrails_is_guarded(api: httpx.AsyncClient) -> None:
    agent_input = scripted_input([turn(text="stupid"), turn(text="It ships Monday.")])
    body = agent_input.model_dump(mode="json", exclude_defaults=True)
    body["guardrails"] = {"input": ["no_injection"], "output": ["polite"]}
    started = await api.post("/api/runs", json=body)
    assert started.status_code == 201, started.text
    workflow_id = started.json()["workflow_id"]

    *progress, done = await sse(api, workflow_id)

    outcome = json.loads(done["data"])
    assert outcome["status"] == "completed", outcome
    assert outcome["result"]["answer"] == "It ships Monday."
    verdicts = [json.loads(e["data"]) for e in progress if e.get("event") == "guardrail"]
    assert [(v["text"].split(":")[0], v["outcome"]) for v in verdicts] == [
        ("input guardrail no_injection", "passed"),
        ("output guardrail polite", "tripped"),
        ("output guardrail polite", "passed"),
    ]
    records = [g for s in outcome["result"]["step_records"] for g in s.get("guardrails", [])]
    assert [(g["name"], g["kind"], g["tripped"]) for g in records] == [
        ("no_injection", "input", False),
        ("polite", "output", True),
        ("polite", "output", False),
    ]


BAD_POLICIES: dict[str, Any] = {
    "a name with a slash": {"input": ["a/b"]},
    "an empty name": {"output": [""]},
    "a blocking output guardrail": {"output": [{"name": "polite", "blocking": True}]},
    "a null list": {"input": None},
    "too many": {"input": [f"g{n}" for n in range(17)]},
    "endless revisions": {"output": ["polite"], "max_revisions": 1000},
    "a year-long check": {"input": ["x"], "timeout_seconds": 1e300},
}


@pytest.mark.parametrize("policy", BAD_POLICIES.values(), ids=list(BAD_POLICIES))
async def test_a_guardrail_policy_the_run_cannot_keep_is_refused_at_the_door(
    api: httpx.AsyncClient, policy: Any
) -> None:
    body = {"prompt": "hi", "guardrails": policy}

    refused = await api.post("/api/runs", json=body)

    assert refused.status_code == 422, refused.text
    assert "guardrails" in refused.text


def test_the_contract_describes_guardrail_policies() -> None:
    started = contract()["workflow"]["input"]
    validator = jsonschema.Draft202012Validator(started)
    assert validator.is_valid({"prompt": "hi", "guardrails": {"input": ["no_injection"]}})
    ref = {"name": "no_injection", "blocking": True}
    assert validator.is_valid({"prompt": "hi", "guardrails": {"input": [ref]}})
    for what, policy in BAD_POLICIES.items():
        if what != "a blocking output guardrail":  # a rule across fields: pydantic's alone
            assert not validator.is_valid({"prompt": "hi", "guardrails": policy}), what
