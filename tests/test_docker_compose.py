"""docker-compose.yml, the Dockerfile and .dockerignore, checked as files: there is no Docker engine
in the test run, so the structure is what is tested (services, images, ports, dependencies, who
gets the key, where the stores are). The key one-shot's script runs for real, on this machine."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import uuid
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from temporalio.common import SearchAttributeKey

from durable_agent.activities.store_check import StoreNotWritable, check_postgres
from durable_agent.client import forking
from durable_agent.encryption.payload_codec import keys_from_env
from durable_agent.workflows import status
from tests.package_layout import PACKAGE_DIRS
from tests.postgres import PostgresServer, bin_dir

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

EXPECTED_SERVICES = {
    "postgresql",
    "temporal",
    "temporal-admin-tools",
    "register-search-attributes",
    "temporal-ui",
    "payload-key",
    "codec-server",
    "worker",
    "store-database",
    "db-passwords",
}
BUILT_HERE = ("payload-key", "codec-server", "worker")
EXPECTED_IMAGES = {
    "postgresql": "postgres",
    "temporal": "temporalio/auto-setup",
    "temporal-admin-tools": "temporalio/admin-tools",
    "register-search-attributes": "temporalio/admin-tools",
    "temporal-ui": "temporalio/ui",
    "store-database": "postgres",
    "db-passwords": "postgres",
}
SEARCH_ATTRIBUTES = {
    "AgentStatus": "Keyword",
    "AgentStep": "Int",
    "AgentCostUsd": "Double",
    "AgentError": "Keyword",
    "AgentForkedFrom": "Keyword",
}
PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
TEMPORAL_ADDRESS = "temporal:7233"
STORES = ("AGENT_DEMO_DB",)
"""The files compose's workers write; the message and result stores are in PostgreSQL."""
IMAGE_STORES = ("AGENT_MESSAGE_STORE", "AGENT_RESULT_STORE", "AGENT_DEMO_DB")
"""The files the image's worker writes without AGENT_STORE_URL (`docker run` alone)."""
STORE_SCRIPT = ROOT / "deploy" / "store-database.sh"
IMAGE_UID = "10001"
KEY_SCRIPT = ROOT / "deploy" / "payload-key.sh"


# --- reading the files ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(loaded, dict), "docker-compose.yml is not a mapping"
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose.get("services")
    assert isinstance(found, dict) and found, "docker-compose.yml has no services"
    return found


def image_ref(image: str) -> tuple[str, str | None]:
    """`repo[:tag][@digest]` -> (repo, tag); a registry port (`host:5000/x`) is not a tag."""
    name = image.split("@", 1)[0]
    repo, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:
        return name, None
    return repo, tag


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    """Either form of `environment`, as a mapping (a bare `NAME` means: passed from the host)."""
    env = service.get("environment") or {}
    if isinstance(env, dict):
        return {str(k): None if v is None else str(v) for k, v in env.items()}
    pairs: dict[str, str | None] = {}
    for item in env:
        name, equals, value = str(item).partition("=")
        pairs[name] = value if equals else None
    return pairs


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """Dependency -> condition; the list form means `service_started`."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def published_ports(service: dict[str, Any]) -> set[tuple[str | None, str]]:
    """(host port or None, container port) for every `ports` entry, short or long syntax."""
    return {(host, container) for _, host, container in bound_ports(service)}


def bound_ports(service: dict[str, Any]) -> set[tuple[str | None, str | None, str]]:
    """(host address or None for every address, host port or None, container port)."""
    ports: set[tuple[str | None, str | None, str]] = set()
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            published = entry.get("published")
            ports.add(
                (
                    entry.get("host_ip") or None,
                    None if published is None else str(published),
                    str(entry["target"]),
                )
            )
            continue
        parts = str(entry).split("/", 1)[0].rsplit(":", 2)  # [ip:][host:]container[/proto]
        host = parts[-2] if len(parts) > 1 else ""
        address = parts[-3] if len(parts) > 2 else ""
        ports.add((address or None, host or None, parts[-1]))
    return ports


def mounts(service: dict[str, Any]) -> list[tuple[str | None, str]]:
    """(source or None, target) for every `volumes` entry, short or long syntax."""
    return [(source, target) for source, target, _ in mounts_with_mode(service)]


def mounts_with_mode(service: dict[str, Any]) -> list[tuple[str | None, str, bool]]:
    """(source or None, target, read-only) for every `volumes` entry."""
    found: list[tuple[str | None, str, bool]] = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            found.append((entry.get("source"), str(entry["target"]), bool(entry.get("read_only"))))
            continue
        parts = str(entry).split(":")
        if len(parts) == 1:
            found.append((None, parts[0], False))
            continue
        options = parts[2].split(",") if len(parts) > 2 else []
        found.append((parts[0], parts[1], "ro" in options))
    return found


def volume_holding(service: dict[str, Any], path: str) -> tuple[str | None, str, bool] | None:
    """The mount (source, target, read-only) whose target holds `path`, the deepest one."""
    holding = [
        mount
        for mount in mounts_with_mode(service)
        if PurePosixPath(path).is_relative_to(PurePosixPath(mount[1]))
    ]
    return max(holding, key=lambda mount: len(mount[1]), default=None)


def is_named_volume(source: str | None) -> bool:
    return source is not None and not source.startswith((".", "/", "~", "$"))


def command_text(service: dict[str, Any]) -> str:
    words: list[str] = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if isinstance(value, list):
            words.extend(str(word) for word in value)
        elif value is not None:
            words.append(str(value))
    return " ".join(words)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    if pending:
        logical.append(pending)
    instructions = []
    for text in logical:
        keyword, _, arguments = text.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def exec_or_shell_words(arguments: str) -> list[str]:
    if arguments.startswith("["):
        return [str(word) for word in json.loads(arguments)]
    return shlex.split(arguments)


def dockerignore_patterns() -> list[str]:
    return [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps `path` (or a directory above it) out of the build context.
    The last matching pattern decides; `!pattern` lets a path back in."""
    parts = PurePosixPath(path).parts
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.removeprefix("!").strip().strip("/")
        if pattern.startswith("**/"):
            tail = pattern.removeprefix("**/")
            candidates = [
                "/".join(prefix.split("/")[i:])
                for prefix in prefixes
                for i in range(len(prefix.split("/")))
            ]
            hit = any(fnmatch(candidate, tail) for candidate in candidates)
        else:
            hit = any(fnmatch(prefix, pattern) for prefix in prefixes)
        if hit:
            excluded = not negate
    return excluded


