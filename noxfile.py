"""The test matrix.

Only CPython 3.11 exists on the project's machines, and nox treats a missing interpreter as an error when
``CI`` is set, so the matrix varies *dependencies*; the Python list comes from ``SSKV_NOX_PYTHONS``
(e.g. ``SSKV_NOX_PYTHONS="3.11 3.12 3.13" nox``) on machines that have more.

``nox`` with no arguments runs the default sessions below; ``nox -l`` lists them all. ``.ci/run`` runs the
README's test command (``scripts/test.sh``: the whole pytest suite in ``.venv`` with the latest supported
frameworks), which covers what ``tests``, ``broker``, ``integrations`` and ``faults`` cover with the newest
versions; the sessions add the older versions, the bare install, lint and types.
"""

from __future__ import annotations

import os
import re
import tomllib

import nox

PYTHONS = os.environ.get("SSKV_NOX_PYTHONS", "3.11").split()

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = [
    "lint",
    "types",
    "bare",
    "tests",
    "broker",
    "oldest",
    "django",
    "flask",
    "litestar",
    "aiocache",
    "fastapi",
    "faults",
    "stock-paho",
    "peer-django",
    "peer-cachelib",
    "peer-flask",
    "peer-aiocache",
    "docs",
]

TEST_DEPS = ["pytest>=8.2", "pytest-asyncio>=0.24", "pytest-timeout>=2.2", "hypothesis>=6.90"]
PYTEST = ["pytest", "-q", "-p", "no:cacheprovider"]


def _install(session: nox.Session, *extras: str, deps: tuple[str, ...] = ()) -> None:
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install(spec, *TEST_DEPS, *deps)


@nox.session(python=PYTHONS)
def lint(session: nox.Session) -> None:
    """ruff check + ruff format --check."""
    session.install("ruff>=0.4")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHONS)
def types(session: nox.Session) -> None:
    """mypy --strict on the package."""
    # cachetools ships its own annotations (py.typed) since 7.1: no stub package
    session.install(".[msgpack,django,flask,litestar,aiocache,fastapi,inspect]", "mypy>=1.8")
    session.run("mypy", "sskv_mapping")


@nox.session(python=PYTHONS)
def bare(session: nox.Session) -> None:
    """A bare install (no extras, no test tools): `import sskv_mapping` works, integrations fail loudly."""
    session.install(".")
    session.run("python", "-c", "import sskv_mapping, sys; assert 'msgpack' not in sys.modules; print('ok')")
    session.run("python", "tests/_support/bare_install_check.py")


