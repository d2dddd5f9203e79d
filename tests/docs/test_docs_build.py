"""The documentation site builds strictly, so the docs cannot rot: a broken link or reference, a snippet whose
example-app file moved, or a public name without a docstring fails ``mkdocs build --strict`` (mkdocs.yml; the
docstring check is docs/_griffe/sskv_docs.py). And every public name has a place in the API reference."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sskv_mapping

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)

if not os.environ.get("CI"):  # in CI (the test command, .[dev]) the docs tools must be there: no skip
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is not installed")


def _directives() -> set[str]:
    return {m.group(1) for page in REFERENCE.glob("*.md") for m in DIRECTIVE.finditer(page.read_text())}


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "dict" / "index.html").is_file()
    page = (tmp_path / "site" / "integrations" / "django" / "index.html").read_text()
    assert "sskv_mapping.integrations.django.StateStoreCache" in page  # the snippet was included


def test_every_public_name_has_a_reference_directive() -> None:
    documented = _directives()
    missing = [name for name in sskv_mapping.__all__ if f"sskv_mapping.{name}" not in documented]
    assert missing == [], f"add a '::: sskv_mapping.NAME' line to a docs/reference/*.md page for: {missing}"


def test_reference_directives_name_only_public_paths() -> None:
    private = sorted(d for d in _directives() if any(part.startswith("_") for part in d.split(".")[1:-1]))
    assert private == [], f"the reference must use public import paths (modules are moving): {private}"


def _help(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    from sskv_mapping.cli import main

    with pytest.raises(SystemExit):
        main(args)
    return capsys.readouterr().out.rstrip("\n")


@pytest.mark.parametrize(("page", "args"), [("cli.md", ["--help"]), ("emulator.md", ["emulator", "--help"])])
def test_the_pages_show_the_commands_own_help(
    page: str, args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # the width the pages were written at
    text = (ROOT / "docs" / page).read_text()
    marker = f"<!-- sskv {' '.join(args)}: checked against the command"
    block = text.split(marker, 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    assert block == _help(args, capsys), f"docs/{page}: paste the new `sskv {' '.join(args)}` output (COLUMNS=100)"
