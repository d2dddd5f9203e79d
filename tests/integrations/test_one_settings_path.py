"""One path from "where to connect" to settings: the clients, the faces' ``connect()``, every framework adapter
and the ``sskv`` command hand the same location and options to ``_transport/settings.py``'s
``settings_from_options`` and get equal :class:`ConnectionSettings` (no mock: each entry point runs as a user
calls it; those that connect at once do so against the session's mosquitto and emulator).
"""

from __future__ import annotations

import ast
import dataclasses
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sskv_mapping
from sskv_mapping import (
    AsyncStateStoreClient,
    ConfigurationError,
    ConnectionSettings,
    StateStoreClient,
    StateStoreDict,
    TlsSettings,
)
from sskv_mapping._transport.settings import DEFAULT_URL, settings_for, settings_from_options
from sskv_mapping.cli._client_commands import _settings as cli_settings
from sskv_mapping.cli._main import build_parser

#: options that differ from every default (client_id given: a generated one would differ on each call)
OPTIONS: dict[str, Any] = {
    "client_id": "one-path-1",
    "keepalive": 25,
    "connect_timeout": 2.5,
    "trace_context": False,
    "clean_start": True,
    "session_expiry": 120,
    "sat_poll_interval": 1.5,
}


@pytest.fixture
def url(broker_address: tuple[str, int]) -> str:
    host, port = broker_address
    return f"mqtt://{host}:{port}"


@pytest.fixture
def no_shared_clients() -> Iterator[None]:
    from sskv_mapping.integrations._common import close_shared_clients

    close_shared_clients()  # a shared client of an earlier test (another client_id) would be handed back
    yield
    close_shared_clients()


def test_the_clients_and_the_faces_build_what_the_one_function_builds(url: str) -> None:
    expected = settings_from_options(url, OPTIONS)
    assert dataclasses.asdict(expected) | OPTIONS == dataclasses.asdict(expected)  # every option applied
    assert AsyncStateStoreClient.from_url(url, **OPTIONS, timeout=3.0).settings == expected
    assert StateStoreClient.from_url(url, **OPTIONS).settings == expected
    kwargs = {**OPTIONS, "timeout": 3.0, "reconnect": False}
    assert settings_for(url, kwargs) == expected
    assert kwargs == {"timeout": 3.0, "reconnect": False}  # the client's own options are left to it


def test_a_face_connects_with_those_settings(url: str, namespace: str) -> None:
    with StateStoreDict.connect(url, namespace=namespace, **OPTIONS) as d:
        assert d.client.settings == settings_from_options(url, OPTIONS)
        d["k"] = "v"
        assert d["k"] == "v"


def test_the_adapters_build_what_the_one_function_builds(url: str, no_shared_clients: None) -> None:
    from sskv_mapping.integrations import aiocache, django, flask_caching, litestar

    expected = settings_from_options(url, OPTIONS)
    assert aiocache.StateStoreCache(url=url, **OPTIONS)._settings == expected
    assert litestar.StateStoreStore(url, **OPTIONS)._conn.settings == expected
    assert django._parse(url, {**OPTIONS, "codec": "json"}, None).connection == expected  # json: no SECRET_KEY
    flask = flask_caching.StateStoreCache(url=url, namespace="one-path", **OPTIONS)  # connects at once
    assert flask.client.settings == expected
    assert flask.set("k", "v") and flask.get("k") == "v"


async def test_the_fastapi_lifespan_connects_with_those_settings(url: str) -> None:
    from sskv_mapping.integrations.fastapi import STATE_NAME, statestore_lifespan

    app = types.SimpleNamespace(state=types.SimpleNamespace())
    async with statestore_lifespan(url=url, **OPTIONS)(app):
        assert getattr(app.state, STATE_NAME).client.settings == settings_from_options(url, OPTIONS)


