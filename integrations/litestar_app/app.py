"""A small Litestar app whose sessions, response cache and settings live in the Azure IoT Operations state
store, so that every instance of the app (every process, every machine) shares them.

* ``GET /``: a page in Litestar's response cache for 30 s (any instance serves the render another one cached);
* ``POST /login`` (``{"user": ...}``), ``GET /me``, ``POST /logout``: server-side sessions, valid on every
  instance;
* ``GET /settings``, ``PUT /settings`` (a JSON object to merge in): settings shared through an
  ``AsyncStateStoreDict``; a write empties the response cache.

Run it: ``SSKV_URL=mqtt://127.0.0.1:1883 uvicorn litestar_app.app:app`` from the ``integrations`` folder
(``sskv emulator --with-broker`` gives you a broker and the emulator).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, MediaType, Request, get, post, put
from litestar.exceptions import NotAuthorizedException
from litestar.middleware.session.server_side import ServerSideSessionConfig
from litestar.stores.registry import StoreRegistry

from sskv_mapping import AsyncStateStoreDict
from sskv_mapping.integrations.litestar import StateStoreStore


def create_app(url: str | None = None, *, name: str = "litestar-example", instance: str = "1") -> Litestar:
    """The app; ``url`` defaults to ``$SSKV_URL`` (else ``mqtt://127.0.0.1:1883``), ``name`` is the root
    namespace in the state store, ``instance`` names this instance in the pages it renders."""
    # --8<-- [start:store]
    store = StateStoreStore(url or os.environ.get("SSKV_URL", "mqtt://127.0.0.1:1883"), namespace=name)

    @asynccontextmanager
    async def settings_lifespan(app: Litestar) -> AsyncIterator[None]:
        # after store.lifespan (the list's order): the store's client is connected, on the app's loop
        async with AsyncStateStoreDict(store.client, namespace=f"{name}-settings") as settings:
            app.state.settings = settings
            yield

    # --8<-- [end:store]

    def settings_of(request: Request[Any, Any, Any]) -> AsyncStateStoreDict[Any]:
        settings: AsyncStateStoreDict[Any] = request.app.state.settings
        return settings

    renders = itertools.count(1)

    @get("/", cache=30, media_type=MediaType.HTML)
    async def index(request: Request[Any, Any, Any]) -> str:
        greeting = await settings_of(request).get("greeting", "Hello")
        return f"<h1>{greeting}!</h1><p>render {next(renders)} by instance {instance}</p>"

    @post("/login")
    async def login(request: Request[Any, Any, Any]) -> dict[str, str]:
        user = str((await request.json())["user"])
        request.set_session({"user": user})
        return {"user": user}

    @get("/me")
    async def me(request: Request[Any, Any, Any]) -> dict[str, str]:
        user = request.session.get("user")
        if user is None:
            raise NotAuthorizedException("not logged in")
        return {"user": user, "instance": instance}

    @post("/logout", status_code=204)
    async def logout(request: Request[Any, Any, Any]) -> None:
        request.clear_session()

    @get("/settings")
    async def all_settings(request: Request[Any, Any, Any]) -> dict[str, Any]:
        return await settings_of(request).copy()

    @put("/settings")
    async def update_settings(request: Request[Any, Any, Any]) -> dict[str, Any]:
        settings = settings_of(request)
        await settings.update(await request.json())
        await request.app.stores.get("response_cache").delete_all()  # pages rendered with the old settings
        return await settings.copy()

    # --8<-- [start:app]
    return Litestar(
        route_handlers=[index, login, me, logout, all_settings, update_settings],
        stores=StoreRegistry(default_factory=store.with_namespace),  # sessions, response_cache: <name>.<store>
        lifespan=[store.lifespan, settings_lifespan],
        middleware=[ServerSideSessionConfig().middleware],
    )
    # --8<-- [end:app]


app = create_app()  # connects nothing until the app starts
