"""The TTL table of every framework convention (``tests/test_ttl.py``), each row checked against the framework itself.

``translate_ttl(value, convention, default)`` turns a framework's "timeout" into our ``ttl`` (``None`` never
expires, ``0.0`` expires now, else seconds). ``tests/test_ttl.py`` asserts each row against :func:`translate_ttl`;
here it is asserted against what the framework's own reference backend does with the same argument (Django's
``BaseCache.get_backend_timeout``, cachelib's ``SimpleCache`` under Flask-Caching, Litestar's ``StorageObject``,
aiocache's ``SimpleMemoryCache``); a row a framework cannot take is skipped there, as is a framework that is not
installed (each nox session installs one).
"""

from __future__ import annotations

import asyncio
import math
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from sskv_mapping import UNSET
from tests.test_ttl import NEVER, NOW, TABLE, row_id

# -- what each framework does with the same argument --------------------------------------------------------

Meaning = float | None  # None: never expires; 0.0: already expired; else seconds left


def _left(seconds: float) -> Meaning:
    return NOW if seconds <= 0 else seconds


def _django(value: Any, default: Any) -> Meaning:
    base = pytest.importorskip("django.core.cache.backends.base")
    if isinstance(value, timedelta) or isinstance(default, timedelta):
        pytest.skip("Django timeouts are numbers")
    cache = base.BaseCache({"TIMEOUT": default})
    at = cache.get_backend_timeout(base.DEFAULT_TIMEOUT if value is UNSET else value)
    return NEVER if at is None else _left(at - time.time())


def _flask(value: Any, default: Any) -> Meaning:
    cachelib = pytest.importorskip("cachelib")
    if default is None:
        pytest.skip("cachelib needs a numeric default timeout")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # cachelib deprecates float timeouts
        try:
            cache = cachelib.SimpleCache(default_timeout=default)
            now = time.time()
            expires = cache._normalize_timeout(None if value is UNSET else value)
        except TypeError:  # cachelib before 0.11 takes no timedelta
            pytest.skip(f"cachelib {cachelib.__version__} cannot take this timeout")
    # SimpleCache.get: ``expires == 0 or expires > time()`` is alive; expiry times are whole seconds
    return NEVER if expires == 0 else _left(expires - math.floor(now))


def _litestar(value: Any, default: Any) -> Meaning:
    base = pytest.importorskip("litestar.stores.base")
    if value is UNSET:
        pytest.skip("Litestar's expires_in is always given")
    obj = base.StorageObject.new(b"", expires_in=value)
    if obj.expires_at is None:
        return NEVER
    return NOW if obj.expired else _left(obj.expires_at.timestamp() - time.time())


def _aiocache(value: Any, default: Any) -> Meaning:
    aiocache = pytest.importorskip("aiocache")
    from aiocache.base import SENTINEL

    async def scheduled() -> Meaning:
        cache = aiocache.SimpleMemoryCache(ttl=default)
        await cache.set("k", "v", ttl=SENTINEL if value is UNSET else value)
        if not await cache.exists("k"):  # an expiry scheduled in the past may have run already
            return NOW
        handle = cache._handlers.get("k")  # the memory backend schedules its expiry with call_later
        if handle is None:
            return NEVER
        return _left(handle.when() - asyncio.get_running_loop().time())

    return asyncio.run(scheduled())


ORACLES: dict[str, Callable[[Any, Any], Meaning]] = {
    "django": _django,
    "flask": _flask,
    "litestar": _litestar,
    "aiocache": _aiocache,
}


@pytest.mark.parametrize("row", TABLE, ids=row_id)
def test_the_framework_means_the_same(row: tuple[str, Any, Any, float | None]) -> None:
    convention, value, default, expected = row
    meant = ORACLES[convention](value, default)
    if expected is None or expected == NOW:
        assert meant == expected
    else:
        assert meant is not None
        assert expected - 1.0 <= meant <= expected  # the time it took, and cachelib's whole seconds
