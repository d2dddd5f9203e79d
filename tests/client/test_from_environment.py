"""One real connection configured from the ``AIO_*`` variables (and from a connection string), to the session's
mosquitto with the emulator serving it: the clients, the dict and the cache faces."""

from __future__ import annotations

import uuid

import pytest

from sskv_mapping import AsyncStateStoreClient, AsyncStateStoreDict, ConnectionSettings, StateStoreClient
from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import StateStoreDict

pytestmark = pytest.mark.usefixtures("emulator")


def aio_env(broker: MosquittoBroker, **more: str) -> dict[str, str]:
    return {
        "AIO_BROKER_HOSTNAME": broker.host,
        "AIO_BROKER_TCP_PORT": str(broker.port),
        "AIO_MQTT_USE_TLS": "false",
        "AIO_MQTT_KEEP_ALIVE": "20",
        **more,
    }


async def test_async_client_from_environment(mosquitto: MosquittoBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    client_id = f"env-{uuid.uuid4().hex[:8]}"
    for name, value in aio_env(mosquitto, AIO_MQTT_CLIENT_ID=client_id).items():
        monkeypatch.setenv(name, value)
    async with AsyncStateStoreClient.from_environment(timeout=5) as client:
        assert (client.client_id, client.settings.keepalive, client.timeout) == (client_id, 20, 5)
        key = f"env/{uuid.uuid4().hex}"
        assert (await client.set(key, b"v")).applied
        assert (entry := await client.get(key)) is not None and entry.value == b"v"
        await client.delete(key)


def test_blocking_client_from_an_explicit_environment(mosquitto: MosquittoBroker) -> None:
    with StateStoreClient.from_environment(aio_env(mosquitto), timeout=5) as client:
        key = f"env/{uuid.uuid4().hex}"
        assert client.set(key, b"blocking").applied
        assert (entry := client.get(key)) is not None and entry.value == b"blocking"
        client.delete(key)


async def test_from_url_with_a_connection_string(mosquitto: MosquittoBroker) -> None:
    cs = f"HostName={mosquitto.host};TcpPort={mosquitto.port};UseTls=false"
    async with AsyncStateStoreClient.from_url(cs, timeout=5) as client:
        assert await client.get(f"env/{uuid.uuid4().hex}") is None


async def test_the_dict_and_cache_connect_with_settings(mosquitto: MosquittoBroker) -> None:
    settings = ConnectionSettings.from_environment(aio_env(mosquitto))
    ns = f"env{uuid.uuid4().hex[:8]}"
    d = await AsyncStateStoreDict.connect(settings, namespace=ns)
    try:
        await d.set("k", {"from": "env"})
        assert await d.get("k") == {"from": "env"}
        assert d.client.settings.port == mosquitto.port
    finally:
        await d.close()
    cache = await AsyncStateStoreCache.connect(settings, namespace=ns + "c")
    try:
        await cache.set("k", [1, 2])
        assert await cache.get("k") == [1, 2]
    finally:
        await cache.close()


def test_the_blocking_dict_and_cache_connect_with_settings(mosquitto: MosquittoBroker) -> None:
    settings = ConnectionSettings.from_environment(aio_env(mosquitto))
    ns = f"env{uuid.uuid4().hex[:8]}"
    with StateStoreDict.connect(settings, namespace=ns) as d:
        d["k"] = "blocking"
        assert d["k"] == "blocking"
    with StateStoreCache.connect(settings, namespace=ns + "c") as c:
        c.set("k", 3)
        assert c.get("k") == 3
