"""The aiocache backend against the part of aiocache's API that 0.12 and 1.0 (its main branch) share:
``BaseCache`` itself, built directly. ``test_aiocache.py`` covers 0.12's factories (``Cache``, ``caches``) and
decorators; this file runs unchanged on 1.0, where ``build_key`` is abstract and ``key_builder`` changed
its call (``PYTHONPATH=<aiocache checkout> pytest tests/integrations/test_aiocache_api.py``)."""

from __future__ import annotations

import enum
import inspect
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

pytest.importorskip("aiocache")

from aiocache.base import BaseCache

from sskv_mapping.integrations.aiocache import StateStoreCache

#: aiocache 1.0 (main branch, aiocache/base.py): the methods ``BaseCache`` declares ``@abstractmethod``
ABSTRACT_IN_1_0 = (
    "build_key",
    "_add",
    "_get",
    "_gets",
    "_multi_get",
    "_set",
    "_multi_set",
    "_delete",
    "_exists",
    "_increment",
    "_expire",
    "_clear",
    "_raw",
    "_redlock_release",
)
#: 1.0 resolves the namespace before calling a ``key_builder``; 0.12 passes it as given
RESOLVES_NAMESPACE = hasattr(BaseCache, "_str_build_key")


class Color(enum.Enum):
    RED = "red"


@pytest.fixture
async def make_cache(broker_url: str) -> AsyncIterator[Callable[..., StateStoreCache]]:
    made: list[StateStoreCache] = []

    def make(**kwargs: Any) -> StateStoreCache:
        cache = StateStoreCache(broker_url, sskv_namespace=f"aio{uuid.uuid4().hex[:10]}", **kwargs)
        made.append(cache)
        return cache

    yield make
    for cache in made:
        await cache.close()


def test_the_backend_defines_every_method_aiocache_1_0_declares_abstract() -> None:
    missing = [name for name in ABSTRACT_IN_1_0 if name not in vars(StateStoreCache)]
    assert not missing
    assert not getattr(StateStoreCache, "__abstractmethods__", frozenset())  # instantiable on 1.0 (an ABC there)
    assert not inspect.isabstract(StateStoreCache)


def test_build_key_is_the_redis_layout_on_every_version() -> None:
    cache = StateStoreCache(namespace="ns")
    assert "build_key" not in vars(cache)  # 0.12 pins one per instance: this class's method must win
    assert cache.build_key("k") == "ns:k"
    assert cache.build_key(Color.RED) == "ns:red"
    assert cache.build_key("k", namespace="other") == "other:k"
    assert StateStoreCache().build_key("k") == "k"  # no namespace: the key as is
    if not RESOLVES_NAMESPACE:  # 0.12's name for the default layout (aiocache's own 0.12 tests call it)
        assert cache._build_key("k", namespace="other") == "other:k"


def test_a_key_builder_is_called_as_the_installed_aiocache_calls_it() -> None:
    calls: list[tuple[Any, Any]] = []

    def key_builder(key: Any, namespace: Any = None) -> str:
        calls.append((key, namespace))
        return f"custom:{key}"

    cache = StateStoreCache(namespace="ns", key_builder=key_builder)
    assert cache.build_key("k") == "custom:k"
    assert cache.build_key(Color.RED, namespace="other") == f"custom:{'red' if RESOLVES_NAMESPACE else Color.RED}"
    expected = [("k", "ns"), ("red", "other")] if RESOLVES_NAMESPACE else [("k", None), (Color.RED, "other")]
    assert calls == expected


async def test_base_cache_operations_round_trip(make_cache: Callable[..., StateStoreCache]) -> None:
    cache = make_cache(namespace="main")
    assert await cache.set("a", {"x": 1}) is True
    assert await cache.get("a") == {"x": 1}
    assert await cache.get("missing", default="d") == "d"
    assert await cache.add("b", 1) is True
    with pytest.raises(ValueError):
        await cache.add("b", 2)
    assert await cache.increment("b", 2) == 3
    assert await cache.exists("b") is True
    assert await cache.multi_set([("c", "C"), ("d", "D")]) is True
    assert await cache.multi_get(["c", "d", "missing"]) == ["C", "D", None]
    assert await cache.expire("c", 60) is True
    assert await cache.delete("c") == 1
    assert await cache.exists("c") is False
    assert await cache.set("k", "other ns", namespace="side") is True
    assert await cache.clear(namespace="side") is True
    assert await cache.get("k", namespace="side") is None
    assert await cache.get("a") == {"x": 1}  # another aiocache namespace: untouched
    assert await cache.clear() is True
    assert await cache.get("a") is None