class _UniqueKeyLoader(yaml.SafeLoader):
    """Compose rejects a key given twice in one mapping; PyYAML would keep the last silently."""


def _mapping_without_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Any:
    keys = [loader.construct_object(key_node) for key_node, _ in node.value]
    repeated = {key for key in keys if keys.count(key) > 1}
    assert not repeated, f"docker-compose.yml line {node.start_mark.line + 1}: {repeated} twice"
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


# --- services and images -------------------------------------------------------------------------


def test_compose_file_has_no_duplicate_keys() -> None:
    yaml.load(COMPOSE_FILE.read_text(), Loader=_UniqueKeyLoader)  # a SafeLoader subclass


def test_expected_services_exist(services: dict[str, dict[str, Any]]) -> None:
    missing = EXPECTED_SERVICES - services.keys()
    assert not missing, f"docker-compose.yml lacks the services {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(EXPECTED_IMAGES))
def test_image_is_the_expected_one_and_pinned(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    image = services[name].get("image")
    assert isinstance(image, str), f"{name} has no image"
    repo, tag = image_ref(image)
    assert repo == EXPECTED_IMAGES[name], f"{name} runs {repo}, expected {EXPECTED_IMAGES[name]}"
    assert tag is not None, f"{name}: {image} has no tag, which means latest"
    assert tag != "latest" and "latest" not in tag, f"{name}: {image} is not pinned"
    assert re.fullmatch(r"\d+(\.\d+)*([-.][\w.-]+)?", tag), (
        f"{name}: {image!r} has no literal version tag (a ${{VARIABLE}} is not a pin)"
    )


def test_every_image_is_pinned(services: dict[str, dict[str, Any]]) -> None:
    """Services added later too: an image without a tag, or with `latest`, is not reproducible."""
    for name, service in services.items():
        if "image" not in service:
            assert "build" in service, f"{name} has neither an image nor a build"
            continue
        _, tag = image_ref(str(service["image"]))
        assert tag not in (None, "latest"), f"{name}: {service['image']} is not pinned"


def test_temporal_server_version_is_1_2x_or_1_3x_and_matches_admin_tools(
    services: dict[str, dict[str, Any]],
) -> None:
    _, server = image_ref(services["temporal"]["image"])
    assert server is not None and re.match(r"1\.[23]\d\.\d+", server), server
    for tools in ("temporal-admin-tools", "register-search-attributes"):
        _, tag = image_ref(services[tools]["image"])
        assert tag is not None and re.match(rf"{re.escape(server)}(\b|-)", tag), (
            f"{tools} ({tag}) is not built for server {server}"
        )


def test_postgres_image_has_a_major_version(services: dict[str, dict[str, Any]]) -> None:
    _, tag = image_ref(services["postgresql"]["image"])
    assert tag is not None and re.match(r"\d+", tag), f"postgres:{tag} names no major version"


# --- ports ---------------------------------------------------------------------------------------


def test_ports_are_strings(services: dict[str, dict[str, Any]]) -> None:
    """Unquoted `a:b` can load as a base-60 integer in YAML 1.1: quote every short port."""
    for name, service in services.items():
        for entry in service.get("ports") or []:
            assert isinstance(entry, str | dict), f"{name}: port {entry!r} is not a string"


def test_frontend_ui_and_codec_ports_are_published(services: dict[str, dict[str, Any]]) -> None:
    assert ("7233", "7233") in published_ports(services["temporal"]), (
        "the frontend is not on localhost:7233, where starter.py --address expects it"
    )
    assert ("8080", "8080") in published_ports(services["temporal-ui"]), (
        "the Web UI is not on localhost:8080"
    )
    assert ("8081", "8081") in published_ports(services["codec-server"]), (
        "the codec server is not on localhost:8081, where the Web UI is pointed"
    )


def test_only_the_frontend_the_ui_and_the_codec_server_publish_host_ports(
    services: dict[str, dict[str, Any]],
) -> None:
    publishing = {name for name, service in services.items() if service.get("ports")}
    assert publishing <= {"temporal", "temporal-ui", "codec-server"}, (
        f"unexpected host ports: {publishing}"
    )


def test_every_published_port_is_bound_to_loopback(services: dict[str, dict[str, Any]]) -> None:
    """Nothing in the stack checks who calls: whoever reaches the frontend can start, signal
    (approve) and read any run. A port without an address is published on every interface."""
    for name, service in services.items():
        for address, host_port, container in bound_ports(service):
            assert address == "127.0.0.1", (
                f"{name} publishes {host_port or '?'}:{container} on {address or 'every address'}"
            )


def test_the_loopback_parser_sees_every_form() -> None:
    """The helper above: a bare or two-part port is on every address."""
    service = {
        "ports": [
            "7233",
            "7233:7233",
            "127.0.0.1:8080:8080",
            "0.0.0.0:1:2/udp",
            {"target": 9, "published": 10, "host_ip": "127.0.0.1"},
            {"target": 11},
        ]
    }
    assert bound_ports(service) == {
        (None, None, "7233"),
        (None, "7233", "7233"),
        ("127.0.0.1", "8080", "8080"),
        ("0.0.0.0", "1", "2"),
        ("127.0.0.1", "10", "9"),
        (None, None, "11"),
    }


# --- dependencies --------------------------------------------------------------------------------


def test_every_dependency_is_a_service(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for target in depends_on(service):
            assert target in services, f"{name} depends on {target}, which is not a service"


def test_temporal_runs_on_postgres_once_it_is_healthy(
    services: dict[str, dict[str, Any]],
) -> None:
    temporal = services["temporal"]
    assert depends_on(temporal).get("postgresql") == "service_healthy"
    env = environment(temporal)
    assert env.get("DB") in {"postgres12", "postgres12_pgx"}, f"DB={env.get('DB')}"
    assert env.get("POSTGRES_SEEDS") == "postgresql", "POSTGRES_SEEDS is not the postgres service"
    for variable in ("DB_PORT", "POSTGRES_USER"):
        assert env.get(variable), f"temporal lacks {variable}"
    assert env["POSTGRES_USER"] == environment(services["postgresql"]).get("POSTGRES_USER")
    # The password: from the file postgresql reads too (test_the_passwords_are_made_...).
    assert "POSTGRES_PWD" not in env


def test_postgres_has_a_named_volume_and_a_pg_isready_healthcheck(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    postgres = services["postgresql"]
    data = [src for src, target in mounts(postgres) if target == "/var/lib/postgresql/data"]
    assert data and is_named_volume(data[0]), "postgres data is not on a named volume"
    assert data[0] in (compose.get("volumes") or {}), f"volume {data[0]} is not declared"
    test = postgres.get("healthcheck", {}).get("test")
    assert test and "pg_isready" in " ".join(test if isinstance(test, list) else [test])


def test_temporal_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    healthcheck = services["temporal"].get("healthcheck") or {}
    assert not healthcheck.get("disable"), "the temporal healthcheck is disabled"
    test = healthcheck.get("test")
    text = " ".join(test if isinstance(test, list) else [str(test)])
    assert "cluster health" in text and TEMPORAL_ADDRESS in text, text


def test_temporal_dynamic_config_file_exists(services: dict[str, dict[str, Any]]) -> None:
    temporal = services["temporal"]
    path = environment(temporal).get("DYNAMIC_CONFIG_FILE_PATH")
    assert path, "temporal names no dynamic config file"
    in_container = PurePosixPath("/etc/temporal") / path
    for source, target in mounts(temporal):
        if source and source.startswith(".") and in_container.is_relative_to(target):
            on_host = ROOT / source / in_container.relative_to(target)
            assert on_host.is_file(), f"{on_host} is missing"
            assert isinstance(yaml.safe_load(on_host.read_text()), dict)
            return
    pytest.fail(f"no mount from this project provides {in_container}")


@pytest.mark.parametrize("name", ["temporal-admin-tools", "register-search-attributes", "worker"])
def test_clients_use_the_temporal_service(services: dict[str, dict[str, Any]], name: str) -> None:
    assert environment(services[name]).get("TEMPORAL_ADDRESS") == TEMPORAL_ADDRESS
    assert depends_on(services[name]).get("temporal") == "service_healthy"


def test_ui_points_at_temporal(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services["temporal-ui"])
    assert env.get("TEMPORAL_ADDRESS") == TEMPORAL_ADDRESS
    assert env.get("TEMPORAL_CORS_ORIGINS"), "temporal-ui has no TEMPORAL_CORS_ORIGINS"
    assert "temporal" in depends_on(services["temporal-ui"])


# --- the worker ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILT_HERE)
def test_agent_services_are_built_from_this_project(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    build = services[name].get("build")
    assert build, f"{name} is not built from this project"
    context = build if isinstance(build, str) else build.get("context", ".")
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    assert (ROOT / context).resolve() == ROOT, f"the build context is {context}, not this project"
    assert (ROOT / context / dockerfile).resolve() == DOCKERFILE


def test_worker_can_be_scaled(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    assert "container_name" not in worker, "a container_name stops --scale worker=N"
    assert not worker.get("ports"), "a fixed host port stops --scale worker=N"
    assert worker.get("network_mode") != "host"
    assert worker.get("restart") == "unless-stopped"


def test_worker_waits_for_the_server_and_the_search_attributes(
    services: dict[str, dict[str, Any]],
) -> None:
    assert depends_on(services["worker"]) == {
        "temporal": "service_healthy",
        "register-search-attributes": "service_completed_successfully",
        "payload-key": "service_completed_successfully",
        "store-database": "service_completed_successfully",
        "db-passwords": "service_completed_successfully",
    }


def test_provider_keys_pass_through_to_the_worker_only(
    services: dict[str, dict[str, Any]],
) -> None:
    env = environment(services["worker"])
    for key in PROVIDER_KEYS:
        assert key in env, f"the worker does not get {key}"
        value = env[key]
        assert value is None or re.fullmatch(rf"\$\{{{key}(:?-)?\}}", value), (
            f"{key} must come from the host's environment (no value written in the file): {value}"
        )
    for name, service in services.items():
        if name != "worker":
            leaked = set(PROVIDER_KEYS) & environment(service).keys()
            assert not leaked, f"{name} gets {leaked}: keys belong in the worker's environment"
            assert "env_file" not in service, f"{name} reads an env_file"


@pytest.mark.parametrize("variable", STORES)
def test_worker_stores_are_on_a_volume_shared_by_replicas(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], variable: str
) -> None:
    """Shared on purpose: a side effect one replica applied, a result one stored (read_result
    may run on another), a prefix for the next model call. SQLite locks hold between
    containers on one host's local volume (the compose file says where they do not)."""
    worker = services["worker"]
    path = environment(worker).get(variable)
    assert path and path.startswith("/"), f"{variable}={path}"
    holder = volume_holding(worker, path)
    assert holder, f"{path} is on no volume: it would be lost with the container"
    source, target, read_only = holder
    assert is_named_volume(source), f"{path} is on {source}, not a named volume"
    assert source in (compose.get("volumes") or {}), f"volume {source} is not declared"
    assert not read_only, f"{path} is on a read-only mount"
    assert target in directories_the_image_user_owns(), (
        f"{target} (holding {path}) is not a directory the Dockerfile gives to uid {IMAGE_UID}: "
        "a new named volume takes the owner of the image's directory, root otherwise"
    )


@pytest.mark.parametrize("variable", IMAGE_STORES)
def test_the_image_puts_the_stores_where_its_user_writes(variable: str) -> None:
    """`docker run` without compose: the image's own defaults, not the root-owned /app."""
    path = dockerfile_env().get(variable)
    assert path, f"the Dockerfile sets no {variable}: the store would go under /app, root's"
    assert any(
        PurePosixPath(path).is_relative_to(owned) for owned in directories_the_image_user_owns()
    ), f"{variable}={path} is not under a directory uid {IMAGE_UID} owns"


def test_compose_and_the_image_agree_on_the_stores(services: dict[str, dict[str, Any]]) -> None:
    worker_env = environment(services["worker"])
    assert {v: worker_env.get(v) for v in STORES} == {v: dockerfile_env().get(v) for v in STORES}


# --- the workers' shared stores ------------------------------------------------------------------


def test_workers_share_stores_in_a_database_and_user_of_their_own(
    services: dict[str, dict[str, Any]],
) -> None:
    worker, maker = environment(services["worker"]), environment(services["store-database"])
    url = urlsplit(str(worker.get("AGENT_STORE_URL")))
    assert url.scheme == "postgresql" and url.hostname == "postgresql" and url.port == 5432
    assert url.path == f"/{maker['AGENT_DB_NAME']}" and url.username == maker["AGENT_DB_USER"]
    assert url.username != "temporal" and url.path != "/temporal", "not Temporal's own"
    # The same password, from the same file, in both; none written in the compose file.
    assert url.password is None
    assert worker["AGENT_STORE_PASSWORD_FILE"] == maker["AGENT_DB_PASSWORD_FILE"]
    assert not {"AGENT_MESSAGE_STORE", "AGENT_RESULT_STORE"} & worker.keys(), (
        "file paths beside AGENT_STORE_URL would be ignored: leave them out"
    )
    assert not {"POSTGRES_USER", "POSTGRES_PASSWORD", "PGPASSWORD"} & worker.keys(), (
        "the admin's credentials stay out of the workers"
    )


def test_the_store_database_one_shot_runs_after_postgres_and_its_data_is_on_a_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    service = services["store-database"]
    assert depends_on(service) == {
        "postgresql": "service_healthy",
        "db-passwords": "service_completed_successfully",
    }
    assert service.get("restart", "no") in {"no", "on-failure"}, "a one-shot must not restart"
    assert image_ref(service["image"]) == image_ref(services["postgresql"]["image"])
    env = environment(service)
    assert env.get("PGHOST") == "postgresql"
    assert env.get("PGUSER") == environment(services["postgresql"]).get("POSTGRES_USER")
    sources = {target: source for source, target in mounts(service)}
    assert (ROOT / str(sources.get("/deploy/store-database.sh"))).resolve() == STORE_SCRIPT
    assert "/deploy/store-database.sh" in command_text(service)
    data = volume_holding(services["postgresql"], "/var/lib/postgresql/data")
    assert data and is_named_volume(data[0]) and data[0] in (compose.get("volumes") or {})


def run_store_script(server: PostgresServer, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(STORE_SCRIPT)],
        env={
            # psql, as the postgres image has it: beside the server's binaries.
            "PATH": f"{bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
            "PGHOST": server.host,
            "PGPORT": str(server.port),
            "PGUSER": "postgres",
            "PGPASSWORD": server.password,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_store_database_script_makes_a_user_that_owns_its_stores(
    postgres: PostgresServer,
) -> None:
    """deploy/store-database.sh against a real server, twice (every `up` runs it): the user
    logs in with the password, and the worker's start-up check makes and writes the tables."""
    name = f"agent_{uuid.uuid4().hex[:8]}"
    env = {"AGENT_DB_NAME": name, "AGENT_DB_USER": name, "AGENT_DB_PASSWORD": "first"}
    for password in ("first", "second"):
        done = run_store_script(postgres, **{**env, "AGENT_DB_PASSWORD": password})
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"store database: {name}, owned by {name}"
    url = postgres.url(name, user=name).replace(postgres.password, "second")
    check_postgres(url)
    with pytest.raises(StoreNotWritable, match="password authentication failed"):
        check_postgres(url.replace(":second@", ":first@"))
    assert run_store_script(postgres, AGENT_DB_NAME=name).returncode != 0, "no password: fails"


def test_the_store_database_script_reads_both_passwords_from_files(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """As the stack runs it: PGPASSWORD_FILE and AGENT_DB_PASSWORD_FILE, from db-passwords."""
    name = f"agent_{uuid.uuid4().hex[:8]}"
    admin, agent = tmp_path / "temporal-db-password", tmp_path / "agent-db-password"
    admin.write_text(postgres.password + "\n")
    agent.write_text("from-a-file-4242\n")
    done = run_store_script(
        postgres,
        PGPASSWORD="",
        PGPASSWORD_FILE=str(admin),
        AGENT_DB_NAME=name,
        AGENT_DB_USER=name,
        AGENT_DB_PASSWORD_FILE=str(agent),
    )
    assert done.returncode == 0, done.stderr
    assert "4242" not in done.stdout + done.stderr
    check_postgres(postgres.url(name, user=name).replace(postgres.password, "from-a-file-4242"))


def dockerfile_env() -> dict[str, str]:
    found: dict[str, str] = {}
    for keyword, arguments in dockerfile_instructions():
        if keyword == "ENV":
            for word in shlex.split(arguments):
                name, _, value = word.partition("=")
                found[name] = value
    return found


def directories_the_image_user_owns() -> set[str]:
    """Directories a RUN makes and chowns to the `agent` user, once that user is uid 10001 and
    the image runs as it."""
    instructions = dockerfile_instructions()
    runs = " && ".join(args for keyword, args in instructions if keyword == "RUN")
    assert re.search(rf"useradd\b[^&;]*--uid {IMAGE_UID}\b[^&;]* agent\b", runs), (
        f"the Dockerfile makes no user agent with uid {IMAGE_UID}"
    )
    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users and users[-1].split(":")[0] in {"agent", IMAGE_UID}, users
    owned: set[str] = set()
    for command in re.split(r"&&|;", runs):
        words = shlex.split(command)
        if words[:1] == ["chown"] and len(words) > 2 and words[1].split(":")[0] == "agent":
            owned |= {word.rstrip("/") for word in words[2:] if word.startswith("/")}
    made = set()
    for command in re.split(r"&&|;", runs):
        words = shlex.split(command)
        if words[:1] == ["mkdir"]:
            made |= {word.rstrip("/") for word in words[1:] if word.startswith("/")}
    return owned & made


# --- encryption: the key, who gets it, the codec server ------------------------------------------


def key_file_of(service: dict[str, Any]) -> str:
    path = environment(service).get("AGENT_PAYLOAD_KEYS_FILE")
    assert path and path.startswith("/"), "AGENT_PAYLOAD_KEYS_FILE is not an absolute path"
    return path


def test_the_key_one_shot_writes_onto_a_named_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    maker = services["payload-key"]
    command = command_text(maker)
    assert "deploy/payload-key.sh" in command, command
    assert maker.get("restart", "no") in {"no", "on-failure"}, "a one-shot must not restart"
    for variable in ("AGENT_PAYLOAD_KEYS_FILE", "AGENT_CODEC_TOKEN_FILE"):
        path = environment(maker).get(variable)
        assert path, f"payload-key is not told where {variable} goes"
        holder = volume_holding(maker, path)
        assert holder and is_named_volume(holder[0]) and not holder[2], (
            f"{path} is not on a named volume payload-key can write"
        )
        assert holder[1] in directories_the_image_user_owns(), (
            f"{holder[1]} is not owned by uid {IMAGE_UID} in the image"
        )
    assert "AGENT_PAYLOAD_KEYS" not in environment(maker)


@pytest.mark.parametrize("name", ["worker", "codec-server"])
def test_the_key_reaches_the_workers_and_the_codec_server(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    """Read-only, from the volume the one-shot wrote, and only once it has: a worker never
    starts without the key (it would stop, in one line, if the file were missing)."""
    service = services[name]
    maker = services["payload-key"]
    path = key_file_of(service)
    assert path == key_file_of(maker)
    holder, made_on = volume_holding(service, path), volume_holding(maker, path)
    assert holder and made_on and holder[:2] == made_on[:2], f"{name} reads another {path}"
    assert holder[2], f"{name} mounts the keys writable"
    assert depends_on(service).get("payload-key") == "service_completed_successfully"
    # AGENT_PAYLOAD_KEYS beside the file is a configuration error (both set), and a value
    # written in the file would put a key in the repository.
    assert "AGENT_PAYLOAD_KEYS" not in environment(service)


def test_no_other_service_gets_the_keys(services: dict[str, dict[str, Any]]) -> None:
    maker = services["payload-key"]
    key_volume = volume_holding(maker, key_file_of(maker))
    assert key_volume
    for name, service in services.items():
        if name in BUILT_HERE:
            continue
        assert key_volume[0] not in {source for source, _ in mounts(service)}, name
        assert not {"AGENT_PAYLOAD_KEYS", "AGENT_PAYLOAD_KEYS_FILE"} & environment(service).keys()


def codec_arguments(service: dict[str, Any]) -> dict[str, str]:
    words = shlex.split(command_text(service))
    assert "durable_agent.encryption.codec_server" in words, words
    return {word: words[i + 1] for i, word in enumerate(words[:-1]) if word.startswith("--")}


def test_the_codec_server_answers_the_ui_the_browser_shows(
    services: dict[str, dict[str, Any]],
) -> None:
    codec = services["codec-server"]
    args = codec_arguments(codec)
    ui_host_port = next(host for host, c in published_ports(services["temporal-ui"]) if c == "8080")
    assert args.get("--ui-origin") == f"http://localhost:{ui_host_port}", (
        "the codec server's CORS must name the UI's origin as the browser shows it"
    )
    assert args.get("--host") == "0.0.0.0", "inside its container, or the port cannot reach it"
    assert (args.get("--port", "8081"), args.get("--port", "8081")) in {
        (c, c) for _, c in published_ports(codec)
    }
    assert "--behind-tls" not in args, "the cookie would not stick over plain HTTP"
    assert environment(codec).get("AGENT_CODEC_TOKEN_FILE") == environment(
        services["payload-key"]
    ).get("AGENT_CODEC_TOKEN_FILE")
    assert "AGENT_CODEC_TOKEN" not in environment(codec)


def test_the_ui_points_at_the_codec_server_with_credentials(
    services: dict[str, dict[str, Any]],
) -> None:
    env = environment(services["temporal-ui"])
    codec_host_port = next(
        host for host, c in published_ports(services["codec-server"]) if c == "8081"
    )
    # The browser calls it: localhost, the UI's own site, so the sign-in cookie goes along.
    assert env.get("TEMPORAL_CODEC_ENDPOINT") == f"http://localhost:{codec_host_port}"
    assert env.get("TEMPORAL_CODEC_INCLUDE_CREDENTIALS") == "true"


def run_key_script(keys: Path, token: Path, *args: str) -> subprocess.CompletedProcess[str]:
    python_dir = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{python_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "AGENT_PAYLOAD_KEYS_FILE": str(keys),
        "AGENT_CODEC_TOKEN_FILE": str(token),
        "PYTHON": sys.executable,
    }
    return subprocess.run(
        ["sh", str(KEY_SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
def test_the_key_script_makes_keeps_and_rotates(tmp_path: Path) -> None:
    """deploy/payload-key.sh as the one-shot runs it (sh, python, payload_codec from /app)."""
    keys, token = tmp_path / "payload-keys", tmp_path / "codec-token"
    first = run_key_script(keys, token)
    assert first.returncode == 0, first.stderr
    assert "made" in first.stdout and "encrypting with key id" in first.stdout
    for made in (keys, token):
        assert stat.S_IMODE(made.stat().st_mode) == 0o600, f"{made.name} is readable by others"
    [key] = keys_from_env({"AGENT_PAYLOAD_KEYS_FILE": str(keys)}) or []
    secret = token.read_text().strip()
    assert len(secret) == 64 and key.key.hex() not in first.stdout + first.stderr

    again = run_key_script(keys, token)
    assert again.returncode == 0 and "keeping" in again.stdout
    assert keys_from_env({"AGENT_PAYLOAD_KEYS_FILE": str(keys)}) == [key]
    assert token.read_text().strip() == secret

    keys.write_text(keys.read_text().replace(key.id, "k-before"))
    rotated = run_key_script(keys, token, "rotate")
    assert rotated.returncode == 0, rotated.stderr
    new, old = keys_from_env({"AGENT_PAYLOAD_KEYS_FILE": str(keys)}) or []
    assert old.key == key.key and new.key != key.key, "rotate drops no key and puts a new one first"
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
def test_the_key_script_fails_on_a_malformed_file_so_no_worker_starts(tmp_path: Path) -> None:
    keys, token = tmp_path / "payload-keys", tmp_path / "codec-token"
    keys.write_text("k1=not-base64!\n")
    done = run_key_script(keys, token)
    assert done.returncode != 0
    assert "payload key: " in done.stderr and "is not base64" in done.stderr
    assert run_key_script(keys, token, "sideways").returncode == 2
    assert keys.read_text() == "k1=not-base64!\n", "the script overwrote a key it could not read"


def test_named_volumes_are_declared(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = compose.get("volumes") or {}
    for name, service in services.items():
        for source, _ in mounts(service):
            if is_named_volume(source):
                assert source in declared, f"{name} mounts undeclared volume {source}"


# --- search attributes ---------------------------------------------------------------------------


def _registration_script(services: dict[str, dict[str, Any]]) -> Path:
    service = services["register-search-attributes"]
    command = command_text(service)
    for source, target in mounts(service):
        if source and source.startswith(".") and target in command:
            path = ROOT / source
            assert path.is_file(), f"{path} is missing"
            return path
    pytest.fail(f"register-search-attributes runs no script mounted from deploy/: {command}")


def _create_commands(script: Path) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", script.read_text())
    return [
        line.strip()
        for line in joined.splitlines()
        if "search-attribute create" in line and not line.strip().startswith("#")
    ]


def test_search_attribute_service_runs_once_after_the_server(
    services: dict[str, dict[str, Any]],
) -> None:
    service = services["register-search-attributes"]
    assert depends_on(service).get("temporal") == "service_healthy"
    assert service.get("restart", "no") in {"no", "on-failure"}, "a one-shot must not restart"
    assert _registration_script(services).parent == ROOT / "deploy"


def test_search_attributes_are_created_with_their_types(
    services: dict[str, dict[str, Any]],
) -> None:
    commands = _create_commands(_registration_script(services))
    assert len(commands) == 1, f"expected one create command, found {commands}"
    words = shlex.split(commands[0].split(";")[0])
    names = [words[i + 1] for i, word in enumerate(words) if word == "--name"]
    types = [words[i + 1] for i, word in enumerate(words) if word == "--type"]
    assert dict(zip(names, types, strict=True)) == SEARCH_ATTRIBUTES
    assert "--namespace" in words, "the create command names no namespace"
    namespace = words[words.index("--namespace") + 1]
    if namespace.startswith("$"):
        # A variable: the script's default and the service's setting must both be `default`.
        variable = namespace.strip("${}")
        script = _registration_script(services).read_text()
        assert re.search(rf'^{variable}="\$\{{TEMPORAL_NAMESPACE:-default\}}"$', script, re.M), (
            f"{variable} does not default to the namespace `default`"
        )
        service_env = environment(services["register-search-attributes"])
        namespace = service_env.get("TEMPORAL_NAMESPACE") or "default"
    assert namespace == "default", namespace


def test_search_attribute_registration_tolerates_already_exists(
    services: dict[str, dict[str, Any]],
) -> None:
    """Under `set -e` an unguarded create would fail the second `up`."""
    script = _registration_script(services)
    (command,) = _create_commands(script)
    assert command.startswith("if ! ") or "||" in command, f"unguarded: {command}"
    code = [line for line in script.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert any("search-attribute list" in line for line in code), (
        "nothing checks that the attributes are there after an error"
    )


def test_search_attributes_match_the_workflow() -> None:
    """The ones the workflow upserts and the one a fork starts with, read from the code: a
    renamed key fails here."""
    keys = [v for v in vars(status).values() if isinstance(v, SearchAttributeKey)]
    declared = {
        key.name: key.indexed_value_type.name.title()  # KEYWORD -> Keyword, the CLI's word
        for key in [*keys, *forking.FORK_SEARCH_ATTRIBUTES]
    }
    assert declared == SEARCH_ATTRIBUTES


# --- how to use it -------------------------------------------------------------------------------


def test_compose_file_says_how_to_use_it() -> None:
    comments = "\n".join(
        line for line in COMPOSE_FILE.read_text().splitlines() if line.lstrip().startswith("#")
    )
    for needle in (
        "docker compose up -d --scale worker=3",
        "http://localhost:8080",
        'python starter.py "',
        "--address localhost:7233",
        'export AGENT_PAYLOAD_KEYS="$(docker compose exec -T worker cat /keys/payload-keys)"',
        "http://localhost:8081/login",
        "docker compose exec -T codec-server cat /keys/codec-token",
        "127.0.0.1",
    ):
        assert needle in comments, f"the usage comments do not mention {needle!r}"


# --- Dockerfile and .dockerignore ----------------------------------------------------------------


def test_dockerfile_base_image_is_python_3_11() -> None:
    bases = [
        next(word for word in args.split() if not word.startswith("--"))
        for keyword, args in dockerfile_instructions()
        if keyword == "FROM"
    ]
    assert bases, "the Dockerfile has no FROM"
    assert all(base.startswith("python:3.11") for base in bases), bases


def test_dockerfile_runs_the_worker() -> None:
    instructions = dockerfile_instructions()
    run = [args for k, args in instructions if k in {"ENTRYPOINT", "CMD"}]
    assert run, "the Dockerfile has neither ENTRYPOINT nor CMD"
    words = [word for args in run for word in exec_or_shell_words(args)]
    assert words == ["durable-agent", "worker"], words


def test_dockerfile_runs_as_a_user_that_is_not_root() -> None:
    users = [args.split(":")[0] for k, args in dockerfile_instructions() if k == "USER"]
    assert users, "the Dockerfile has no USER: the worker would run as root"
    assert users[-1] not in {"root", "0"}, f"the worker runs as {users[-1]}"


def test_dockerfile_installs_the_project_without_a_cache() -> None:
    runs = [args for k, args in dockerfile_instructions() if k == "RUN"]
    installs = [r for r in runs if re.search(r"pip install\b[^&;|]*\s\.(\s|$)", r)]
    assert installs, "the Dockerfile does not pip install the project"
    assert all("--no-cache-dir" in r for r in installs), installs


def test_dockerfile_copies_only_what_is_needed_and_it_is_in_the_context() -> None:
    patterns = dockerignore_patterns()
    copied: list[str] = []
    for keyword, args in dockerfile_instructions():
        if keyword not in {"COPY", "ADD"}:
            continue
        if "--from=" in args:
            continue  # from another stage, not from the build context
        words = [w for w in exec_or_shell_words(args) if not w.startswith("--")]
        copied.extend(words[:-1])
    assert copied, "the Dockerfile copies nothing"
    for source in copied:
        assert source not in {".", "./", "*"}, "the Dockerfile copies the whole build context"
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the project"
        assert not dockerignored(source, patterns), f"COPY {source}: .dockerignore excludes it"
    needed = {"pyproject.toml", "README.md", *package_folders()}
    missing = needed - {s.rstrip("/").removeprefix("./") for s in copied}
    assert not missing, f"the image lacks what the package needs: {sorted(missing)}"


def package_folders() -> set[str]:
    """The folders pyproject.toml maps into the installed package."""
    return set(PACKAGE_DIRS.values())


def test_the_package_is_more_than_one_folder() -> None:
    """The helper above: durable_agent/ and the rooms it maps (workflows/ is one)."""
    assert {"durable_agent", "workflows", "activities", "cli"} <= package_folders()


def test_the_image_runs_the_installed_package_not_a_source_tree() -> None:
    """The sources are built in a directory of their own and removed: in the worker's working
    directory, a durable_agent/ folder would shadow the installed package, and its mapped
    rooms (durable_agent.workflows, ...) would not be found."""
    instructions = dockerfile_instructions()
    workdirs = [args for keyword, args in instructions if keyword == "WORKDIR"]
    assert len(workdirs) >= 2 and workdirs[0] != workdirs[-1], workdirs
    build = workdirs[0]
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    assert any(f"rm -rf {build}" in run for run in runs), runs
    copied_into_app = [
        args
        for index, (keyword, args) in enumerate(instructions)
        if keyword == "COPY"
        and workdirs[-1] in [a for k, a in instructions[:index] if k == "WORKDIR"]
    ]
    assert not [c for c in copied_into_app if "durable_agent" in c], copied_into_app


@pytest.mark.parametrize("path", [".venv", ".venv/bin/python", ".git/config"])
def test_dockerignore_keeps_out_the_venv_and_git(path: str) -> None:
    assert dockerignored(path, dockerignore_patterns()), f".dockerignore lets {path} in"


def test_dockerignore_matcher() -> None:
    """The helper the two tests above rely on."""
    assert dockerignored(".venv/lib", [".venv/"])
    assert dockerignored("a/__pycache__/x.pyc", ["**/__pycache__/"])
    assert not dockerignored("README.md", ["*.db", ".venv"])
    assert not dockerignored("keep.db", ["*.db", "!keep.db"])
    assert dockerignored("x.db", ["*.db", "!keep.db"])


# --- the database passwords ----------------------------------------------------------------------

PASSWORD_SCRIPT = ROOT / "deploy" / "db-passwords.sh"
SECRETS_DIR = "/db-secrets"
TEMPORAL_PASSWORD_FILE = f"{SECRETS_DIR}/temporal-db-password"
AGENT_PASSWORD_FILE = f"{SECRETS_DIR}/agent-db-password"
READS_THE_PASSWORDS = {
    "postgresql": TEMPORAL_PASSWORD_FILE,
    "temporal": TEMPORAL_PASSWORD_FILE,
    "store-database": AGENT_PASSWORD_FILE,
    "worker": AGENT_PASSWORD_FILE,
}


def test_no_password_falls_back_to_one_written_in_the_file(
    services: dict[str, dict[str, Any]],
) -> None:
    """`${POSTGRES_PASSWORD:-temporal}` would start every stack whose host sets nothing with the
    same, public, password."""
    for name, service in services.items():
        for variable, value in environment(service).items():
            if ("PASSWORD" in variable or "PWD" in variable) and not variable.endswith("_FILE"):
                assert value in (None, "") or re.fullmatch(r"\$\{\w+:-\}", value), (
                    f"{name}: {variable}={value}"
                )
        url = environment(service).get("AGENT_STORE_URL")
        assert url is None or urlsplit(url).password is None, f"{name}: {url}"
    text = COMPOSE_FILE.read_text()
    assert not re.findall(r"\$\{\w*(?:PASSWORD|PWD)\w*:-[^}]", text)


def test_the_passwords_are_made_on_first_start_and_read_from_files(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    maker = services["db-passwords"]
    assert maker.get("restart", "no") in {"no", "on-failure"}, "a one-shot must not restart"
    assert "/deploy/db-passwords.sh" in command_text(maker)
    sources = {target: source for source, target in mounts(maker)}
    assert (ROOT / str(sources.get("/deploy/db-passwords.sh"))).resolve() == PASSWORD_SCRIPT
    made_on = volume_holding(maker, TEMPORAL_PASSWORD_FILE)
    assert made_on and is_named_volume(made_on[0]) and not made_on[2]
    assert made_on[0] in (compose.get("volumes") or {})
    assert environment(maker).get("DB_SECRETS_DIR") == SECRETS_DIR
    for name, path in READS_THE_PASSWORDS.items():
        service = services[name]
        holder = volume_holding(service, path)
        assert holder and holder[:2] == made_on[:2] and holder[2], f"{name} reads another {path}"
        assert depends_on(service).get("db-passwords") == "service_completed_successfully", name
    assert environment(services["postgresql"]).get("POSTGRES_PASSWORD_FILE") == (
        TEMPORAL_PASSWORD_FILE
    )
    # auto-setup reads POSTGRES_PWD only: its entrypoint is wrapped to read the file first.
    temporal = command_text(services["temporal"])
    assert f'POSTGRES_PWD="$$(cat {TEMPORAL_PASSWORD_FILE})"' in temporal, temporal
    assert "exec /etc/temporal/entrypoint.sh" in temporal and "autosetup" in temporal
    store = environment(services["store-database"])
    assert store.get("PGPASSWORD_FILE") == TEMPORAL_PASSWORD_FILE
    assert store.get("AGENT_DB_PASSWORD_FILE") == AGENT_PASSWORD_FILE
    assert environment(services["worker"]).get("AGENT_STORE_PASSWORD_FILE") == AGENT_PASSWORD_FILE
    for name, service in services.items():
        if name not in {*READS_THE_PASSWORDS, "db-passwords"}:
            assert made_on[0] not in {source for source, _ in mounts(service)}, name


def run_password_script(directory: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(PASSWORD_SCRIPT)],
        env={"PATH": os.environ.get("PATH", ""), "DB_SECRETS_DIR": str(directory), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
def test_the_password_script_makes_keeps_and_takes_the_host_s(tmp_path: Path) -> None:
    """deploy/db-passwords.sh as the one-shot runs it: two random passwords on first start,
    readable by the services' users (postgres, temporal, agent: three uids) but written by root
    only; the same ones on every later start; a password set on the host wins."""
    first = run_password_script(tmp_path)
    assert first.returncode == 0, first.stderr
    made = {path.name: path.read_text() for path in tmp_path.iterdir()}
    assert sorted(made) == ["agent-db-password", "temporal-db-password"]
    for name, text in made.items():
        assert re.fullmatch(r"[0-9a-f]{32}\n", text), (name, text)
        assert text.strip() not in first.stdout + first.stderr
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o444, name
    assert made["agent-db-password"] != made["temporal-db-password"]
    assert "made" in first.stdout

    again = run_password_script(tmp_path)
    assert again.returncode == 0 and "keeping" in again.stdout, again.stdout
    assert {path.name: path.read_text() for path in tmp_path.iterdir()} == made

    host = run_password_script(tmp_path, AGENT_DB_PASSWORD="host-set 9137")
    assert host.returncode == 0, host.stderr
    assert (tmp_path / "agent-db-password").read_text() == "host-set 9137\n"
    assert (tmp_path / "temporal-db-password").read_text() == made["temporal-db-password"]
    assert "9137" not in host.stdout + host.stderr
    assert not list(tmp_path.glob("*.tmp"))
