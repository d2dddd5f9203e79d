"""Django's own cache contract (``BaseCacheTests`` from the Django sdist's ``tests/cache/tests.py``) against the
state store backend, in its default configuration (no OPTIONS: signed pickle from ``SECRET_KEY``).

Run by ``nox -s peer-django``, which downloads the sdist of the installed Django and passes the directory that
holds its ``tests/cache`` package:

    python tests/peer/run_django_suite.py DJANGO_TESTS_DIR [sync|async] [local]

``local``: every alias with a local cache (``OPTIONS={"local_cache_size": 1000}``): a process reads what it wrote.

``async`` runs the same contract through our native ``a*`` methods: the module's ``cache``/``caches`` are
replaced by a mirror whose blocking methods ``asyncio.run`` the ``a*`` twins.

A private mosquitto and the emulator process are started here (loopback only). Django's test runner sets up an
in-memory SQLite database (some tests cache model instances). The aliases are Django's own
(``caches_setting_for_tests``, without the cull aliases, as for Redis). Tests listed in
``django_exclusions.json`` are skipped with their reason; any other failure or error fails the run. The last
line is ``N passed, N failed, N skipped``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
import unittest
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOCAL_CACHE_SIZE = 1000
sys.path.insert(0, str(HERE.parents[1]))  # the repository root: tests._support


def main(tests_dir: str, mode: str = "sync", cache: str = "") -> int:
    from tests._support.procs import private_store

    sys.path.insert(0, tests_dir)  # Django's tests/: the ``cache`` test package
    listed = json.loads((HERE / "django_exclusions.json").read_text())
    exclusions: dict[str, str] = {k: v for k, v in listed.items() if not k.startswith("_")}
    if mode == "async":
        exclusions.update(listed["_async"])
    options = {"local_cache_size": LOCAL_CACHE_SIZE} if cache == "local" else {}
    with private_store() as url:
        return run(url, exclusions, mirror=mode == "async", options=options)


class AsyncMirror:
    """A cache whose blocking methods call our backend's native ``a*`` twins (``asyncio.run`` per call): Django's
    sync contract, run through the async API (Django ships no async tests for real backends)."""

    MIRRORED = frozenset(
        [
            "get",
            "set",
            "add",
            "delete",
            "get_many",
            "set_many",
            "delete_many",
            "clear",
            "has_key",
            "incr",
            "decr",
            "touch",
            "get_or_set",
            "incr_version",
            "decr_version",
            "close",
        ]
    )

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        if name in self.MIRRORED:
            method = getattr(self._real, f"a{name}")

            def call(_cache: Any, *args: Any, **kwargs: Any) -> Any:
                return asyncio.run(method(*args, **kwargs))

            # a bound method, as the cache's own: Django 6's *_async_uses_specialized_implementation tests read
            # cache.<name>.__func__ to see whether the backend overrides it
            return types.MethodType(call, self._real)
        return getattr(self._real, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_real":
            object.__setattr__(self, name, value)
        else:  # the tests swap key_func etc. on the cache object
            setattr(self._real, name, value)

    def __delattr__(self, name: str) -> None:  # mock.patch.object's undo of the above
        delattr(self._real, name)

    def __contains__(self, key: Any) -> bool:
        return bool(asyncio.run(self._real.ahas_key(key)))


class MirrorCaches:
    def __init__(self, real: Any) -> None:
        self._real = real

    def __getitem__(self, alias: str) -> AsyncMirror:
        return AsyncMirror(self._real[alias])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def run(url: str, exclusions: dict[str, str], mirror: bool = False, options: dict[str, Any] | None = None) -> int:
    import django
    from django.conf import settings

    backend = "sskv_mapping.integrations.django.StateStoreCache"
    settings.configure(
        SECRET_KEY="peer-suite-secret-key-not-for-production",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django.contrib.sessions", "cache"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": {"BACKEND": backend, "LOCATION": url, "OPTIONS": options or {}}},
        MIDDLEWARE=[],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}],
        ROOT_URLCONF=None,
    )
    django.setup()
    from cache.tests import BaseCacheTests, caches_setting_for_tests
    from django.test import TestCase
    from django.test.utils import override_settings

    from sskv_mapping.integrations._common import close_shared_clients
    from tests.peer._store import run_with_django

    aliases = caches_setting_for_tests(BACKEND=backend, LOCATION=url, exclude={"cull", "zero_cull"})
    for alias in aliases.values():
        alias["OPTIONS"] = {**alias.get("OPTIONS", {}), **(options or {})}

    @override_settings(CACHES=aliases)
    class StateStoreCacheTests(BaseCacheTests, TestCase):
        pass

    for name, reason in exclusions.items():
        if hasattr(StateStoreCacheTests, name):
            setattr(
                StateStoreCacheTests, name, unittest.skip(f"excluded: {reason}")(getattr(StateStoreCacheTests, name))
            )

    if mirror:
        import cache.tests as their_module
        from django.core.cache import cache as default_cache
        from django.core.cache import caches as all_caches

        their_module.cache = AsyncMirror(default_cache)
        their_module.caches = MirrorCaches(all_caches)
    suite = unittest.TestLoader().loadTestsFromTestCase(StateStoreCacheTests)
    how = "through the async a* methods (AsyncMirror)" if mirror else "sync API"
    how += f", OPTIONS={options}" if options else ""
    return run_with_django(suite, f"django {django.get_version()}, {how}", close=close_shared_clients)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
