"""Run cachelib's own backend tests (from its sdist) against our Flask-Caching backend: ``nox -s peer-cachelib``.

    python tests/peer/run_cachelib_suite.py CACHELIB_TESTS_DIR

Starts a private mosquitto and the emulator (loopback), copies ``cachelib_backend_tests.py`` (ours) into the
extracted tests folder, runs pytest there, and exits with pytest's status.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main(tests_dir: str) -> int:
    from _support.procs import start_emulator

    from sskv_mapping.emulator.broker import MosquittoBroker

    target = Path(tests_dir) / "test_sskv_statestore_cache.py"
    shutil.copy(HERE / "cachelib_backend_tests.py", target)
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            env = {**os.environ, "SSKV_PEER_URL": f"mqtt://{broker.host}:{broker.port}"}
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", target.name]
            return subprocess.run(argv, cwd=tests_dir, env=env, check=False).returncode
        finally:
            emulator.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
