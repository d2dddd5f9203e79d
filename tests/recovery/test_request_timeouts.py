"""Every constructor a user calls takes the per-request timeout, and it reaches the client that sends."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from sskv_mapping.cache import AsyncStateStoreCache, StateStoreCache
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.errors import ConfigurationError
from sskv_mapping.mapping import AsyncStateStoreDict, StateStoreDict

pytestmark = pytest.mark.broker


def test_the_blocking_constructors(mosquitto: MosquittoBroker, emulator: Any) -> None:
    with StateStoreDict.connect(mosquitto.url, namespace="t-timeouts", timeout=2.5) as d:
        assert d.client.timeout == 2.5
    with StateStoreCache.connect(mosquitto.url, namespace="t-timeouts", timeout=None) as c:
        assert c.client.timeout is None


async def test_the_async_constructors(mosquitto: MosquittoBroker, emulator: Any) -> None:
    d = await AsyncStateStoreDict.connect(mosquitto.url, namespace="t-timeouts", timeout=3.5)
    try:
        assert d.client.timeout == 3.5
    finally:
        await d.close()
    c = await AsyncStateStoreCache.connect(mosquitto.url, namespace="t-timeouts", timeout=4.5)
    try:
        assert c.client.timeout == 4.5
    finally:
        await c.close()


def test_flask_caching_takes_request_timeout(mosquitto: MosquittoBroker, emulator: Any) -> None:
    flask = pytest.importorskip("sskv_mapping.integrations.flask_caching")
    url = mosquitto.url
    backend = flask.StateStoreCache(url, namespace=f"f{uuid.uuid4().hex[:6]}", request_timeout=1.25)
    assert backend.client.timeout == 1.25
    with pytest.raises(ConfigurationError):
        flask.StateStoreCache(url, request_timeout=0)


async def test_litestar_takes_request_timeout(mosquitto: MosquittoBroker, emulator: Any) -> None:
    litestar = pytest.importorskip("sskv_mapping.integrations.litestar")
    store = litestar.StateStoreStore(mosquitto.url, request_timeout=2.0)
    async with store:
        assert store.client.timeout == 2.0


async def test_aiocache_takes_request_timeout(mosquitto: MosquittoBroker, emulator: Any) -> None:
    aio = pytest.importorskip("sskv_mapping.integrations.aiocache")
    cache = aio.StateStoreCache(mosquitto.url, request_timeout=6.0)
    try:
        await cache.set("k", "v")
        core = cache.sskv_cache
        assert core is not None and core.client.timeout == 6.0
    finally:
        await cache.close()
