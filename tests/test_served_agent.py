"""The agent `durable-agent serve --agent FILE` offers through A2A and AG-UI
(serving/served_agent.py): read and checked as serve starts, so that a mistake in the file is one
line and exit code 2 then, never a failed run at a client's first message."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx2 as httpx
import pytest
from google.protobuf.json_format import MessageToDict
from temporalio.testing import WorkflowEnvironment

from durable_agent.client.contract import example_input
from durable_agent.serving.a2a_protocol import agent_card
from durable_agent.serving.served_agent import load_served_agent
from durable_agent.workflows.errors import AgentConfigurationError
from tests.serve_process import CLI, serving


def agent_file(tmp_path: Path, content: object) -> Path:
    path = tmp_path / "agent.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def without_prompt() -> dict[str, object]:
    return {k: v for k, v in example_input().items() if k != "prompt"}


def test_each_message_is_the_prompt_of_a_run_the_file_describes(tmp_path: Path) -> None:
    served = load_served_agent(agent_file(tmp_path, {**without_prompt(), "label": "support"}))
    agent_input = served.input("Where is order 1001?", conversation=True)
    assert agent_input.prompt == "Where is order 1001?" and agent_input.conversation
    assert agent_input.model.provider == "scripted" and agent_input.label == "support"
    assert served.name == "support"
    assert load_served_agent(agent_file(tmp_path, {})).name == "durable-agent"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{not json", "not JSON"),
        ([1, 2], "a JSON object is a run's input without its prompt"),
        ({"prompt": "hi"}, "prompt: set by each run"),
        ({"fork": None, "carried": None}, "carried, fork: set by each run"),
        ({"model": {"provider": "nobody"}}, "model.provider: Input should be"),
        ({"limits": {"max_steps": -1}}, "limits.max_steps: Input should be greater"),
    ],
)
def test_a_file_that_would_not_make_a_run_is_refused_saying_where(
    tmp_path: Path, content: object, said: str
) -> None:
    path = agent_file(tmp_path, content)
    with pytest.raises(AgentConfigurationError) as refused:
        load_served_agent(path)
    assert refused.value.message.startswith(f"--agent {path}: ") and said in refused.value.message


def test_a_missing_or_huge_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AgentConfigurationError, match="No such file"):
        load_served_agent(tmp_path / "nowhere.json")
    huge = agent_file(tmp_path, {"system": "x" * 1_000_001})
    with pytest.raises(AgentConfigurationError, match="over 1,000,000 bytes"):
        load_served_agent(huge)


def test_serve_refuses_a_bad_agent_file_in_one_line_before_it_starts(tmp_path: Path) -> None:
    path = agent_file(tmp_path, {"prompt": "hi"})
    done = subprocess.run(
        [CLI, "serve", "--agent", str(path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"durable-agent serve: error: --agent {path}: prompt: set by each run (the prompt is"
        " the client's message); leave it out"
    ]


CARD = {
    "name": "Shop support",
    "description": "Answers customers about their orders, and cancels one when asked.",
    "provider": {"organization": "Example Shop", "url": "https://shop.example"},
    "skills": [
        {
            "id": "orders",
            "name": "Orders",
            "description": "Where an order is, and cancelling it.",
            "tags": ["orders"],
            "examples": ["Where is order 1042?"],
        }
    ],
}


def test_the_card_file_says_what_the_operator_says_and_serve_keeps_how_it_is_reached(
    tmp_path: Path,
) -> None:
    card_file = tmp_path / "card.json"
    card_file.write_text(json.dumps(CARD))
    agent = agent_file(tmp_path, {**without_prompt(), "tools": ["get_order"]})
    card = agent_card(load_served_agent(agent, card_file))
    said = MessageToDict(card)
    assert {key: said[key] for key in CARD} == CARD
    assert [skill.id for skill in card.skills] == ["orders"]  # the file's skills, not the tools'
    assert said["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert said["capabilities"] == {"streaming": True, "pushNotifications": False}
    # Without a card file, the tools are the skills; with a name alone, it names the agent.
    card_file.write_text(json.dumps({"name": "Shop support"}))
    named = agent_card(load_served_agent(agent, card_file))
    assert named.name == "Shop support" and named.description.startswith("Shop support: ")
    assert [skill.id for skill in named.skills] == ["get_order"]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ({"securitySchemes": {}}, "securitySchemes: serve says how it is reached and guarded"),
        ({"capabilities": {"pushNotifications": True}}, "capabilities: serve says how"),
        ({"skills": [{"id": "s", "nickname": "x"}]}, "no field named"),
        ({"skills": [{"id": 1}]}, "Failed to parse id field"),
        ({"name": ["a list"]}, "Failed to parse name field"),
        ("[]", "a JSON object is the Agent Card's fields"),
    ],
)
def test_a_card_file_that_would_change_how_serve_is_reached_or_is_no_card_is_refused(
    tmp_path: Path, content: object, said: str
) -> None:
    card_file = tmp_path / "card.json"
    card_file.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(AgentConfigurationError) as refused:
        load_served_agent(agent_file(tmp_path, {}), card_file)
    assert refused.value.message.startswith(f"--agent-card {card_file}: ")
    assert said in refused.value.message


def test_serve_refuses_a_card_file_without_an_agent_in_one_line(tmp_path: Path) -> None:
    card_file = tmp_path / "card.json"
    card_file.write_text(json.dumps(CARD))
    done = subprocess.run(
        [CLI, "serve", "--agent-card", str(card_file), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "durable-agent serve: error: --agent-card describes the agent --agent offers: give"
        " --agent FILE too (see --help)"
    ]


async def test_serve_shows_the_card_files_words_on_its_agent_card(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    card_file = tmp_path / "card.json"
    card_file.write_text(json.dumps(CARD))
    agent = agent_file(tmp_path, without_prompt())
    address = temporal_env.client.service_client.config.target_host
    words = ("--address", address, "--agent", str(agent), "--agent-card", str(card_file))
    async with serving(*words) as api, httpx.AsyncClient(base_url=api.base_url) as anyone:
        card = (await anyone.get("/.well-known/agent-card.json")).json()
    assert (card["name"], card["provider"]) == (CARD["name"], CARD["provider"])
    assert card["skills"] == CARD["skills"]
    assert card["supportedInterfaces"][0]["url"] == f"{api.base_url}/a2a"
