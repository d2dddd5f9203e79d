"""A FastAPI app behind hishel's ASGI cache middleware, its responses cached in the state store: every worker
(every process, every machine) serves what any of them rendered, until the response's ``max-age`` runs out.

Run it: ``SSKV_URL=mqtt://127.0.0.1:1883 uvicorn hishel_app.app:app --workers 2`` from the ``integrations``
folder (``sskv emulator --with-broker`` gives you a broker and the emulator).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response
from hishel.asgi import ASGICacheMiddleware

from sskv_mapping import AsyncStateStoreClient, ConnectionSettings
from sskv_mapping.integrations.hishel import AsyncStateStoreStorage


def create_app(url: str | None = None, *, namespace: str = "hishel-example") -> ASGICacheMiddleware:
    """The app wrapped in the cache middleware; ``url`` defaults to ``$SSKV_URL``."""
    # --8<-- [start:app]
    url = url or os.environ.get("SSKV_URL", "mqtt://127.0.0.1:1883")
    settings = ConnectionSettings.from_url(url)
    client = AsyncStateStoreClient(settings=settings)  # connected by the lifespan, on the app's loop

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with client:
            yield

    api = FastAPI(lifespan=lifespan)
    renders = itertools.count(1)

    @api.get("/report")
    async def report(response: Response) -> dict[str, int]:
        response.headers["Cache-Control"] = "public, max-age=60"  # a shared cache may keep it a minute
        return {"rendered_by": os.getpid(), "render": next(renders)}

    storage = AsyncStateStoreStorage(client, namespace=namespace, default_ttl=300)
    return ASGICacheMiddleware(api, storage=storage)
    # --8<-- [end:app]


app = create_app()
