"""What Django 6 changed in the cache API that concerns a backend, checked on whichever Django is installed.

Django 6.0 made ``BaseCache``'s default ``a*`` methods hop to a thread (``sync_to_async``) whenever a backend
overrides the blocking twin (``aget_many`` -> ``get_many``, ``aincr`` -> ``incr``, ... and ``aclose`` ->
``close``), instead of composing the other ``a*`` methods. Our backend serves every ``a*`` natively on the
caller's loop, so each blocking method it overrides must have its own ``a*`` twin: a missing one would silently
become a thread hop on Django 6 (and a different code path than on 5.2)."""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("django")

from django.core.cache.backends.base import BaseCache

from sskv_mapping.integrations.django import StateStoreCache


def _async_twins() -> list[tuple[str, str]]:
    """(sync, async) method pairs of Django's BaseCache (``get``/``aget``, ``close``/``aclose``...)."""
    pairs = []
    for name, member in vars(BaseCache).items():
        if name.startswith("a") and inspect.iscoroutinefunction(member) and callable(vars(BaseCache).get(name[1:])):
            pairs.append((name[1:], name))
    return pairs


def test_the_base_cache_has_async_twins() -> None:
    names = dict(_async_twins())
    assert {"get", "get_many", "set_many", "incr", "has_key", "get_or_set", "close"} <= names.keys()


@pytest.mark.parametrize(("sync", "async_"), _async_twins())
def test_every_overridden_blocking_method_has_a_native_async_twin(sync: str, async_: str) -> None:
    if getattr(StateStoreCache, sync) is getattr(BaseCache, sync):
        pytest.skip(f"{sync} is Django's own: its {async_} composes our native a* methods")
    assert getattr(StateStoreCache, async_) is not getattr(BaseCache, async_), (
        f"StateStoreCache overrides {sync} but not {async_}: Django 6 would run it through sync_to_async"
    )
