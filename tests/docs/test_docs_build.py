"""The documentation site builds strictly, so the docs cannot rot: a broken link or reference, a snippet whose
example-app file moved, or a public name without a docstring fails ``mkdocs build --strict`` (mkdocs.yml; the
docstring check is docs/_griffe/sskv_docs.py). And every public name has a place in the API reference."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

import sskv_mapping

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: the width code blocks are written to; docs/stylesheets/extra.css makes this many columns fit beside both sidebars
#: on a 1280-pixel window (measured in headless Chromium: 0 of the site's blocks scroll there, 40 without it)
CODE_COLUMNS = 100
HELP_MARKER = "checked against the command"

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
    reference = {p.parent.name: p.read_text() for p in (tmp_path / "site" / "reference").glob("*/index.html")}
    assert _required_but_defaulted(reference) == []
    changelog = (tmp_path / "site" / "changelog" / "index.html").read_text()
    assert "0.1.0 - 2026-12-07" in changelog  # CHANGELOG.md was included
    assert _literal_includes(tmp_path / "site") == []


#: a snippet-include marker, however a formatter spaced it (``--8 < --"file"`` is what a Python formatter makes of it)
_INCLUDE = re.compile(r"-\s*-\s*8\s*<\s*-\s*-")
_PRE = re.compile(r"<pre\b.*?</pre>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def _literal_includes(site: Path) -> list[str]:
    """Code blocks of the built pages that show an include marker as text: a snippet the build did not include
    (a marker it does not recognise is no error to ``--strict``)."""
    found = []
    for page in sorted(site.rglob("*.html")):
        for block in _PRE.findall(page.read_text(encoding="utf-8")):
            text = unescape(_TAG.sub("", block))
            found += [
                f"{page.relative_to(site)}: {line.strip()}" for line in text.splitlines() if _INCLUDE.search(line)
            ]
    return found


_CANONICAL_INCLUDE = re.compile(r'^--8<-- "[^"]+"$')


def test_every_include_marker_in_a_code_block_is_one_the_build_includes() -> None:
    """The source side of the check above, without a build: a marker in a code block is exactly
    ``--8<-- "path[:section]"`` on a line of its own (docs/observability.md's had been reformatted as Python)."""
    wrong = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for block in FENCE.findall(page.read_text(encoding="utf-8")):
            wrong += [
                f"{page.relative_to(ROOT)}: {line}"
                for line in block.splitlines()
                if _INCLUDE.search(line) and not line.lstrip().startswith("#") and not _CANONICAL_INCLUDE.match(line)
            ]
    assert wrong == []


def _required_but_defaulted(pages: dict[str, str]) -> list[str]:
    """Rows of the reference's parameter tables that say *required* for parameters that have a default: a row
    naming several parameters (``host, port``) or one passed on through ``**options`` (docs/_griffe/sskv_docs.py
    gives those their defaults)."""
    wrong = []
    for name, html in pages.items():
        for row in re.findall(r"<tr class=\"doc-section-item\">(.*?)</tr>", html, re.DOTALL):
            if "<em>required</em>" not in row:
                continue
            first = re.sub(r"<[^>]+>", "", row.split("</td>", 1)[0]).strip()
            if "," in first or first not in _without_default():
                wrong.append(f"{name}: {first}")
    return wrong


def _without_default() -> set[str]:
    """Names of the parameters of the public API's signatures that have no default."""
    import importlib
    import inspect

    objects = [getattr(sskv_mapping, name) for name in sskv_mapping.__all__]
    for adapter in ("django", "flask_caching", "litestar", "aiocache", "fastapi", "dogpile", "hishel"):
        module = importlib.import_module(f"sskv_mapping.integrations.{adapter}")
        objects += [getattr(module, name) for name in module.__all__]
    callables = []
    for obj in objects:
        if inspect.isclass(obj):
            callables += [member for key, member in vars(obj).items() if callable(member) and not key.startswith("_")]
            callables.append(obj.__init__)
        elif callable(obj):
            callables.append(obj)
    names = set()
    for function in callables:
        try:
            parameters = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):
            continue
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        names |= {p.name for p in parameters if p.default is p.empty and p.kind not in variadic}
    return names - {"self", "cls"}


def _code_blocks() -> list[tuple[str, str, str]]:
    """(file, the text before the block, the block) for each fenced block of the docs and the README."""
    files = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            found.append((path.relative_to(ROOT).as_posix(), text[max(0, m.start() - 300) : m.start()], m.group(1)))
    return found


def test_code_blocks_fit_the_page() -> None:
    """A code block wider than the page scrolls sideways; the commands' own --help output is exempt (it is checked
    against the command at its width below)."""
    wide = [
        f"{name}: {len(line)} columns: {line[:60]}"
        for name, before, block in _code_blocks()
        if HELP_MARKER not in before
        for line in block.splitlines()
        if len(line) > CODE_COLUMNS
    ]
    assert wide == [], f"wrap these to {CODE_COLUMNS} columns:\n" + "\n".join(wide)


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