@nox.session(python=PYTHONS)
def docs(session: nox.Session) -> None:
    """The documentation site, strictly: a broken reference or a public name without a docstring fails it."""
    session.install(".[docs]")
    site = session.posargs[0] if session.posargs else os.path.join(session.create_tmp(), "site")
    session.run("mkdocs", "build", "--strict", "--site-dir", site)
    session.log(f"site built in {site}")


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The in-process suite: no broker needed (the test tools of ``.[dev]``: frameworks, cryptography...)."""
    _install(session, "dev")
    session.run(*PYTEST, "-m", "not broker and not faults", "tests", *session.posargs)


@nox.session(python=PYTHONS)
def broker(session: nox.Session) -> None:
    """Everything that talks to a real mosquitto + the emulator process (fault suite excluded)."""
    _install(session, "dev")
    session.run(*PYTEST, "-m", "broker and not faults", "tests", *session.posargs)


FRAMEWORK_TESTS = {
    "django": ["tests/integrations/test_django.py", "integrations/django_app"],
    "flask": ["tests/integrations/test_flask.py", "integrations/flask_app"],
    "litestar": ["tests/integrations/test_litestar.py", "integrations/litestar_app"],
    "aiocache": ["tests/integrations/test_aiocache.py", "tests/integrations/test_aiocache_api.py"],
    "fastapi": ["tests/integrations/test_fastapi.py", "integrations/fastapi_app"],
}


# the test tools (TEST_DEPS) and what the integration tests drive the frameworks with (the dev extra's)
_TEST_FLOORS_FROM_DEV = ("pytest", "pytest-asyncio", "pytest-timeout", "hypothesis", "httpx")
_FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def declared_floors() -> dict[str, str]:
    """Every lower bound ``pyproject.toml`` declares: the dependencies, every framework extra, and the test
    tools of ``dev``; read from the file, so a floor changed there is the floor ``oldest`` installs."""
    with open("pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    extras = project["optional-dependencies"]
    requirements = list(project["dependencies"])
    for extra, reqs in extras.items():
        requirements += [
            r for r in reqs if extra != "dev" or ((m := _FLOOR.match(r)) and m[1] in _TEST_FLOORS_FROM_DEV)
        ]
    floors: dict[str, str] = {}
    for requirement in requirements:
        match = _FLOOR.match(requirement)
        if match is None:
            raise ValueError(f"pyproject.toml: {requirement!r} declares no floor (name>=version)")
        name = match[1].lower().replace("_", "-")
        if floors.setdefault(name, match[2]) != match[2]:
            raise ValueError(f"pyproject.toml declares two floors for {name}: {floors[name]} and {match[2]}")
    return floors


@nox.session(python=PYTHONS, reuse_venv=False)  # a reused venv keeps what an earlier floor pulled in
def oldest(session: nox.Session) -> None:
    """Every floor ``pyproject.toml`` declares, installed together at exactly that version (aiomqtt, paho-mqtt,
    cachetools, msgpack, each framework extra's, httpx and the test tools): the client, lock, dict, codecs,
    local cache and index suites, every integration test and example app, the inspector and the docs build."""
    floors = declared_floors()
    extras = "msgpack,django,flask,litestar,aiocache,fastapi,inspect,docs"
    session.install(f".[{extras}]", *(f"{n}=={v}" for n, v in floors.items()))
    session.run("python", "-m", "pip", "list", "--format=freeze")  # the versions this run tested, in its log
    # a framework that cannot be imported would only skip its tests: fail here instead
    session.run("python", "-c", "import aiocache, django, fastapi, flask_caching, httpx, litestar, msgpack")
    unit_dirs = ["tests/protocol", "tests/client", "tests/lock", "tests/mapping", "tests/codecs", "tests/local_cache"]
    apps = [p for paths in FRAMEWORK_TESTS.values() for p in paths if p.startswith("integrations/")]
    # the inspector's (aiohttp) and the docs build's (mkdocs) floors: their tests (the browser ones skip without
    # selenium, which only the dev extra brings)
    suites = [*unit_dirs, "tests/integrations", *apps, "tests/emulator/inspector", "tests/docs"]
    session.run(*PYTEST, "-rs", "-m", "not faults", *suites, *session.posargs)


def _framework(session: nox.Session, name: str, pin: str) -> None:
    _install(session, name, deps=(pin, "httpx>=0.24"))
    paths = [p for p in FRAMEWORK_TESTS[name] + ["tests/integrations/test_ttl_table.py"] if os.path.exists(p)]
    session.run(*PYTEST, *paths, *session.posargs)


@nox.session(python=PYTHONS)
@nox.parametrize("django", ["5.2", "latest"])
def django(session: nox.Session, django: str) -> None:
    """The Django cache backend and example project, on Django 5.2 LTS and the latest (5.2 on Python 3.11:
    Django 6 needs 3.12)."""
    _framework(session, "django", "django" if django == "latest" else f"django=={django}.*")


@nox.session(python=PYTHONS)
@nox.parametrize("flask_caching", ["2.0.2", "latest"])
def flask(session: nox.Session, flask_caching: str) -> None:
    """Flask-Caching backend and example app, oldest supported and latest."""
    _framework(session, "flask", "flask-caching" if flask_caching == "latest" else f"flask-caching=={flask_caching}")


@nox.session(python=PYTHONS)
@nox.parametrize("litestar", ["2.0.0", "latest"])
def litestar(session: nox.Session, litestar: str) -> None:
    """Litestar Store and example app, oldest supported and latest."""
    if litestar == "latest":
        _framework(session, "litestar", "litestar")
    else:  # litestar 2.0's TestClient predates httpx 0.28's API change
        session.install("httpx<0.28")
        _framework(session, "litestar", f"litestar=={litestar}")


@nox.session(python=PYTHONS)
@nox.parametrize("aiocache", ["0.12.0", "latest"])
def aiocache(session: nox.Session, aiocache: str) -> None:
    """aiocache backend, oldest supported and latest."""
    _framework(session, "aiocache", "aiocache" if aiocache == "latest" else f"aiocache=={aiocache}")


@nox.session(python=PYTHONS)
def fastapi(session: nox.Session) -> None:
    """FastAPI/Starlette lifespan helper and example app."""
    _framework(session, "fastapi", "fastapi")


@nox.session(python=PYTHONS)
def faults(session: nox.Session) -> None:
    """The fault suite: broker kills, emulator restarts, lost notifications, fencing, clock skew, fuzzing."""
    _install(session, "dev")
    session.run(*PYTEST, "-m", "faults", "tests/faults", "-s", *session.posargs)
    session.run(*PYTEST, "tests/fuzz", *session.posargs)  # hostile input: fuzzed parsers, a request flood


@nox.session(name="stock-paho", python=PYTHONS)
def stock_paho(session: nox.Session) -> None:
    """The client<->emulator suites on the stock aiomqtt/paho transport (``SSKV_MQTT_FASTPATH=0``, read by
    ``_transport/factory.py``): paho's packet handling on both ends (the emulator process inherits it)."""
    _install(session, "dev")
    session.env["SSKV_MQTT_FASTPATH"] = "0"
    suites = [
        "tests/client",
        "tests/lock",
        "tests/emulator",
        "tests/transport",
        "tests/cache",
        "tests/mapping",
    ]
    session.run(*PYTEST, "-rs", "-m", "not faults", *suites, *session.posargs)


# -- the frameworks' own test suites against our backends ------------------------------------------------------


def _sdist_tests(session: nox.Session, package: str, subdir: str) -> str:
    """Download the sdist of the installed ``package`` from PyPI and extract its ``subdir``; the folder that
    holds it. The maintainers' tests are loaded from there at test time, never copied into this repository."""
    version = session.run(
        "python", "-c", f"import importlib.metadata as m; print(m.version({package!r}))", silent=True
    ).strip()
    tmp = session.create_tmp()
    dest = os.path.join(tmp, f"{package}-{version}-sdist")
    if not os.path.isdir(dest):
        session.run(
            "python",
            "-m",
            "pip",
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            "-q",
            "-d",
            tmp,
            f"{package}=={version}",
        )
        wanted = package.lower().replace("-", "_")  # sdists are named Flask-Caching-2.0.2 or flask_caching-2.5.1
        archive = next(
            f for f in os.listdir(tmp) if f.lower().replace("-", "_").startswith(wanted) and f.endswith(".tar.gz")
        )
        os.makedirs(dest)
        session.run(
            "tar",
            "xzf",
            os.path.join(tmp, archive),
            "-C",
            dest,
            "--strip-components=1",
            f"{archive[: -len('.tar.gz')]}/{subdir}",
            external=True,
        )
    return os.path.abspath(os.path.join(dest, subdir))


@nox.session(name="peer-django", python=PYTHONS)
@nox.parametrize("django", ["5.2", "latest"])
def peer_django(session: nox.Session, django: str) -> None:
    """Django's own ``BaseCacheTests`` (from its sdist) against our backend in its default configuration;
    exclusions with their reasons in ``tests/peer/django_exclusions.json``."""
    _install(session, "django", deps=("django" if django == "latest" else f"django=={django}.*",))
    tests_dir = _sdist_tests(session, "django", "tests/cache")
    session.run("python", "tests/peer/run_django_suite.py", os.path.dirname(tests_dir), "sync")
    # the same contract through our native a* methods (Django ships no async tests for real backends)
    session.run("python", "tests/peer/run_django_suite.py", os.path.dirname(tests_dir), "async")


@nox.session(name="peer-cachelib", python=PYTHONS)
@nox.parametrize("cachelib", ["0.9.0", "latest"])
def peer_cachelib(session: nox.Session, cachelib: str) -> None:
    """cachelib's own backend mixins (from its sdist) against the Flask-Caching backend, default configuration
    (what Flask-Caching's backends are tested with); no exclusions."""
    pin = () if cachelib == "latest" else (f"cachelib=={cachelib}",)
    _install(session, "flask", deps=(*pin, "pytest-xprocess"))
    tests_dir = _sdist_tests(session, "cachelib", "tests")
    # their suites are synchronous; our asyncio plugin only warns, which their filterwarnings=error fails on
    session.run("python", "tests/peer/run_pytest_suite.py", tests_dir, "cachelib_backend_tests.py", "-p", "no:asyncio")


@nox.session(name="peer-flask", python=PYTHONS)
@nox.parametrize("flask_caching", ["2.0.2", "latest"])
def peer_flask(session: nox.Session, flask_caching: str) -> None:
    """Flask-Caching's own ``GenericCacheTests`` (from its sdist) against our backend, default configuration."""
    pin = () if flask_caching == "latest" else (f"flask-caching=={flask_caching}", "cachelib==0.9.0")
    _install(session, "flask", deps=(*pin, "pytest-xprocess"))
    tests_dir = _sdist_tests(session, "flask_caching", "tests")
    session.run(
        "python", "tests/peer/run_pytest_suite.py", tests_dir, "flask_caching_backend_tests.py", "-p", "no:asyncio"
    )


@nox.session(name="peer-aiocache", python=PYTHONS)
@nox.parametrize("aiocache", ["0.12.0", "latest"])
def peer_aiocache(session: nox.Session, aiocache: str) -> None:
    """aiocache's own acceptance tests (from its sdist: the generic cache, decorator and lock classes) against our
    backend, default configuration, with the pytest / pytest-asyncio / pytest-mock versions aiocache pins for them
    (``--assert=plain``: pytest 7.2's assertion rewriting fails on Python 3.11.7)."""
    pin = "aiocache" if aiocache == "latest" else f"aiocache=={aiocache}"
    # their test modules import the memcached and redis clients at module level (0.12.0), as their dev pins
    session.install(
        ".[aiocache]",
        pin,
        "pytest==7.2.0",
        "pytest-asyncio==0.20.3",
        "pytest-mock==3.10.0",
        "aiomcache==0.8.0",
        "redis==4.4.2",
    )
    tests_dir = _sdist_tests(session, "aiocache", "tests")
    session.run(
        "python",
        "tests/peer/run_pytest_suite.py",
        os.path.join(tests_dir, "acceptance"),
        "aiocache_backend_tests.py",
        "-o",
        "asyncio_mode=auto",
        "--rootdir",
        os.path.dirname(tests_dir),
        "--assert=plain",
    )
