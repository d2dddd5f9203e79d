"""A small FastAPI app whose page cache, settings and counter live in the Azure IoT Operations state store, so
that every instance of the app (every process, every machine) shares them.

* ``GET /``: a page cached for 30 s (``AsyncStateStoreCache.get_or_set``: one render across instances);
* ``GET /settings``, ``PUT /settings`` (a JSON object to merge in): settings shared through an
  ``AsyncStateStoreDict``; a write empties the page cache;
* ``POST /visits``: a counter exact across instances.

Run it: ``SSKV_URL=mqtt://127.0.0.1:1883 uvicorn fastapi_app.app:app`` from the ``integrations`` folder
(``sskv emulator --with-broker`` gives you a broker and the emulator).

(No ``from __future__ import annotations`` here: FastAPI reads the ``Annotated`` dependency aliases defined in
``create_app`` from the live annotations.)
"""

import itertools
import os
from typing import Annotated, Any

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse

from sskv_mapping import AsyncStateStoreDict
from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.integrations.fastapi import get_statestore_cache, get_statestore_dict, statestore_lifespan


def create_app(url: str | None = None, *, name: str = "fastapi-example", instance: str = "1") -> FastAPI:
    """The app; ``url`` defaults to ``$SSKV_URL`` (else ``mqtt://127.0.0.1:1883``), ``name`` prefixes the
    state store namespaces, ``instance`` names this instance in the pages it renders."""
    # --8<-- [start:lifespan]
    app = FastAPI(
        lifespan=statestore_lifespan(url=url or os.environ.get("SSKV_URL", "mqtt://127.0.0.1:1883"), namespace=name)
    )
    Settings = Annotated[AsyncStateStoreDict[Any], Depends(get_statestore_dict(f"{name}-settings"))]
    Pages = Annotated[AsyncStateStoreCache[Any], Depends(get_statestore_cache(f"{name}-pages"))]
    Counters = Annotated[AsyncStateStoreCache[Any], Depends(get_statestore_cache(f"{name}-counters"))]
    # --8<-- [end:lifespan]
    renders = itertools.count(1)

    @app.get("/", response_class=HTMLResponse)
    async def index(settings: Settings, pages: Pages) -> str:
        async def render() -> str:
            greeting = await settings.get("greeting", "Hello")
            return f"<h1>{greeting}!</h1><p>render {next(renders)} by instance {instance}</p>"

        page: str = await pages.get_or_set("index", render, ttl=30)  # one render, whichever instances ask
        return page

    @app.get("/settings")
    async def all_settings(settings: Settings) -> dict[str, Any]:
        return await settings.copy()

    @app.put("/settings")
    async def update_settings(changes: dict[str, Any], settings: Settings, pages: Pages) -> dict[str, Any]:
        await settings.update(changes)
        await pages.clear()  # pages rendered with the old settings
        return await settings.copy()

    @app.post("/visits")
    async def visit(counters: Counters) -> dict[str, int | float]:
        await counters.add("visits", 0, ttl=None)  # only if absent
        return {"visits": await counters.incr("visits")}

    return app


app = create_app()  # connects nothing until the app starts
