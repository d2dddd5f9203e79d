"""aiocache's own acceptance tests (from its sdist's ``tests/acceptance``) against our aiocache backend, default
configuration and with a local cache: their generic classes take the ``cache`` fixture, here ours (as their conftest
gives Redis or memcached). Not collected from here: ``run_pytest_suite.py`` copies it into the extracted
``tests/acceptance`` (``SSKV_PEER_URL`` names its broker). Run with the test tools aiocache pins (``nox -s
peer-aiocache``; ``-k local`` for the local-cache half)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator

import pytest

from sskv_mapping.integrations.aiocache import StateStoreCache

from ..utils import KEY_LOCK, Keys
from .test_base import TestCache as _TestCache
from .test_decorators import TestCached as _TestCached
from .test_decorators import TestCachedStampede as _TestCachedStampede
from .test_decorators import TestMultiCachedDecorator as _TestMultiCachedDecorator
from .test_lock import TestOptimisticLock as _TestOptimisticLock
from .test_lock import TestRedLock as _TestRedLock
from .test_lock import lock  # noqa: F401 - their fixture, used by the lock tests


async def _opened(local_cache_size: int) -> AsyncIterator[StateStoreCache]:
    async with StateStoreCache(
        os.environ["SSKV_PEER_URL"],
        namespace="test",
        sskv_namespace=f"aio-{uuid.uuid4().hex[:8]}",
        local_cache_size=local_cache_size,
    ) as c:
        yield c
        await asyncio.gather(*(c.delete(k) for k in (*Keys, KEY_LOCK)))


@pytest.fixture
async def sskv_cache() -> AsyncIterator[StateStoreCache]:
    async for c in _opened(0):
        yield c


@pytest.fixture
async def sskv_cache_local() -> AsyncIterator[StateStoreCache]:
    """With a local cache on: what a process reads after its own write must be what the store holds."""
    async for c in _opened(1000):
        yield c


@pytest.fixture(params=["sskv_cache", "sskv_cache_local"])
def cache(request: pytest.FixtureRequest) -> StateStoreCache:
    """Their conftest's ``cache`` picks redis/memory/memcached by param; here the params are ours, without and
    with a local cache."""
    value: StateStoreCache = request.getfixturevalue(request.param)
    return value


class TestStateStoreCache(_TestCache):
    pass


class TestStateStoreCached(_TestCached):
    pass


class TestStateStoreCachedStampede(_TestCachedStampede):
    pass


class TestStateStoreMultiCached(_TestMultiCachedDecorator):
    pass


class TestStateStoreRedLock(_TestRedLock):
    pass


class TestStateStoreOptimisticLock(_TestOptimisticLock):
    pass
