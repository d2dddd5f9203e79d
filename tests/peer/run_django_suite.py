"""Django's own cache contract (``BaseCacheTests`` from the Django sdist's ``tests/cache/tests.py``) against the
state store backend, in its default configuration (no OPTIONS: signed pickle from ``SECRET_KEY``).

Run by ``nox -s peer-django``, which downloads the sdist of the installed Django and passes the directory that
holds its ``tests/cache`` package:

    python tests/peer/run_django_suite.py DJANGO_TESTS_DIR

A private mosquitto and the emulator process are started here (loopback only). Django's test runner sets up an
in-memory SQLite database (some tests cache model instances). The aliases are Django's own
(``caches_setting_for_tests``, without the cull aliases, as for Redis). Tests listed in
``django_exclusions.json`` are skipped with their reason; any other failure or error fails the run. The last
line is ``N passed, N failed, N skipped``.
"""

from __future__ import annotations

import json
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: _support


def main(tests_dir: str) -> int:
    from _support.procs import start_emulator

    from sskv_mapping.emulator.broker import MosquittoBroker

    sys.path.insert(0, tests_dir)  # Django's tests/: the ``cache`` test package
    exclusions: dict[str, str] = {
        k: v for k, v in json.loads((HERE / "django_exclusions.json").read_text()).items() if not k.startswith("_")
    }
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            return run(f"mqtt://{broker.host}:{broker.port}", exclusions)
        finally:
            emulator.stop()


def run(url: str, exclusions: dict[str, str]) -> int:
    import django
    from django.conf import settings

    backend = "sskv_mapping.integrations.django.StateStoreCache"
    settings.configure(
        SECRET_KEY="peer-suite-secret-key-not-for-production",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django.contrib.sessions", "cache"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        CACHES={"default": {"BACKEND": backend, "LOCATION": url}},
        MIDDLEWARE=[],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}],
        ROOT_URLCONF=None,
    )
    django.setup()
    from cache.tests import BaseCacheTests, caches_setting_for_tests  # type: ignore[import-not-found]
    from django.test import TestCase
    from django.test.runner import DiscoverRunner
    from django.test.utils import override_settings

    @override_settings(CACHES=caches_setting_for_tests(BACKEND=backend, LOCATION=url, exclude={"cull", "zero_cull"}))
    class StateStoreCacheTests(BaseCacheTests, TestCase):  # type: ignore[misc]
        pass

    for name, reason in exclusions.items():
        if hasattr(StateStoreCacheTests, name):
            setattr(
                StateStoreCacheTests, name, unittest.skip(f"excluded: {reason}")(getattr(StateStoreCacheTests, name))
            )

    suite = unittest.TestLoader().loadTestsFromTestCase(StateStoreCacheTests)
    runner = DiscoverRunner(verbosity=1, interactive=False)
    runner.setup_test_environment()
    old = runner.setup_databases()
    try:
        result = runner.run_suite(suite)
    finally:
        runner.teardown_databases(old)
        runner.teardown_test_environment()
        from sskv_mapping.integrations._common import close_shared_clients

        close_shared_clients()  # before the broker goes: no reconnect noise
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    for test, reason in result.skipped:
        print(f"skipped {test.id().rsplit('.', 1)[-1]}: {reason}")
    print(f"django {django.get_version()}: {result.testsRun} collected")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
