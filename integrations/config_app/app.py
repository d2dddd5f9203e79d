"""A FastAPI service whose ``Settings`` come from the state store and change live, with no restart and no polling.

* ``GET /greet``: ``{"message": "<greeting>!"}``; ``GET /items``: ``max_items`` items;
* ``GET /settings``: the settings in force, how many changes were rejected, and when the last one was applied.

The settings live in the dict namespace ``$SSKV_CONFIG_NAMESPACE`` (default ``config-app``), one key per field, as
text: ``sskv set config-app/greeting Hola`` changes the greeting of every running instance; a value that fails
validation (``sskv set config-app/max_items 0``) is logged and the previous settings stay.

Run it: ``SSKV_URL=mqtt://127.0.0.1:1883 uvicorn config_app.app:app`` from the ``integrations`` folder.
"""

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from sskv_mapping import AsyncStateStoreDict
from sskv_mapping.integrations.pydantic_settings import AsyncLiveSettings, StateStoreSettingsSource

STOPPED = "config app: settings stopped"


def settings_class(store: AsyncStateStoreDict[Any]) -> type[BaseSettings]:
    """The service's settings: env vars (``CONFIG_APP_...``) first, then the store, then the defaults."""

    class Settings(BaseSettings, env_prefix="CONFIG_APP_"):
        greeting: str = "Hello"
        max_items: int = Field(3, gt=0, le=100)

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, StateStoreSettingsSource(settings_cls, store)

    return Settings


def create_app(url: str | None = None, namespace: str | None = None) -> FastAPI:
    url = url or os.environ.get("SSKV_URL", "mqtt://127.0.0.1:1883")
    namespace = namespace or os.environ.get("SSKV_CONFIG_NAMESPACE", "config-app")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # values as text, as `sskv set` writes them: pydantic turns "5" into 5
        async with await AsyncStateStoreDict.connect(url, namespace=namespace, codec="str") as store:
            live = await AsyncLiveSettings.start(settings_class(store), store)
            app.state.live = live
            app.state.applied_at = None

            def applied(settings: BaseSettings) -> None:
                app.state.applied_at = time.time()

            live.add_listener(applied)
            try:
                yield
            finally:
                await live.aclose()
                print(STOPPED, flush=True)

    app = FastAPI(lifespan=lifespan)

    def current(request: Request) -> Any:
        return request.app.state.live.current

    @app.get("/greet")
    async def greet(request: Request) -> dict[str, str]:
        return {"message": f"{current(request).greeting}!"}

    @app.get("/items")
    async def items(request: Request) -> list[int]:
        return list(range(current(request).max_items))

    @app.get("/settings")
    async def settings(request: Request) -> dict[str, Any]:
        live = request.app.state.live
        return {**live.current.model_dump(), "rejected": live.rejected, "applied_at": request.app.state.applied_at}

    return app


app = create_app()
