"""A FastAPI app on the in-process store (``statestore.fastapi_lifespan()``): the app's async client lives on the
test client's own event loop, in another thread, and reaches the store on the library's loop thread.

No ``from __future__ import annotations`` here: FastAPI reads the endpoint's annotations at runtime.
"""

from typing import Annotated, Any

import pytest

pytest.importorskip("fastapi")

from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from sskv_mapping import AsyncStateStoreDict
from sskv_mapping.integrations.fastapi import get_statestore_dict
from sskv_mapping.testing import InProcessStore

Config = Annotated[AsyncStateStoreDict[Any], Depends(get_statestore_dict())]


def make_app(statestore: InProcessStore) -> FastAPI:
    app = FastAPI(lifespan=statestore.fastapi_lifespan())

    @app.put("/config/{key}")
    async def put(key: str, value: int, config: Config) -> int:
        await config.set(key, value)
        return value

    @app.get("/config/{key}")
    async def get(key: str, config: Config) -> Any:
        return await config.get(key)

    return app


def test_the_app_and_the_test_share_the_in_process_store(statestore: InProcessStore) -> None:
    with TestClient(make_app(statestore)) as http:
        assert http.put("/config/answer", params={"value": 42}).json() == 42
        assert statestore.dict()["answer"] == 42  # a blocking dict on the same store sees the app's write
        statestore.client.set(f"{statestore.namespace}/other", b"7")
        assert http.get("/config/other").json() == 7
