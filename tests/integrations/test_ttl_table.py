"""The TTL table of every framework convention, and each row checked against the framework itself.

``translate_ttl(value, convention, default)`` turns a framework's "timeout" into our ``ttl`` (``None`` never
expires, ``0.0`` expires now, else seconds). Each row is asserted twice: against :func:`translate_ttl`, and
against what the framework's own reference backend does with the same argument (Django's
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

from sskv_mapping import UNSET, ConfigurationError
from sskv_mapping.cache import translate_ttl

NEVER = None
NOW = 0.0

# convention, value (UNSET: the framework's argument was not given), the framework's configured default, our ttl
TABLE: list[tuple[str, Any, Any, float | None]] = [
    # Django: not given -> TIMEOUT; None never; 0 and below expire at once
    ("django", UNSET, 300, 300.0),
    ("django", UNSET, None, NEVER),
    ("django", UNSET, 0, NOW),
    ("django", None, 300, NEVER),
    ("django", 0, 300, NOW),
    ("django", -1, 300, NOW),
    ("django", 30, 300, 30.0),
    ("django", 2.5, 300, 2.5),
    # Flask-Caching (cachelib): None and not given -> CACHE_DEFAULT_TIMEOUT; 0 never; below 0 at once
    ("flask", UNSET, 300, 300.0),
    ("flask", None, 300, 300.0),
    ("flask", None, 0, NEVER),
    ("flask", UNSET, 0, NEVER),
    ("flask", 0, 300, NEVER),
    ("flask", -5, 300, NOW),
    ("flask", 60, 300, 60.0),
    ("flask", timedelta(minutes=2), 300, 120.0),
    ("flask", None, timedelta(seconds=45), 45.0),
    # Litestar Store.set(expires_in=...): None and 0 never; below 0 at once
    ("litestar", None, UNSET, NEVER),
    ("litestar", 0, UNSET, NEVER),
    ("litestar", timedelta(0), UNSET, NEVER),
    ("litestar", -1, UNSET, NOW),
    ("litestar", 10, UNSET, 10.0),
    ("litestar", timedelta(seconds=90), UNSET, 90.0),
    # aiocache: not given (SENTINEL) -> the cache's ttl; None and 0 never; below 0 at once
    ("aiocache", UNSET, 60, 60.0),
    ("aiocache", UNSET, None, NEVER),
    ("aiocache", None, 60, NEVER),
    ("aiocache", 0, 60, NEVER),
    ("aiocache", -1, 60, NOW),
    ("aiocache", 0.5, 60, 0.5),
    ("aiocache", 10, None, 10.0),
]


def _row_id(row: tuple[str, Any, Any, float | None]) -> str:
    convention, value, default, _ = row
    return f"{convention}-{value!r}-default={default!r}"


@pytest.mark.parametrize("row", TABLE, ids=_row_id)
def test_translate_ttl(row: tuple[str, Any, Any, float | None]) -> None:
    convention, value, default, expected = row
    assert translate_ttl(value, convention, default) == expected


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


@pytest.mark.parametrize("row", TABLE, ids=_row_id)
def test_the_framework_means_the_same(row: tuple[str, Any, Any, float | None]) -> None:
    convention, value, default, expected = row
    meant = ORACLES[convention](value, default)
    if expected is None or expected == NOW:
        assert meant == expected
    else:
        assert meant is not None
        assert expected - 1.0 <= meant <= expected  # the time it took, and cachelib's whole seconds


# -- refusals ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("convention", sorted(ORACLES))
@pytest.mark.parametrize("value", [True, "60", float("nan"), float("inf"), [60]])
def test_values_that_are_not_a_timeout_are_refused(convention: str, value: Any) -> None:
    with pytest.raises(ConfigurationError):
        translate_ttl(value, convention, 300)


@pytest.mark.parametrize("convention", sorted(ORACLES))
def test_not_given_without_a_default_is_refused(convention: str) -> None:
    with pytest.raises(ConfigurationError, match="default"):
        translate_ttl(UNSET, convention)


def test_an_unknown_convention_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="convention"):
        translate_ttl(60, "bottle", 300)
