"""django-constance's own backend tests (from its sdist) against ``sskv_mapping.integrations.constance``.

Run by ``nox -s peer-constance``, which downloads the sdist of the installed django-constance and passes its root:

    python tests/peer/run_constance_suite.py CONSTANCE_SDIST_ROOT

Loaded from there: ``tests/storage.py``'s ``StorageTestsMixin`` (the contract every constance backend's test class
mixes in) and ``tests/backends/test_redis.py``'s classes (the Redis backend's tests, sync and async: the backend
ours stands in for), their ``setUp``/``tearDown`` emptying our namespace where they empty the Redis mock-up. Their
settings module (``tests.settings``) is Django's, with the broker added. A private mosquitto and the emulator
process are started here (loopback only). No exclusions. The last line is ``N passed, N failed, N skipped``.
"""

from __future__ import annotations

import os
import sys
import unittest
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BACKEND = "sskv_mapping.integrations.constance.StateStoreBackend"


def main(sdist_root: str) -> int:
    sys.path.insert(0, str(REPO))
    from sskv_mapping.integrations._common import close_shared_objects
    from tests._support.procs import private_store
    from tests.peer._store import run_with_django

    # their tests are a package named ``tests`` too: ours leaves the import system before theirs comes in
    for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
        del sys.modules[name]
    sys.path.remove(str(REPO))
    sys.path.insert(0, sdist_root)
    with private_store() as url:
        return run_with_django(*their_suite(url), close=close_shared_objects)


def their_suite(url: str) -> tuple[unittest.TestSuite, str]:
    """Their Redis backend's test classes on ours (Django set up for them); the suite, and the versions line."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django
    from django.conf import settings as django_settings

    django_settings.CONSTANCE_SSKV_LOCATION = url
    django_settings.CONSTANCE_SSKV_NAMESPACE = "constance-peer"
    django_settings.CONSTANCE_BACKEND = BACKEND  # their migration 0003 reads Redis when the backend is Redis's
    django.setup()
    from constance import settings
    from constance.base import Config

    from tests.backends.test_redis import TestRedis, TestRedisAsync

    def empty(config: Any) -> None:
        config._backend.state_store_dict.clear()

    class OnOurBackend:
        """Their ``setUp``/``tearDown``, with our namespace emptied where they empty the Redis mock-up."""

        _BACKEND = BACKEND

        def setUp(self) -> None:
            self.old_backend = settings.BACKEND
            settings.BACKEND = self._BACKEND
            self.config = Config()
            empty(self.config)

        def tearDown(self) -> None:
            empty(self.config)
            settings.BACKEND = self.old_backend

    class TestStateStore(OnOurBackend, TestRedis):
        pass

    class TestStateStoreAsync(OnOurBackend, TestRedisAsync):
        pass

    loader = unittest.TestLoader()
    suite = unittest.TestSuite([loader.loadTestsFromTestCase(c) for c in (TestStateStore, TestStateStoreAsync)])
    from importlib.metadata import version

    return suite, f"django {django.get_version()}, django-constance {version('django-constance')}"


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
