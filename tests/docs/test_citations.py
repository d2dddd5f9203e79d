"""Every reference the repository makes to itself resolves: a file named in a docstring, comment or page exists,
a private module named as ``_name.attr`` exists, and every citation of the spec names ``docs/design/protocol.md``
and a section it has. Moves and renames leave stale references behind that nothing else notices; this does.

What counts as a reference to a repository file: a word ending in ``.py``, ``.md``, ``.sh``, ``.toml`` or ``.yml``
(URLs aside). With a ``/`` it must exist relative to the citing file, to the root, or as the tail of a repository
path (``_transport/paho.py``, ``tests/transport/test_paho.py``); a bare file name must be some file's name.
Names of files in other projects (a framework's test suite, the Azure SDKs) are listed in ``ELSEWHERE``, each with
where it lives.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "design" / "protocol.md"
SCANNED_DIRS = ("sskv_mapping", "tests", "benchmarks", "integrations", "docs", "scripts")
SCANNED_FILES = ("README.md", "CHANGELOG.md", "noxfile.py", "pyproject.toml", "mkdocs.yml")
SUFFIXES = {".py", ".md", ".sh", ".toml", ".yml", ".html"}
SKIPPED_DIRS = {".venv", ".git", ".nox", "site", "__pycache__", "node_modules", "build", "dist"}

#: File names that are not this repository's, and where they live.
ELSEWHERE = {
    "run-job.sh": "the reader's own command, in the `sskv lock` examples",
    "worker.sh": "the reader's own command, in the `sskv leader` examples",
    "tests/cache/tests.py": "Django's cache test suite, read from Django's sdist by `nox -s peer-django`",
    "tests/test_backend_cache.py": "Flask-Caching's backend tests, read from its sdist by `nox -s peer-flask`",
    "aiocache/base.py": "aiocache's own source (its main branch)",
    "dogpile/testing/fixtures.py": "dogpile.cache's backend test kit, in its installed wheel",
    "tests/test_backend.py": "django-redis's backend tests (its repository), which test_django_redis.py models",
    "test_backend.py": "django-redis's backend tests (its repository), which test_django_redis.py models",
    "tests/e2e/test_response_caching.py": "Litestar's own tests (its repository), run by nox -s peer-litestar",
    "tests/unit/test_middleware/test_rate_limit_middleware.py": "Litestar's own tests, run by nox -s peer-litestar",
    "tests/unit/test_middleware/test_session/test_server_side_backend.py": "Litestar's own tests (peer-litestar)",
    "settings/sqlite.py": "django-redis's settings module, rewritten in its extracted sdist by run_django_redis_suite",
    "sqlite.py": "django-redis's settings module, rewritten in its extracted sdist by run_django_redis_suite",
    "sskv_only_sqlite.py": "the plugin run_django_redis_suite.py writes into django-redis's extracted tests",
    "tests/_core/_async/test_redis_storage.py": "hishel's Redis storage tests (its sdist), which test_hishel.py models",
    "tests/test_settings.py": "pydantic-settings' own tests (custom sources), the model of ours",
    "tests/storage.py": "django-constance's backend contract, read from its sdist by `nox -s peer-constance`",
    "tests/backends/test_redis.py": "django-constance's Redis backend tests, from its sdist (`nox -s peer-constance`)",
    "doc/reference/connection-settings.md": "Azure/iot-operations-sdks: the AIO_* settings table",
    "doc/dev/adr/0034-state-store-scan.md": "Azure/iot-operations-sdks: the SCAN design record",
    "m.py": "a module the layer and burst scans write into tmp_path",
    "test_readme_taste.py": "where tests/docs/test_readme_examples.py writes the README's pytest block, in tmp_path",
    "test_sskv_statestore_cache.py": "the name run_pytest_suite.py gives its copy inside a framework's suite",
    "test_page_example.py": "where tests/docs/test_testing_page_examples.py writes docs/testing.md's example",
    "test_user.py": "where tests/testing/test_anyio_backend.py writes a user's anyio test, in tmp_path",
    "sskv_mapping/test_shipped_by_mistake.py": "what tests/test_release_contents.py slips into a doctored wheel",
}

#: Sentences that were true once and are not any more, and why (each was found in the package once).
RETIRED_CLAIMS = {
    "via aiomqtt": "the default connection is our own StreamConnection (_transport/stream.py), not aiomqtt",
    "aiomqtt has none": "the client's reconnection is its own whatever the transport; aiomqtt is the oracle only",
    "aiomqtt has no reconnection": "the same: the default transport is not aiomqtt",
}

FILE_WORD = re.compile(r"(?<![\w/.\-])((?:\.{1,2}/)*(?:[\w.\-]+/)*[\w\-][\w.\-]*\.(?:py|md|sh|toml|yml))(?![\w/(])")
URL = re.compile(r"[a-z]+://\S+")
PRIVATE_MODULE = re.compile(r"(?<![\w.])(_[a-z]\w*)\.(?=[a-z_])")
#: a mention of the spec and what follows it on the line: "protocol.md §3/§6", "protocol.md §1 to §3", "§2-§6"
SPEC_CITATION = re.compile(r"(?<![\w-])((?:[\w./-]*/)?protocol(?:\.md)?)((?:\s*(?:,|/|-|to|and)?\s*§\d+)*)")
SECTION = re.compile(r"§(\d+)")


def _walk(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            if path.name not in SKIPPED_DIRS and not path.name.startswith(".") and not path.name.endswith(".egg-info"):
                yield from _walk(path)
        else:
            yield path


@cache
def _repository() -> tuple[frozenset[str], frozenset[str]]:
    """Every file's path relative to the root, and every file's name."""
    paths = {p.relative_to(ROOT).as_posix() for p in _walk(ROOT)}
    return frozenset(paths), frozenset(p.rsplit("/", 1)[-1] for p in paths)


def _scanned() -> list[Path]:
    """The files whose references are checked (not this one: its examples name stale files on purpose)."""
    found = [p for d in SCANNED_DIRS for p in _walk(ROOT / d) if p.suffix in SUFFIXES and p != Path(__file__)]
    return found + [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]


def _reader_dir(path: Path) -> Path:
    """Where a file's relative names start: mkdocs.yml names its pages relative to docs/."""
    return ROOT / "docs" if path.name == "mkdocs.yml" else path.parent


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        yield number, URL.sub("", line)


