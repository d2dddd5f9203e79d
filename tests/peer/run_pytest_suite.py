"""Run a framework's own pytest suite (from its sdist) against our backend: ``nox -s peer-cachelib``,
``peer-flask``.

    python tests/peer/run_pytest_suite.py EXTRACTED_TESTS_DIR OUR_MODULE [PYTEST_ARG ...]

Starts a private mosquitto and the emulator (loopback), copies ``OUR_MODULE`` (ours: it subclasses their test
classes with our backend) into the extracted tests folder, runs pytest there on it, and exits with pytest's
status. The last line is pytest's ``N passed ...``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository root: tests._support


def main(tests_dir: str, module: str, *extra: str) -> int:
    from tests._support.procs import private_store

    target = Path(tests_dir) / "test_sskv_statestore_cache.py"
    shutil.copy(HERE / module, target)
    with private_store() as url:
        env = {**os.environ, "SSKV_PEER_URL": url}
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *extra, target.name]
        return subprocess.run(argv, cwd=tests_dir, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
