"""The lock tests are two parties on one store: ``client`` (the holder) and ``other``, made by ``store_backend``
(tests/conftest.py), so every lock test runs on the loopback store and on a real mosquitto + the emulator process.
They shadow the suite-wide ``client`` / ``other`` (broker only) by name."""

from __future__ import annotations

import pytest

from sskv_mapping.client import AsyncStateStoreClient
from tests._support.store_backend import StoreBackend


@pytest.fixture
async def client(store_backend: StoreBackend) -> AsyncStateStoreClient:
    return await store_backend.async_client()


@pytest.fixture
async def other(store_backend: StoreBackend) -> AsyncStateStoreClient:
    return await store_backend.async_client()
