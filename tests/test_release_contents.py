"""The release check (``scripts/check_release.py``) on an sdist and a wheel built from this checkout, and on
doctored copies of them that it must refuse.

The build runs offline, without isolation, with the ``build`` and ``hatchling`` of the dev extra; without them the
tests skip, saying so (an isolated build would need the package index).
"""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_release", REPO / "scripts" / "check_release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _load_script()
VERSION = check.project_version()


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(wheel, sdist)`` built from this checkout."""
    for needed in ("build", "hatchling"):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed (the dev extra has it): no offline build of the release")
    out = tmp_path_factory.mktemp("dist")
    argv = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist


def test_the_built_wheel_and_sdist_have_what_a_release_needs(dist: tuple[Path, Path]) -> None:
    wheel, sdist = dist
    tracked = check._tracked(REPO)
    assert tracked is not None and "sskv_mapping/py.typed" in tracked
    assert check.wheel_problems(wheel, VERSION, tracked) == []
    assert check.sdist_problems(sdist, VERSION) == []


def _doctored_wheel(wheel: Path, to: Path) -> Path:
    """``wheel`` without ``py.typed`` and the pytest11 group, with a test module and an example app's script."""
    copy = to / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(copy, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "sskv_mapping/py.typed":
                continue
            if name.endswith("entry_points.txt"):
                data = data.replace(b"[pytest11]", b"[not_pytest11]")
            dst.writestr(name, data)
        dst.writestr("sskv_mapping/test_shipped_by_mistake.py", b"")
        dst.writestr("integrations/django_app/manage.py", b"")
    return copy


def test_a_wheel_without_py_typed_or_the_plugin_or_with_tests_is_refused(
    dist: tuple[Path, Path], tmp_path: Path
) -> None:
    doctored = _doctored_wheel(dist[0], tmp_path)
    problems = check.wheel_problems(doctored, VERSION, ["sskv_mapping/py.typed", "sskv_mapping/__init__.py"])
    assert len(problems) == 5, problems
    for expected in (
        "no sskv_mapping/py.typed",
        "no pytest11 entry point",
        "sskv_mapping/test_shipped_by_mistake.py does not belong",
        "integrations/django_app/manage.py is outside the packages",
        "sskv_mapping/py.typed (tracked by git) is missing",
    ):
        assert any(expected in problem for problem in problems), (expected, problems)
    assert check.wheel_problems(dist[0], "9.9.9") == [
        f"{dist[0].name}: no sskv_mapping-9.9.9.dist-info/METADATA (is the version 9.9.9?)"
    ]


def test_an_sdist_without_its_license_or_with_bytecode_is_refused(dist: tuple[Path, Path], tmp_path: Path) -> None:
    sdist = dist[1]
    doctored = tmp_path / sdist.name
    top = f"sskv_mapping-{VERSION}"
    with tarfile.open(sdist) as src, tarfile.open(doctored, "w:gz") as dst:
        for member in src.getmembers():
            if member.name != f"{top}/LICENSE":
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        junk = tarfile.TarInfo(f"{top}/sskv_mapping/__pycache__/lock.cpython-311.pyc")
        dst.addfile(junk, io.BytesIO(b""))
    problems = check.sdist_problems(doctored, VERSION)
    assert problems == [
        f"{sdist.name}: LICENSE is missing",
        f"{sdist.name}: {top}/sskv_mapping/__pycache__/lock.cpython-311.pyc does not belong in an sdist",
    ]


@pytest.mark.parametrize(
    ("first_section", "refused"),
    [
        ("0.1.0 - 2026-12-07", False),
        ("Unreleased", True),
        ("0.1.0 - not yet published", True),
        ("0.0.9 - 2026-01-01", True),
    ],
)
def test_the_changelog_must_open_with_the_version_dated(first_section: str, refused: bool) -> None:
    changelog = f"# Changelog\n\nIntro.\n\n## {first_section}\n\n### Added\n\n- x\n\n## 0.0.1 - 2025-01-01\n"
    problems = check.changelog_problems(changelog, "0.1.0")
    assert bool(problems) is refused, problems
