"""Check a release's sdist and wheel before they are uploaded (docs/contributing.md, "Releasing").

``python scripts/check_release.py [--build] [--project-test] [DIST]``: prints each problem and exits 1 if any.
"""

from __future__ import annotations

import argparse
import email.parser
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parents[1]
#: the import packages the wheel holds, and nothing else beside its .dist-info
PACKAGES = ("sskv_mapping", "pytest_sskv_mapping")
#: the pytest plugin's entry point (docs/testing.md): pytest finds it by this group
PLUGIN_ENTRY = ("pytest11", "sskv_mapping", "pytest_sskv_mapping")
#: what an sdist must carry besides the packages: the build config and what the README and metadata name
SDIST_FILES = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "sskv_mapping/py.typed")
#: never in either archive
JUNK = re.compile(r"(^|/)(__pycache__|\.venv|\.nox|\.git|\.mypy_cache|\.pytest_cache|\.ruff_cache)(/|$)|\.pyc$")


def project_version(root: Path = REPO) -> str:
    """The version ``pyproject.toml`` gives."""
    return str(tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"])


def _entry_points(text: str) -> set[tuple[str, str, str]]:
    found, group = set(), ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
        elif "=" in line and group:
            name, _, target = line.partition("=")
            found.add((group, name.strip(), target.strip()))
    return found


def wheel_problems(wheel: Path, version: str, tracked: list[str] | None = None) -> list[str]:
    """What is wrong with ``wheel``: its version, ``py.typed``, the plugin's entry point, and only the packages in
    it (no tests, no example apps); with ``tracked`` (the packages' files git tracks), none of them missing."""
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"sskv_mapping-{version}.dist-info"
        if f"{info}/METADATA" not in names:
            return [f"{wheel.name}: no {info}/METADATA (is the version {version}?)"]
        metadata = email.parser.HeaderParser().parsestr(archive.read(f"{info}/METADATA").decode("utf-8"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode() if f"{info}/entry_points.txt" in names else ""
    if metadata["Version"] != version:
        problems.append(f"{wheel.name}: METADATA says version {metadata['Version']}, pyproject.toml {version}")
    if "sskv_mapping/py.typed" not in names:
        problems.append(f"{wheel.name}: no sskv_mapping/py.typed (type checkers would ignore the annotations)")
    if PLUGIN_ENTRY not in _entry_points(entry_points):
        problems.append(f"{wheel.name}: no pytest11 entry point sskv_mapping = pytest_sskv_mapping")
    for name in names:
        top = PurePosixPath(name).parts[0]
        if top not in PACKAGES and top != info:
            problems.append(f"{wheel.name}: {name} is outside the packages {', '.join(PACKAGES)}")
        elif JUNK.search(name) or re.search(r"(^|/)(test_[^/]*|conftest)\.py$", name):
            problems.append(f"{wheel.name}: {name} does not belong in a wheel")
    if tracked is not None:
        problems += [f"{wheel.name}: {path} (tracked by git) is missing" for path in tracked if path not in names]
    return problems


def sdist_problems(sdist: Path, version: str) -> list[str]:
    """What is wrong with ``sdist``: its version, the files a build and a reader need, and no junk."""
    top = f"sskv_mapping-{version}"
    with tarfile.open(sdist) as archive:
        names = [member.name for member in archive.getmembers() if member.isfile()]
        pkg_info = archive.extractfile(f"{top}/PKG-INFO") if f"{top}/PKG-INFO" in names else None
        metadata = email.parser.HeaderParser().parsestr(pkg_info.read().decode("utf-8")) if pkg_info else None
    if metadata is None:
        return [f"{sdist.name}: no {top}/PKG-INFO (is the version {version}?)"]
    problems = []
    if metadata["Version"] != version:
        problems.append(f"{sdist.name}: PKG-INFO says version {metadata['Version']}, pyproject.toml {version}")
    problems += [f"{sdist.name}: {path} is missing" for path in SDIST_FILES if f"{top}/{path}" not in names]
    problems += [f"{sdist.name}: {name} does not belong in an sdist" for name in names if JUNK.search(name)]
    return problems


def changelog_problems(changelog: str, version: str) -> list[str]:
    """The changelog's first version section must be this version, dated (``## 0.1.0 - 2026-12-07``)."""
    first = re.search(r"^## (.+)$", changelog, re.M)
    if first is None or not re.fullmatch(rf"{re.escape(version)} - \d{{4}}-\d{{2}}-\d{{2}}", first.group(1)):
        found = first.group(1) if first else "none"
        return [f"CHANGELOG.md: the first section must be '## {version} - YYYY-MM-DD', not {found!r}"]
    return []


def _tracked(root: Path) -> list[str] | None:
    """The packages' files git tracks (``None`` outside a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", *PACKAGES], cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.split()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", nargs="?", type=Path, default=REPO / "dist", help="where the sdist and wheel are")
    parser.add_argument("--build", action="store_true", help="build both into DIST first (python -m build)")
    parser.add_argument(
        "--project-test", action="store_true", help="then run the plugin's throwaway-project test on the wheel"
    )
    args = parser.parse_args(argv)
    version = project_version()
    if args.build:
        subprocess.run([sys.executable, "-m", "build", "--outdir", str(args.dist), str(REPO)], check=True)
    wheels = sorted(args.dist.glob(f"sskv_mapping-{version}-*.whl"))
    sdists = sorted(args.dist.glob(f"sskv_mapping-{version}.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"{args.dist}: want one wheel and one sdist of {version}, found {len(wheels)} and {len(sdists)}")
        return 1
    problems = wheel_problems(wheels[0], version, _tracked(REPO)) + sdist_problems(sdists[0], version)
    problems += changelog_problems((REPO / "CHANGELOG.md").read_text(encoding="utf-8"), version)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"{wheels[0].name} and {sdists[0].name}: contents as a release needs them")
    if args.project_test:
        test = REPO / "tests" / "testing" / "test_plugin_in_a_project.py"
        env = {**os.environ, "SSKV_RELEASE_WHEEL": str(wheels[0].resolve())}
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(test)]
        return subprocess.run(argv, cwd=REPO, env=env).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
