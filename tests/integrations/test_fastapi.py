"""FastAPI / Starlette: ``statestore_lifespan`` opens one client per app on the app's loop and closes it at
shutdown; ``get_statestore_dict`` / ``get_statestore_cache`` hand requests the app's (reused) dict and cache.
Against mosquitto and the emulator process, through FastAPI's TestClient and httpx's ASGI transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import pytest

pytest.importorskip("fastapi")

import httpx
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sskv_mapping import AsyncStateStoreClient, AsyncStateStoreDict, ClientStateError, ConnectionSettings
from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.integrations.fastapi import (
    AppStateStore,
    get_statestore,
    get_statestore_cache,
    get_statestore_dict,
    statestore_lifespan,
)

Config = Annotated[AsyncStateStoreDict[Any], Depends(get_statestore_dict())]
Pages = Annotated[AsyncStateStoreCache[Any], Depends(get_statestore_cache())]


def _app(broker_url: str, namespace: str, **kwargs: Any) -> FastAPI:
    app = FastAPI(lifespan=statestore_lifespan(url=broker_url, namespace=namespace, **kwargs))
    seen: list[int] = []

    @app.get("/config/{key}")
    async def read(key: str, config: Config) -> Any:
        seen.append(id(config))
        return await config.get(key)

    @app.put("/config/{key}")
    async def write(key: str, value: dict[str, Any], config: Config) -> None:
        await config.set(key, value)

    @app.get("/ids")
    async def ids(config: Config, pages: Pages, store: Annotated[AppStateStore, Depends(get_statestore)]) -> Any:
        return {"config": config.namespace, "pages": pages.namespace, "same": len(set(seen)) <= 1}

    @app.get("/page/{name}")
    async def page(name: str, pages: Pages) -> Any:
        return await pages.get_or_set(name, lambda: {"rendered": name})

    return app


def test_lifespan_opens_one_client_for_the_app_and_closes_it(broker_url: str, namespace: str) -> None:
    app = _app(broker_url, namespace)
    with TestClient(app) as http:
        store = app.state.statestore
        assert isinstance(store, AppStateStore)
        assert store.client.state.value == "connected"
        assert http.put("/config/feature", json={"on": True}).status_code == 200
        assert http.get("/config/feature").json() == {"on": True}
        assert http.get("/config/feature").json() == {"on": True}
        assert http.get("/ids").json() == {"config": namespace, "pages": f"{namespace}-cache", "same": True}
        assert http.get("/page/home").json() == {"rendered": "home"}
        client = store.client
    assert client.state.value == "closed"
    assert not hasattr(app.state, "statestore")


def test_the_dependencies_reuse_the_apps_instances(broker_url: str, namespace: str) -> None:
    app = _app(broker_url, namespace)
    with TestClient(app) as http:
        for key in ("a", "b", "c"):
            http.get(f"/config/{key}")
        assert http.get("/ids").json()["same"] is True
        store: AppStateStore = app.state.statestore
        assert http.portal is not None
        first = http.portal.call(store.dict)
        assert http.portal.call(store.dict, namespace) is first
        assert http.portal.call(store.cache) is http.portal.call(store.cache, f"{namespace}-cache")


def test_a_second_app_instance_sees_the_first_ones_writes(broker_url: str, namespace: str) -> None:
    with TestClient(_app(broker_url, namespace)) as a, TestClient(_app(broker_url, namespace)) as b:
        a.put("/config/limit", json={"n": 5})
        assert b.get("/config/limit").json() == {"n": 5}
        assert a.get("/page/shared").json() == b.get("/page/shared").json() == {"rendered": "shared"}


def test_an_app_without_the_lifespan_is_told_what_is_missing() -> None:
    app = FastAPI()

    @app.get("/")
    async def root(config: Config) -> None:
        return None

    with TestClient(app) as http, pytest.raises(ClientStateError, match="statestore_lifespan"):
        http.get("/")


def test_the_apps_own_lifespan_runs_inside_with_the_store_available(broker_url: str, namespace: str) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def own(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        config = await app.state.statestore.dict()
        await config.set("booted", True)
        events.append("start")
        yield {"extra": 42}
        events.append("stop")

    app = FastAPI(lifespan=statestore_lifespan(url=broker_url, namespace=namespace, lifespan=own))

    @app.get("/")
    async def root(request: Request, config: Config) -> Any:
        return {"booted": await config.get("booted"), "extra": request.state.extra}

    with TestClient(app) as http:
        assert http.get("/").json() == {"booted": True, "extra": 42}
    assert events == ["start", "stop"]


async def test_on_the_test_loop_with_httpx_and_a_given_client(broker_url: str, namespace: str) -> None:
    client = AsyncStateStoreClient(settings=ConnectionSettings.from_url(broker_url))
    await client.connect()
    try:
        lifespan = statestore_lifespan(namespace=namespace, client=client, cache_options={"default_ttl": 30})
        app = _app(broker_url, namespace)
        async with lifespan(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                await http.put("/config/k", json={"v": 1})
                assert (await http.get("/config/k")).json() == {"v": 1}
            store: AppStateStore = app.state.statestore
            assert store.client is client
            assert (await store.cache()).default_ttl == 30
        assert client.state.value == "connected"  # not ours to close
        with pytest.raises(ClientStateError, match="closed"):
            await store.dict("late")
    finally:
        await client.close()


def test_plain_starlette(broker_url: str, namespace: str) -> None:
    async def read(request: Request) -> JSONResponse:
        config = await get_statestore(request).dict("settings")
        await config.set("hello", "world")
        return JSONResponse(await config.copy())

    app = Starlette(routes=[Route("/", read)], lifespan=statestore_lifespan(url=broker_url, namespace=namespace))
    with TestClient(app) as http:
        assert http.get("/").json() == {"hello": "world"}
