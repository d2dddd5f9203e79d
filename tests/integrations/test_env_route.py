"""Each framework adapter configured as an Azure IoT Operations app is: ``"env:"`` where the broker URL goes
reads the ``AIO_*`` variables, and a connection string is taken as the SDKs take it (Django's ``LOCATION`` is
covered in ``test_django.py``). Against the session's mosquitto and emulator: a value goes in and comes back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sskv_mapping import ConfigurationError
from sskv_mapping._transport.settings import settings_from_options


@pytest.fixture
def aio_env(broker_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """The AIO_* variables naming the session broker (plain TCP), as a deployment would set them."""
    host, port = broker_url.removeprefix("mqtt://").rsplit(":", 1)
    monkeypatch.setenv("AIO_BROKER_HOSTNAME", host)
    monkeypatch.setenv("AIO_BROKER_TCP_PORT", port)
    monkeypatch.setenv("AIO_MQTT_USE_TLS", "false")
    yield host, port


def namespace(tag: str) -> str:
    return f"{tag}{uuid.uuid4().hex[:10]}"


def test_the_convention_env_and_connection_strings(aio_env: tuple[str, str]) -> None:
    host, port = aio_env
    s = settings_from_options("env:", {"client_id": "over-env"})
    assert (s.host, s.port, s.tls, s.client_id) == (host, int(port), None, "over-env")
    cs = settings_from_options(f"HostName={host};TcpPort={port};UseTls=false", {})
    assert (cs.host, cs.port, cs.tls) == (host, int(port), None)


def test_a_bad_variable_is_a_configuration_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIO_BROKER_HOSTNAME", "127.0.0.1")
    monkeypatch.setenv("AIO_MQTT_KEEP_ALIVE", "soon")
    with pytest.raises(ConfigurationError, match="AIO_MQTT_KEEP_ALIVE"):
        settings_from_options("env:", {})


def test_flask_caching_from_env(aio_env: tuple[str, str]) -> None:
    pytest.importorskip("flask_caching")
    from flask import Flask
    from flask_caching import Cache

    from sskv_mapping.integrations._common import close_shared_clients

    app = Flask("env-route")
    app.config.update(
        CACHE_TYPE="sskv_mapping.integrations.flask_caching.StateStoreCache",
        CACHE_SSKV_URL="env:",
        CACHE_KEY_PREFIX=namespace("fl"),
        CACHE_OPTIONS={"codec": "json"},
    )
    cache = Cache(app)
    try:
        with app.app_context():
            assert cache.set("k", {"from": "env"})
            assert cache.get("k") == {"from": "env"}
    finally:
        close_shared_clients()


async def test_litestar_from_env(aio_env: tuple[str, str]) -> None:
    pytest.importorskip("litestar")
    from sskv_mapping.integrations.litestar import StateStoreStore

    store = StateStoreStore("env:", namespace=namespace("ls"))
    async with store:
        await store.set("k", b"from env")
        assert await store.get("k") == b"from env"
        await store.delete_all()


async def test_aiocache_from_env(aio_env: tuple[str, str]) -> None:
    pytest.importorskip("aiocache")
    from aiocache import Cache

    from sskv_mapping.integrations.aiocache import StateStoreCache

    cache: Any = Cache(StateStoreCache, url="env:", sskv_namespace=namespace("ac"))
    try:
        await cache.set("k", "from env")
        assert await cache.get("k") == "from env"
    finally:
        await cache.close()


def test_fastapi_from_env(aio_env: tuple[str, str]) -> None:
    pytest.importorskip("fastapi")
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from sskv_mapping.integrations.fastapi import statestore_lifespan

    app = FastAPI(lifespan=statestore_lifespan(url="env:", namespace=namespace("fa")))

    @app.get("/roundtrip")
    async def roundtrip() -> Any:
        d = await app.state.statestore.dict("env")
        await d.set("k", {"from": "env"})
        return await d.get("k")

    with TestClient(app) as http:
        assert http.get("/roundtrip").json() == {"from": "env"}