def _resolves(word: str, citing: Path) -> bool:
    paths, names = _repository()
    if word.removeprefix("./") in ELSEWHERE:
        return True
    if "/" not in word.strip("./"):
        return word.rsplit("/", 1)[-1] in names
    beside = (_reader_dir(citing) / word).resolve()
    if beside.is_relative_to(ROOT) and beside.relative_to(ROOT).as_posix() in paths:
        return True
    tail = word.removeprefix("./")
    return tail in paths or any(path.endswith("/" + tail) for path in paths)


def _where(path: Path, number: int) -> str:
    return f"{path.relative_to(ROOT).as_posix()}:{number}"


def _spec_sections() -> list[int]:
    return [int(n) for n in re.findall(r"^## §\d+ .*\{#s(\d+)\}\s*$", SPEC.read_text(encoding="utf-8"), re.M)]


def test_the_spec_has_its_numbered_sections_and_is_in_the_nav() -> None:
    sections = _spec_sections()
    assert sections == list(range(1, len(sections) + 1)) and len(sections) >= 9, sections
    headings = re.findall(r"^## §(\d+) .*\{#s(\d+)\}", SPEC.read_text(encoding="utf-8"), re.M)
    assert all(a == b for a, b in headings), f"a heading's number and its anchor differ: {headings}"
    assert "design/protocol.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_every_cited_repository_file_exists() -> None:
    stale = [
        f"{_where(path, number)}: {word}"
        for path in _scanned()
        for number, line in _lines(path)
        for word in FILE_WORD.findall(line)
        if not _resolves(word, path)
    ]
    assert stale == [], "these name files the repository does not have (moved? renamed?):\n" + "\n".join(stale)


def test_every_private_module_named_in_prose_exists() -> None:
    """``_sync.get_loop_thread()`` in a comment outlived ``_sync.py``: a ``_name.`` in a comment or a string must
    name a module or package of the repository."""
    paths, _ = _repository()
    modules = {p.rsplit("/", 1)[-1].removesuffix(".py") for p in paths if p.endswith(".py")}
    modules |= {part for p in paths for part in p.split("/")[:-1]}
    stale = []
    for path in _scanned():
        if path.suffix != ".py":
            continue
        source = path.read_text(encoding="utf-8")
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.COMMENT, tokenize.STRING):
                stale += [
                    f"{_where(path, token.start[0])}: {m.group(0)}"
                    for m in PRIVATE_MODULE.finditer(URL.sub("", token.string))
                    if m.group(1) not in modules
                ]
    assert stale == [], "these name modules that do not exist:\n" + "\n".join(stale)


