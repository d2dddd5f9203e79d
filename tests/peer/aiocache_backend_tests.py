"""aiocache's own acceptance tests (from its sdist's ``tests/acceptance``) against our aiocache backend in its
default configuration: their generic classes, which take the ``cache`` fixture, with that fixture giving ours
(as their conftest gives Redis or memcached). Not collected from here: ``run_pytest_suite.py`` copies it into the
extracted ``tests/acceptance`` (``SSKV_PEER_URL`` names the broker it started). Run with the pytest and
pytest-asyncio versions aiocache's suite pins (``nox -s peer-aiocache``).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator

import pytest

from sskv_mapping.integrations.aiocache import StateStoreCache

from ..utils import KEY_LOCK, Keys  # type: ignore[import-not-found]
from .test_base import TestCache as _TestCache  # type: ignore[import-not-found]
from .test_decorators import TestCached as _TestCached  # type: ignore[import-not-found]
from .test_decorators import TestCachedStampede as _TestCachedStampede
from .test_decorators import TestMultiCachedDecorator as _TestMultiCachedDecorator
from .test_lock import TestOptimisticLock as _TestOptimisticLock  # type: ignore[import-not-found]
from .test_lock import TestRedLock as _TestRedLock
from .test_lock import lock  # noqa: F401 - their fixture, used by the lock tests


@pytest.fixture
async def sskv_cache() -> AsyncIterator[StateStoreCache]:
    async with StateStoreCache(
        os.environ["SSKV_PEER_URL"], namespace="test", sskv_namespace=f"aio-{uuid.uuid4().hex[:8]}"
    ) as c:
        yield c
        await asyncio.gather(*(c.delete(k) for k in (*Keys, KEY_LOCK)))


@pytest.fixture(params=["sskv_cache"])
def cache(request: pytest.FixtureRequest) -> StateStoreCache:
    """Their conftest's ``cache`` picks redis/memory/memcached by param; here the one param is ours."""
    value: StateStoreCache = request.getfixturevalue(request.param)
    return value


class TestStateStoreCache(_TestCache):  # type: ignore[misc]
    pass


class TestStateStoreCached(_TestCached):  # type: ignore[misc]
    pass


class TestStateStoreCachedStampede(_TestCachedStampede):  # type: ignore[misc]
    pass


class TestStateStoreMultiCached(_TestMultiCachedDecorator):  # type: ignore[misc]
    pass


class TestStateStoreRedLock(_TestRedLock):  # type: ignore[misc]
    pass


class TestStateStoreOptimisticLock(_TestOptimisticLock):  # type: ignore[misc]
    pass
