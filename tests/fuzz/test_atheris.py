"""Each atheris target (``atheris_targets.py``) runs as a subprocess for a bounded number of inputs.

Exit status 0 means no input made a parser raise anything but ``ProtocolError`` (``ServiceError`` for the
service-side command parser) and no oracle found a wrong value or a broken round trip. On a crash the
failing input is left in the test's temporary directory (``crash-*``) and its traceback is in the message.

Knobs: ``SSKV_ATHERIS_RUNS`` (default 50000 inputs per target) and ``SSKV_ATHERIS_SECONDS`` (default 15, the
``-max_total_time`` cap). For a long session see the docstring of ``atheris_targets.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris: Linux, CPython < 3.13)")

from .atheris_targets import TARGETS, write_seeds

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("SSKV_ATHERIS_RUNS", "50000"))
SECONDS = int(os.environ.get("SSKV_ATHERIS_SECONDS", "15"))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_atheris_target_survives_its_runs(target: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    n_seeds = write_seeds(target, corpus)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    argv = [
        sys.executable,
        "-m",
        "tests.fuzz.atheris_targets",
        target,
        f"-runs={RUNS}",
        f"-max_total_time={SECONDS}",
        "-timeout=10",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        f"-artifact_prefix={tmp_path}/",
        str(corpus),
    ]
    started = time.monotonic()
    proc = subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, errors="replace", timeout=SECONDS + 120
    )
    elapsed = time.monotonic() - started
    log = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("INFO: Instrumenting"))
    crashes = sorted(p.name for p in tmp_path.glob("crash-*"))
    assert proc.returncode == 0, f"atheris {target}: exit {proc.returncode}, crash inputs {crashes}\n{log[-6000:]}"
    done = re.search(r"Done (\d+) runs in (\d+) second", log)
    assert done is not None, f"atheris {target} did not report its runs:\n{log[-3000:]}"
    runs = int(done[1])
    assert runs > n_seeds, f"atheris {target} ran only {runs} inputs"
    print(f"atheris {target}: {runs} runs in {elapsed:.1f} s with start-up, {runs / elapsed:.0f} exec/s")