def test_every_spec_citation_names_the_spec_and_a_section_it_has() -> None:
    sections = set(_spec_sections())
    wrong = []
    for path in _scanned():
        for number, line in _lines(path):
            for match in SPEC_CITATION.finditer(line):
                name, cited = match.groups()
                if path != SPEC and name.endswith(".md") and not _cites_the_spec(name, path):
                    wrong.append(f"{_where(path, number)}: {name!r} is not docs/design/protocol.md")
                if name == "protocol" and not cited:
                    continue  # the word, not a citation
                wrong += [
                    f"{_where(path, number)}: {name} §{n} (the spec has §1-§{max(sections)})"
                    for n in map(int, SECTION.findall(cited))
                    if n not in sections
                ]
    assert wrong == [], "\n".join(wrong)


def _cites_the_spec(name: str, citing: Path) -> bool:
    """Outside docs/, by its full path; inside, as a link relative to the page (or the full path too)."""
    if name == "docs/design/protocol.md":
        return True
    in_docs = citing.is_relative_to(ROOT / "docs") or citing.name == "mkdocs.yml"
    return in_docs and (_reader_dir(citing) / name).resolve() == SPEC


@pytest.mark.parametrize(("claim", "why"), sorted(RETIRED_CLAIMS.items()))
def test_no_retired_claim_is_repeated(claim: str, why: str) -> None:
    found = [
        _where(path, number)
        for path in _scanned()
        if path.is_relative_to(ROOT / "sskv_mapping") or path.is_relative_to(ROOT / "docs")
        for number, line in _lines(path)
        if claim in line
    ]
    assert found == [], f"{claim!r} is no longer true ({why}): {found}"


@pytest.mark.parametrize(
    ("line", "citing", "fine"),
    [
        ("see ``_sync.py``", "sskv_mapping/client/_client.py", False),
        ("see ``_blocking.py``", "sskv_mapping/client/_client.py", True),
        ("``tests/transport/test_mqtt_stock.py``", "sskv_mapping/_transport/paho.py", False),
        ("``tests/transport/test_paho.py``", "sskv_mapping/_transport/paho.py", True),
        ("(`sskv_mapping/_generation.py`)", "docs/design/namespaces.md", False),
        ("(`sskv_mapping/cache/_generation.py`)", "docs/design/namespaces.md", True),
        ("[a link](../benchmarks.md#x)", "docs/design/transport.md", True),
        ("[a link](../benchmark.md)", "docs/design/transport.md", False),
    ],
)
def test_the_path_check_tells_a_stale_name_from_a_good_one(line: str, citing: str, fine: bool) -> None:
    """The check above can fail: a moved file's old name is caught, its new one passes."""
    words = FILE_WORD.findall(line)
    assert words, line
    assert all(_resolves(word, ROOT / citing) for word in words) is fine


@pytest.mark.parametrize(
    ("line", "sections"),
    [
        ("(protocol.md §3/§6)", ["3", "6"]),
        ("docs/design/protocol.md §1 to §3", ["1", "3"]),
        ("protocol.md §2-§6", ["2", "6"]),
        ("protocol §12", ["12"]),
        ("the protocol layer", []),
    ],
)
def test_the_section_check_reads_every_form_of_citation(line: str, sections: list[str]) -> None:
    assert [n for m in SPEC_CITATION.finditer(line) for n in SECTION.findall(m.group(2))] == sections


def test_the_readme_links_are_relative_and_resolve() -> None:
    """The README is read on the forge and in a checkout: its links are relative paths that exist (a link to the
    docs site or to a file that moved would be a dead end), or links to other sites."""
    readme = ROOT / "README.md"
    targets = re.findall(r"\]\(([^)\s]+)\)", readme.read_text(encoding="utf-8"))
    assert targets, "the README links to its pages"
    local = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+://", t)]
    missing = [t for t in local if not (ROOT / t).exists()]
    assert missing == [], f"README links to files that do not exist: {missing}"
    assert all(t.startswith(("https://", "http://")) for t in targets if "://" in t)
