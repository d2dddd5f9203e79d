"""What the pytest plugin costs a project that has sskv-mapping installed but does not use its fixtures.

Run:  python benchmarks/bench_plugin_collect.py [--rounds 15] [--files 20] [--tests 10]

Makes a throwaway project (``--files`` modules of ``--tests`` trivial tests each, none using a fixture of ours) in
a temporary folder and times ``python -m pytest --collect-only -q`` there, each run a fresh interpreter, in two
settings, each measured with and without the plugin in the same interleaved rounds:

* **environment**: every installed pytest plugin autoloads (as in this venv: asyncio, xdist, timeout, hypothesis,
  ...); "without" is ``-p no:sskv_mapping``, the same environment with our entry point not loaded;
* **bare pytest**: ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``; "with" loads only ours (``-p pytest_sskv_mapping``):
  the plugin's cost against the smallest baseline there is.

Reports the median wall time of each, the with/without ratio (1.00 = no cost), and checks that collecting with
the plugin did not import the library (``sskv_mapping`` absent from ``sys.modules``).

This is a script, not a test: the machines are shared and noisy; only same-run medians and ratios mean anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECK_IMPORTS = """
import sys, pytest
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"])
print("SSKV_IMPORTED", "sskv_mapping" in sys.modules, "PLUGIN_LOADED", "pytest_sskv_mapping" in sys.modules)
sys.exit(int(code))
"""


def make_project(root: Path, files: int, tests: int) -> None:
    for f in range(files):
        body = "\n\n".join(f"def test_{f}_{t}():\n    assert {t} + 1 > {t}" for t in range(tests))
        (root / f"test_module_{f}.py").write_text(body + "\n")


def collect(root: Path, args: list[str], env: dict[str, str]) -> float:
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args]
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--tests", type=int, default=10)
    opts = parser.parse_args()

    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHONPATH"))}
    bare_env = {**base_env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    cases = {
        ("environment", "with"): ([], base_env),
        ("environment", "without"): (["-p", "no:sskv_mapping"], base_env),
        ("bare pytest", "with"): (["-p", "pytest_sskv_mapping"], bare_env),
        ("bare pytest", "without"): ([], bare_env),
    }
    with tempfile.TemporaryDirectory(prefix="sskv-collect-bench-") as tmp:
        root = Path(tmp)
        make_project(root, opts.files, opts.tests)
        check = subprocess.run(
            [sys.executable, "-c", CHECK_IMPORTS], cwd=root, env=base_env, capture_output=True, text=True
        )
        verdict = check.stdout.strip().splitlines()[-1] if check.stdout.strip() else check.stderr
        for args, env in cases.values():  # warm-up: the OS file cache, .pyc files
            collect(root, args, env)
        times: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
        for _ in range(opts.rounds):
            for case, (args, env) in cases.items():  # interleaved: drift hits every case alike
                times[case].append(collect(root, args, env))

    print(f"pytest --collect-only of {opts.files * opts.tests} trivial tests, {opts.rounds} rounds, fresh process each")
    print(f"python {sys.version.split()[0]}; with the plugin loaded: {verdict}")
    print(f"{'setting':<14} {'with plugin':>12} {'without':>12} {'ratio':>7}")
    for setting in ("environment", "bare pytest"):
        with_ms = statistics.median(times[(setting, "with")]) * 1000
        without_ms = statistics.median(times[(setting, "without")]) * 1000
        print(f"{setting:<14} {with_ms:>10.1f}ms {without_ms:>10.1f}ms {with_ms / without_ms:>7.3f}")


if __name__ == "__main__":
    main()
