"""The pytest plugin as a user meets it: a throwaway project outside the repository, with its own tests
(``tests/testing/project/``, copied: no conftest, no access to our ``tests/``), in a fresh virtualenv where our wheel,
built from this checkout, is installed with pip. Its suite uses every fixture, and runs with and without
pytest-xdist (``-n 2``): the real store is started once per worker, and each test has a namespace of its own.

One wheel and one virtualenv per run (module-scoped), installed from pip's configured index and cache with the
versions this environment already has (no resolution, no download when cached). Marked ``venv`` (and ``broker``).
``SSKV_RELEASE_WHEEL=path`` tests that wheel instead of one built here (``scripts/check_release.py --project-test``).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.venv, pytest.mark.broker]

REPO = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().with_name("project")
#: what the throwaway project installs besides our wheel, pinned to what this environment has
PINNED = ("pytest", "pytest-xdist", "pytest-asyncio", "django")


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """``(project folder, its virtualenv's python)``: our wheel and the test tools installed, nothing of the
    checkout importable."""
    root = tmp_path_factory.mktemp("user-project")
    given = os.environ.get("SSKV_RELEASE_WHEEL")
    if given:
        wheel = Path(given)
    else:
        dist = root / "dist"
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)], cwd=root)
        (wheel,) = dist.glob("sskv_mapping-*.whl")
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in PINNED]
    _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[django]", *pins], cwd=root)
    tests = root / "app"
    shutil.copytree(PROJECT, tests, ignore=shutil.ignore_patterns("__pycache__"))
    yield tests, python


def _pytest(project: tuple[Path, Path], *args: str) -> tuple[str, Path]:
    folder, python = project
    record = folder.parent / f"record{'-'.join(args) or '-serial'}"
    record.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST", "VIRTUAL_ENV"))}
    env["SSKV_PROJECT_RECORD"] = str(record)
    # -p no:cacheprovider: nothing written into the project; rootdir is the project (no ini file of ours above it)
    out = _run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(folder), "-q", *args],
        cwd=folder,
        env=env,
    )
    return out, record


def _passed(output: str) -> int:
    found = re.search(r"(\d+) passed", output)
    assert found, output
    assert not re.search(r"\d+ (failed|error|skipped)", output), output
    return int(found.group(1))


def _urls_per_worker(record: Path) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for path in record.glob("url-*"):
        worker = path.name.split("-")[1]
        seen.setdefault(worker, set()).update(path.read_text().split())
    return seen


def test_every_fixture_works_in_a_project_of_its_own(project: tuple[Path, Path]) -> None:
    output, record = _pytest(project)
    assert _passed(output) == 11
    per_worker = _urls_per_worker(record)
    assert list(per_worker) == ["main"]
    assert len(per_worker["main"]) == 1  # one server for the whole session


def test_under_xdist_each_worker_has_one_server_of_its_own(project: tuple[Path, Path]) -> None:
    output, record = _pytest(project, "-n", "2")
    assert _passed(output) == 11
    per_worker = _urls_per_worker(record)
    assert set(per_worker) <= {"gw0", "gw1"} and per_worker
    assert all(len(urls) == 1 for urls in per_worker.values()), per_worker  # once per worker session
    if len(per_worker) == 2:
        assert per_worker["gw0"] != per_worker["gw1"]  # each worker its own broker and emulator


def test_the_project_can_turn_the_plugin_off(project: tuple[Path, Path]) -> None:
    folder, python = project
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:sskv_mapping", "-p", "no:cacheprovider", "--fixtures", "-q"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "statestore_url" not in proc.stdout
    listed = _run([str(python), "-m", "pytest", "-p", "no:cacheprovider", "--fixtures", "-q"], cwd=folder)
    for name in (
        "statestore",
        "statestore_url",
        "statestore_server",
        "statestore_live",
        "statestore_namespace",
        "statestore_faults",
    ):
        assert re.search(rf"^{name}\b", listed, re.M), name