def test_the_command_line_builds_what_the_one_function_builds(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = tmp_path / "ca.pem"
    monkeypatch.delenv("SSKV_USERNAME", raising=False)
    monkeypatch.setenv("SSKV_PASSWORD", "s3cret")
    argv = ["get", "--url", url, "--client-id", "cli-1", "--username", "alice", "--ca-file", str(ca), "--insecure"]
    settings = cli_settings(build_parser().parse_args([*argv, "k"]))
    expected = settings_from_options(
        url,
        {
            "client_id": "cli-1",
            "username": "alice",
            "password": "s3cret",
            "tls": {"ca_file": str(ca), "verify": False},
        },
    )
    assert settings == expected
    assert settings.tls == TlsSettings(ca_file=str(ca), verify=False) and settings.password == "s3cret"


def test_the_command_line_from_env_and_env_location_are_one_path(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {"AIO_BROKER_HOSTNAME": "aio-broker", "AIO_BROKER_TCP_PORT": "18883", "AIO_TLS_CA_FILE": __file__}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SSKV_USERNAME", raising=False)
    from_env = cli_settings(build_parser().parse_args(["get", "--from-env", "--client-id", "cli-2", "--insecure", "k"]))
    through_url = cli_settings(
        build_parser().parse_args(["get", "--url", "env:", "--client-id", "cli-2", "--insecure", "k"])
    )
    expected = settings_from_options("env:", {"client_id": "cli-2", "tls": {"verify": False}})
    assert from_env == through_url == expected
    # the TLS option applies over the environment's TLS: its CA file stays
    assert expected.tls == TlsSettings(ca_file=__file__, verify=False)
    assert (
        AsyncStateStoreClient.from_environment(environ, client_id="cli-2", tls={"verify": False}).settings == expected
    )


def test_a_tls_dict_applies_over_the_locations_tls_and_a_tls_settings_replaces_it() -> None:
    location = f"HostName=aio-broker;TcpPort=18883;CaFile={__file__}"
    assert settings_from_options(location, {"tls": {"verify": False}}).tls == TlsSettings(
        ca_file=__file__, verify=False
    )
    assert settings_from_options(location, {"tls": TlsSettings(verify=False)}).tls == TlsSettings(verify=False)
    plain = settings_from_options("mqtt://127.0.0.1:1883", {"tls": {"server_hostname": "aio-broker"}})
    assert plain.tls == TlsSettings(server_hostname="aio-broker")  # a TLS option alone turns TLS on


def test_settings_are_taken_whole_without_options() -> None:
    base = ConnectionSettings(host="aio-broker", port=18883)
    assert settings_from_options(base, {}) is base
    assert settings_from_options(base, {"client_id": None, "tls": None}) is base  # None: not given


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"host": "h"}, "not connection options: \\['host'\\]"),
        ({"tls": {"insecure": True}}, "tls options not known to TlsSettings: \\['insecure'\\]"),
        ({"tls": "mqtts"}, "tls must be a TlsSettings or a dict of its fields, not str"),
    ],
)
def test_a_wrong_option_is_a_configuration_error_naming_it(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        settings_from_options(DEFAULT_URL, options)


def test_the_default_url_is_written_once() -> None:
    """The default broker URL appears as a value in one module of the package (docstrings may show it)."""
    package = Path(sskv_mapping.__file__).parent
    holders = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == DEFAULT_URL and id(node) not in docstrings:
                holders.append(path.relative_to(package).as_posix())
    assert holders == ["_transport/settings.py"]


def test_every_default_is_that_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from sskv_mapping.cli import _client_commands
    from sskv_mapping.client import _client
    from sskv_mapping.integrations import aiocache, fastapi, flask_caching, litestar

    for module in (_client_commands, aiocache, fastapi, flask_caching, litestar):
        assert module.DEFAULT_URL is DEFAULT_URL, module.__name__
    assert _client.DEFAULT_BROKER_URL is DEFAULT_URL
    monkeypatch.delenv("SSKV_URL", raising=False)
    assert build_parser().parse_args(["get", "k"]).url == DEFAULT_URL
