"""Run django-redis's own ``tests/test_backend.py`` (from its sdist) against our Django backend: ``nox -s
peer-django-redis``.

    python tests/peer/run_django_redis_suite.py EXTRACTED_TESTS_DIR [PYTEST_ARG ...]

Starts a private mosquitto and the emulator (loopback), writes the settings module their ``cache`` fixture loads
(``settings/sqlite.py``, in the extracted copy) with our backend in each alias, keeps their ``sqlite`` settings only
(the others name Redis clients: sentinel, sharding, herd...), deselects what the store does not offer (below, with
the reason) and exits with pytest's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root: tests._support

SETTINGS = """import os
SECRET_KEY = "django_tests_secret_key"
URL = os.environ["SSKV_PEER_URL"]
B = "sskv_mapping.integrations.django.StateStoreCache"
CACHES = {
    "default": {"BACKEND": B, "LOCATION": URL, "OPTIONS": {"namespace": "drdefault"}},
    "doesnotexist": {
        "BACKEND": B, "LOCATION": "mqtt://127.0.0.1:9", "OPTIONS": {"namespace": "drx", "connect_timeout": 2}
    },
    "sample": {"BACKEND": B, "LOCATION": URL, "OPTIONS": {"namespace": "drsample"}},
    "with_prefix": {"BACKEND": B, "LOCATION": URL, "OPTIONS": {"namespace": "drprefix"}, "KEY_PREFIX": "test-prefix"},
}
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions"]
USE_TZ = False
"""

#: reason -> their tests (``TestDjangoRedisCache::NAME[sqlite]``) that cannot pass here
DESELECTED = {
    "Redis hashes and sets (HSET, SADD...): the state store has neither": [
        *("test_hset", "test_hdel", "test_hlen", "test_hkeys", "test_hexists", "test_hash_version_support"),
        *("test_hash_key_structure_in_redis", "test_sadd", "test_scard", "test_sdiff", "test_sdiffstore"),
        "test_sdiffstore_with_keys_version",
        "test_sdiffstore_with_different_keys_versions_without_initial_set_in_version",
        "test_sdiffstore_with_different_keys_versions_with_initial_set_in_version",
        *("test_sinter", "test_interstore", "test_sismember", "test_smove", "test_spop_default_count", "test_spop"),
        *("test_srandmember_default_count", "test_srandmember", "test_srem", "test_sscan", "test_sscan_with_match"),
        *("test_sscan_iter", "test_sscan_iter_with_match", "test_smismember", "test_sunion", "test_sunionstore"),
    ],
    "their client's internals (cache.client._serializer, primary/replica switching, the SCAN count it passes)": [
        *("test_save_dict", "test_intenum", "test_primary_replica_switching"),
        *("test_primary_replica_switching_with_index", "test_delete_pattern_with_custom_count"),
        "test_delete_pattern_with_settings_default_scan_count",
        *("test_set_call_empty_pipeline", "test_close_client"),  # they patch its pipeline and close
    ],
    "django-redis's own arguments to Django's methods, not offered: set(nx=, xx=), incr(ignore_key_check=)": [
        *("test_setnx", "test_setnx_timeout", "test_timeout_parameter_as_positional_argument"),
        *("test_timeout_negative", "test_incr_ignore_check"),
    ],
    "delete_many's count (Django's BaseCache returns None; django-redis returns how many)": [
        "test_delete_many",
        "test_delete_many_generator",
    ],
    "the lock is not the key itself here: has_key(name) is false while it is held": [
        *("test_lock", "test_lock_not_blocking", "test_lock_released_by_thread"),
    ],
    "needs pytest-mock's mocker fixture and patches their client's close": ["test_close_with_signal_parameter"],
}

ONLY_OUR_SETTINGS = """
def pytest_collection_modifyitems(config, items):
    def ours(item):
        return getattr(getattr(item, "callspec", None), "params", {}).get("cache_settings", "sqlite") == "sqlite"

    config.hook.pytest_deselected(items=[i for i in items if not ours(i)])
    items[:] = [i for i in items if ours(i)]
"""


def main(tests_dir: str, *extra: str) -> int:
    from tests._support.procs import private_store

    tests = Path(tests_dir)
    (tests / "settings" / "sqlite.py").write_text(SETTINGS)
    (tests / "sskv_only_sqlite.py").write_text(ONLY_OUR_SETTINGS)
    with private_store() as url:
        env = {
            **os.environ,
            "SSKV_PEER_URL": url,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(tests), os.environ.get("PYTHONPATH")])),
        }
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "sskv_only_sqlite"]
        argv += ["-o", "addopts=", "-rfs", "--rootdir", str(tests.parent)]
        for names in DESELECTED.values():
            argv += [
                a for n in names for a in ("--deselect", f"tests/test_backend.py::TestDjangoRedisCache::{n}[sqlite]")
            ]
        return subprocess.run(
            [*argv, *extra, "tests/test_backend.py"], cwd=tests.parent, env=env, check=False
        ).returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
