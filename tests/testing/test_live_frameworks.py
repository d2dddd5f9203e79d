"""The framework helpers of ``statestore_live`` put a real app on the session's server, in the test's namespace:
a Litestar store, a FastAPI lifespan and aiocache's config, each written through the app and read back by the
test's own dict or client.

No ``from __future__ import annotations`` here: FastAPI and Litestar read the handlers' annotations at runtime.
"""

from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreDict
from sskv_mapping.testing import LiveStore


def test_a_litestar_store_on_the_live_store(statestore_live: LiveStore) -> None:
    pytest.importorskip("litestar")
    from litestar import Litestar, Request, put
    from litestar.stores.registry import StoreRegistry
    from litestar.testing import TestClient

    store = statestore_live.litestar_store()

    @put("/remember", status_code=200)
    async def remember(request: Request[Any, Any, Any]) -> str:
        await request.app.stores.get("words").set("last", b"hello")
        return "hello"

    app = Litestar(
        route_handlers=[remember], stores=StoreRegistry(default_factory=store.with_namespace), lifespan=[store.lifespan]
    )
    with TestClient(app) as http:
        assert http.put("/remember").text == "hello"
    keys = list(statestore_live.client.scan(f"{statestore_live.namespace}.words*"))
    assert keys, "the app's store wrote in the test's namespace"


def test_a_fastapi_app_on_the_live_store(statestore_live: LiveStore) -> None:
    pytest.importorskip("fastapi")
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from sskv_mapping.integrations.fastapi import get_statestore_dict

    config_dependency = Depends(get_statestore_dict())
    app = FastAPI(lifespan=statestore_live.fastapi_lifespan())

    @app.put("/config/{key}")
    async def set_config(key: str, value: int, config: AsyncStateStoreDict[Any] = config_dependency) -> int:
        await config.set(key, value)
        return value

    with TestClient(app) as http:
        assert http.put("/config/limit", params={"value": 5}).json() == 5
    assert statestore_live.dict(local_cache_size=0)["limit"] == 5


async def test_aiocache_config_on_the_live_store(statestore_live: LiveStore) -> None:
    aiocache = pytest.importorskip("aiocache")
    before = aiocache.caches.get_config()  # aiocache's config is process-wide: put it back afterwards
    aiocache.caches.set_config({**before, **statestore_live.aiocache_config("sskv-test", ttl=60)})
    try:
        cache = aiocache.caches.create("sskv-test")
        await cache.set("report", {"rows": 3})
        assert await cache.get("report") == {"rows": 3}
        await cache.close()
    finally:
        aiocache.caches.set_config(before)
    assert list(statestore_live.client.scan(f"{statestore_live.namespace}*"))
