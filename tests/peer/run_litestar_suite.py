"""Run Litestar's own tests of response caching, server-side sessions and the rate-limit middleware with our
store in place of its memory store (``litestar_store_plugin.py``): ``nox -s peer-litestar``.

    python tests/peer/run_litestar_suite.py LITESTAR_SOURCE_ROOT [--local-cache] [PYTEST_ARG ...]

``LITESTAR_SOURCE_ROOT`` holds Litestar's ``tests/`` at the installed release (its sdist ships none).
``--local-cache``: every store with a local cache. Starts a private mosquitto and the emulator (loopback), runs
pytest there on the three files with the deselections below, and exits with pytest's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root: tests._support

FILES = [
    "tests/e2e/test_response_caching.py",
    "tests/unit/test_middleware/test_rate_limit_middleware.py",
    "tests/unit/test_middleware/test_session/test_server_side_backend.py",
]
#: test -> why it cannot pass with another store than Litestar's memory store; the rest run, their time-machine
#: tests included (the store reads an entry's expiry against its wall clock, time.time, which they move)
DESELECTED = {
    "tests/e2e/test_response_caching.py::test_default_expiration_none": "reads MemoryStore._store (its internals)",
    "tests/e2e/test_response_caching.py::test_cache_forever": "reads MemoryStore._store (its internals)",
}
#: the tests whose ``store`` fixture is a Redis or Valkey server (Litestar's conftest: docker), not ours
NOT_OURS = "not redis_store and not valkey_store"


#: the local cache's size with ``--local-cache``: larger than any test's working set, so hot entries stay local
LOCAL_CACHE_SIZE = 1000


def main(root: str, *extra: str) -> int:
    # the real path: pytest names tests relative to it, and through a symlink the deselections below would not match
    root = os.path.realpath(root)
    local_cache = "--local-cache" in extra
    extra = tuple(a for a in extra if a != "--local-cache")
    from tests._support.procs import private_store

    ini = Path(root) / "sskv-pytest.ini"  # their pyproject's settings need plugins and markers we do not install
    ini.write_text("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    with private_store() as url:
        env = {
            **os.environ,
            "SSKV_PEER_URL": url,
            "SSKV_PEER_LOCAL_CACHE": str(LOCAL_CACHE_SIZE if local_cache else 0),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
        }
        argv = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", root, "-q", "-p", "no:cacheprovider"]
        # their conftest loads docker fixtures (Postgres, Redis...) that none of these tests uses
        argv += ["-p", "no:tests.docker_service_fixtures", "-p", "litestar_store_plugin", "-rfEs", "-k", NOT_OURS]
        argv += [arg for test in DESELECTED for arg in ("--deselect", test)]
        mode = f"a local cache of {LOCAL_CACHE_SIZE} entries" if local_cache else "no local cache"
        print(f"Litestar's tests with our store, {mode}; deselected:", flush=True)
        for test, why in {**DESELECTED, f"-k {NOT_OURS!r}": "their store is a Redis or Valkey server"}.items():
            print(f"  {test}: {why}", flush=True)
        return subprocess.run([*argv, *extra, *FILES], cwd=root, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
