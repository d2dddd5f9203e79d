"""The test matrix: every session on CPython 3.11, 3.12 and 3.13.

The interpreters are looked for on ``PATH`` and in pyenv (``$PYENV_ROOT/versions/3.X.*``: the project's machines
have 3.11, 3.12 and 3.13 there; a pyenv shim that refuses a version not activated does not count), and a pyenv one
is put on ``PATH`` for nox. A missing one is a skip, announced with the command that installs it, except under
CI (``CI`` set), where the three are expected and a missing one fails the run. ``SSKV_NOX_PYTHONS`` (e.g.
``SSKV_NOX_PYTHONS=3.13 nox -s tests``) narrows or changes the list.

``nox -l`` lists every session once per Python (``tests-3.12``; the Django ones name their Python and series:
``django(python='3.13', django='6.1')``, as Django 6 needs 3.12). ``nox`` with no arguments runs the default
sessions. Exceptions to "every Python": ``oldest`` (every declared floor) runs on 3.11, the oldest supported
Python, and ``newest`` (every newest release) on 3.13; a framework session's *oldest supported* version runs on
3.11 (where ``oldest`` tests the floors), its latest on every Python.

``.ci/run`` runs the README's test command (``scripts/test.sh``: the whole pytest suite in ``.venv`` on the
machine's ``python3``, 3.11 on the project's machines, with the latest supported frameworks), then ``core-3.13``
and ``peer-django(python='3.13', django='6.1')``, then the async suites on uvloop in ``.venv``; the sessions add the
older versions, the other Pythons, the bare install, lint and types.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib

import nox

#: the Pythons the project supports (pyproject.toml's classifiers), oldest first
SUPPORTED = ("3.11", "3.12", "3.13")
OLDEST, NEWEST = SUPPORTED[0], SUPPORTED[-1]
PYTHONS = os.environ.get("SSKV_NOX_PYTHONS", " ".join(SUPPORTED)).split()
CI = bool(os.environ.get("CI"))


def _runs(python: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "pass"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _pyenv_python(version: str) -> str | None:
    """The newest pyenv install of ``version`` (3.X), or None."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = [
        path
        for path in glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}"))
        if re.fullmatch(r"\d+\.\d+\.\d+", path.split(os.sep)[-3])  # 3.12.1, not 3.12.1-debug or a virtualenv
    ]
    found.sort(key=lambda p: tuple(int(n) for n in p.split(os.sep)[-3].split(".")))
    return found[-1] if found else None


def _find_interpreters(versions: list[str]) -> list[str]:
    """Make every interpreter of ``versions`` that exists findable by nox (a pyenv one goes on PATH); the
    missing ones."""
    missing = []
    for version in versions:
        on_path = shutil.which(f"python{version}")
        if on_path is not None and _runs(on_path):
            continue
        pyenv = _pyenv_python(version)
        if pyenv is not None and _runs(pyenv):
            os.environ["PATH"] = os.path.dirname(pyenv) + os.pathsep + os.environ.get("PATH", "")
            continue
        missing.append(version)
    return missing


MISSING = _find_interpreters(PYTHONS)
for _version in MISSING:
    _how = f"`pyenv install {_version}` (or your system's python{_version} package)"
    if CI:
        print(f"nox: ERROR: python{_version} is missing and CI expects it; install it: {_how}", file=sys.stderr)
    else:
        print(f"nox: python{_version} not found: its sessions are skipped; install it with {_how}", file=sys.stderr)

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = CI  # under CI all three are expected
nox.options.sessions = [
    "lint",
    "types",
    "types-tests",
    "bare",
    "tests",
    "broker",
    "core",
    "uvloop",
    "oldest",
    "newest",
    "django",
    "flask",
    "litestar",
    "aiocache",
    "fastapi",
    "dogpile",
    "hishel",
    "faults",
    "paho",
    "peer-django",
    "peer-cachelib",
    "peer-flask",
    "peer-aiocache",
    "peer-django-redis",
    "peer-litestar",  # skipped without a Litestar checkout (its sdists ship no tests)
    "peer-constance",
    "docs",
]
# ``oldest`` exists only with 3.11 in the matrix, ``newest`` with 3.13 (``SSKV_NOX_PYTHONS`` may leave them out)
nox.options.sessions = [
    name
    for name in nox.options.sessions
    if (name != "oldest" or OLDEST in PYTHONS) and (name != "newest" or NEWEST in PYTHONS)
]


def _version(python: str) -> tuple[int, ...]:
    return tuple(int(n) for n in python.split("."))


def _pairs(versions: dict[str, str]) -> list[tuple[str, str]]:
    """(python, version) for every Python of the matrix a framework version runs on: ``versions`` maps each
    version to the oldest Python it runs on, or to ``OLDEST``-only with a leading ``=`` (an oldest-supported
    release: tested on 3.11, with the floors)."""
    pairs = []
    for python in PYTHONS:
        for release, oldest_python in versions.items():
            if oldest_python.startswith("="):
                if python == oldest_python[1:]:
                    pairs.append((python, release))
            elif _version(python) >= _version(oldest_python):
                pairs.append((python, release))
    return pairs


def _only(python: str) -> list[str]:
    """``[python]`` when it is in the matrix (``SSKV_NOX_PYTHONS`` may leave it out)."""
    return [python] if python in PYTHONS else []


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
    """mypy --strict on the package, checked against this session's Python (``--python-version``: the stdlib
    and typing of that version, and the frameworks that install there, e.g. Django 6 on 3.12+)."""
    # cachetools ships its own annotations (py.typed) since 7.1: no stub package
    # the emulator's span export (SSKV_EMULATOR_OTEL_SPANS) imports the SDK, which the otel extra leaves to the app
    session.install(
        ".[msgpack,django,flask,litestar,aiocache,fastapi,dogpile,hishel,inspect,otel]",
        "opentelemetry-sdk>=1.27",
        "mypy>=1.8",
    )
    session.run("mypy", "--python-version", str(session.python), "sskv_mapping")


@nox.session(name="types-tests", python=PYTHONS)
def types_tests(session: nox.Session) -> None:
    """mypy on the tests: pyproject's ``tests.*`` override (check_untyped_defs, every ``type: ignore`` still
    needed, test functions need no annotations); the dev extra brings what they import."""
    session.install(".[dev,inspect,otel]")
    session.run("mypy", "--python-version", str(session.python), "tests")


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


#: the suites that need no framework: protocol, client, transport, emulator (and its inspector), dict, cache,
#: locks, election, codecs, security...; ``core`` and ``uvloop`` run them
#: what the framework-free suites need: the codecs, the inspector, OpenTelemetry (tests/telemetry reads spans back
#: through the SDK's in-memory exporters), the security tests' certificates and the inspector's HTTP client
CORE_EXTRAS = ("msgpack", "inspect", "otel")
CORE_DEPS = ("cryptography>=41", "httpx>=0.24", "opentelemetry-sdk>=1.27", "time-machine>=2.10", "freezegun>=1.2")
CORE_IGNORE = ["--ignore=tests/integrations", "--ignore=tests/docs", "--ignore=tests/peer", "--ignore=tests/fuzz"]
#: warnings our own modules cause (the module a DeprecationWarning is attributed to is ours: the caller of the
#: deprecated asyncio/datetime/typing API) fail the run; a regular expression, hence -o, not -W (which matches
#: one module name exactly)
OUR_DEPRECATIONS_FAIL = ["-o", "filterwarnings=error::DeprecationWarning:sskv_mapping"]


@nox.session(python=PYTHONS)
def core(session: nox.Session) -> None:
    """The suites that need no framework, in-process and over mosquitto + the emulator (fault suite excluded),
    with any DeprecationWarning raised from our modules an error; a small install (no frameworks, no docs)
    so that CI can run it on 3.13 beside the test command."""
    _install(session, *CORE_EXTRAS, deps=CORE_DEPS)
    session.run(*PYTEST, *OUR_DEPRECATIONS_FAIL, "-m", "not faults", *CORE_IGNORE, "tests", *session.posargs)


@nox.session(name="ci-newest", python=_only(NEWEST))
def ci_newest(session: nox.Session) -> None:
    """What ``.ci/run`` runs on the newest Python, a selection that fits CI's time (``core`` runs all of it):
    every test of the ``core`` suites that needs no broker, and the request path over mosquitto + the emulator
    (tests/transport, tests/client); any DeprecationWarning raised from our modules is an error."""
    _install(session, *CORE_EXTRAS, deps=CORE_DEPS)
    session.run(*PYTEST, *OUR_DEPRECATIONS_FAIL, "-m", "not broker and not faults", *CORE_IGNORE, "tests")
    session.run(*PYTEST, *OUR_DEPRECATIONS_FAIL, "-m", "broker and not faults", "tests/transport", "tests/client")


#: the async suites: client, transport, dict, cache, locks, election, recovery, the in-process fault scenarios
UVLOOP_SUITES = [
    "tests/test_event_loop.py",
    "tests/transport",
    "tests/client",
    "tests/mapping",
    "tests/cache",
    "tests/lock",
    "tests/election",
    "tests/recovery",
    "tests/faults",
    "integrations/fastapi_app/test_fastapi_uvicorn.py",
    "integrations/litestar_app/test_litestar_uvicorn.py",
]


@nox.session(python=PYTHONS)
def uvloop(session: nox.Session) -> None:
    """The async suites on uvloop (``SSKV_LOOP=uvloop``, read by tests/conftest.py: every test's loop and the
    blocking twins' loop thread), and the example ASGI apps under uvicorn ``--loop uvloop``."""
    if sys.platform == "win32":
        session.skip("uvloop has no Windows build")
    _install(session, "dev")
    session.env["SSKV_LOOP"] = "uvloop"
    session.run(*PYTEST, "-rs", *UVLOOP_SUITES, *session.posargs)


#: the TTL table (tests/integrations/test_ttl_table.py) checked against the frameworks whose timeout it translates
TTL_TABLE = "tests/integrations/test_ttl_table.py"

FRAMEWORK_TESTS = {
    "django": [
        TTL_TABLE,
        "tests/integrations/test_django.py",
        "tests/integrations/test_django6.py",
        "tests/integrations/test_django_redis.py",  # django-redis's extras
        "integrations/django_app",
    ],
    "flask": ["tests/integrations/test_flask.py", "integrations/flask_app", TTL_TABLE],  # cachelib's rows
    "litestar": ["tests/integrations/test_litestar.py", "integrations/litestar_app", TTL_TABLE],
    "aiocache": ["tests/integrations/test_aiocache.py", "tests/integrations/test_aiocache_api.py", TTL_TABLE],
    "fastapi": ["tests/integrations/test_fastapi.py", "integrations/fastapi_app"],
    # dogpile's own backend, mutex and serializer suites, imported from its installed wheel, and ours
    "dogpile": ["tests/integrations/test_dogpile.py", "tests/integrations/test_dogpile_suite.py"],
    # the storages, and the example app in two uvicorn processes (its fastapi and uvicorn: the hishel session's)
    "hishel": ["tests/integrations/test_hishel.py", "integrations/hishel_app"],
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


#: the suites ``oldest`` and ``newest`` run
UNIT_DIRS = ["tests/protocol", "tests/client", "tests/lock", "tests/mapping", "tests/codecs", "tests/local_cache"]
ALL_EXTRAS = "msgpack,django,flask,litestar,aiocache,fastapi,dogpile,hishel,inspect,docs"


def _dependency_suites() -> list[str]:
    apps = [p for paths in FRAMEWORK_TESTS.values() for p in paths if p.startswith("integrations/")]
    # the inspector's (aiohttp) and the docs build's (mkdocs) dependencies: their tests (the browser ones skip
    # without selenium, which only the dev extra brings)
    return [*UNIT_DIRS, "tests/integrations", *apps, "tests/emulator/inspector", "tests/docs"]


@nox.session(python=_only(OLDEST), reuse_venv=False)  # a reused venv keeps what an earlier floor pulled in
def oldest(session: nox.Session) -> None:
    """Every floor ``pyproject.toml`` declares, installed together at exactly that version (aiomqtt, paho-mqtt,
    cachetools, msgpack, each framework extra's, httpx and the test tools): the client, lock, dict, codecs,
    local cache and index suites, every integration test and example app, the inspector and the docs build."""
    floors = declared_floors()
    session.install(f".[{ALL_EXTRAS}]", *(f"{n}=={v}" for n, v in floors.items()))
    session.run("python", "-m", "pip", "list", "--format=freeze")  # the versions this run tested, in its log
    # a framework that cannot be imported would only skip its tests: fail here instead
    session.run(
        "python",
        "-c",
        "import aiocache, django, dogpile.cache, fastapi, flask_caching, hishel, httpx, litestar, msgpack",
    )
    session.run(*PYTEST, "-rs", "-m", "not faults", *_dependency_suites(), *session.posargs)


@nox.session(python=_only(NEWEST), reuse_venv=False)
def newest(session: nox.Session) -> None:
    """The newest release of every dependency, framework and test tool (``--upgrade``, no pins beyond
    ``pyproject.toml``'s caps) on the newest Python: the suites ``oldest`` runs, our deprecations an error."""
    # uvicorn and uvloop: the example ASGI apps' uvicorn tests (uvloop has no Windows build)
    uv = ("uvicorn", "uvloop") if sys.platform != "win32" else ("uvicorn",)
    session.install("--upgrade", f".[{ALL_EXTRAS}]", *TEST_DEPS, "httpx", *uv)
    session.run("python", "-m", "pip", "list", "--format=freeze")  # the versions this run tested, in its log
    session.run(
        "python",
        "-c",
        "import aiocache, django, dogpile.cache, fastapi, flask_caching, hishel, httpx, litestar, msgpack",
    )
    session.run(*PYTEST, "-rs", *OUR_DEPRECATIONS_FAIL, "-m", "not faults", *_dependency_suites(), *session.posargs)


def _framework(session: nox.Session, name: str, pin: str) -> None:
    _install(session, name, deps=(pin, "httpx>=0.24"))
    paths = [p for p in FRAMEWORK_TESTS[name] if os.path.exists(p)]
    session.run(*PYTEST, *paths, *session.posargs)


#: each Django series -> the oldest Python it runs on (6.0 and 6.1 need 3.12; 5.2 LTS is the last for 3.11)
DJANGO_SERIES = {"5.2": "3.11", "6.0": "3.12", "6.1": "3.12"}
#: each framework's oldest supported release (tested on 3.11, with the floors: "=3.11") and its latest
FLASK_CACHING = {"2.0.2": f"={OLDEST}", "latest": OLDEST}
LITESTAR = {"2.0.0": f"={OLDEST}", "latest": OLDEST}
AIOCACHE = {"0.12.0": f"={OLDEST}", "latest": OLDEST}
CACHELIB = {"0.9.0": f"={OLDEST}", "latest": OLDEST}
DOGPILE = {"1.3.0": f"={OLDEST}", "latest": OLDEST}
HISHEL = {"2.0.0": f"={OLDEST}", "latest": OLDEST}


@nox.session
@nox.parametrize(("python", "django"), _pairs(DJANGO_SERIES))
def django(session: nox.Session, django: str) -> None:
    """The Django cache backend and example project, on Django 5.2 LTS, 6.0 and 6.1 (6.x on Python 3.12+)."""
    _framework(session, "django", f"django=={django}.*")


@nox.session
@nox.parametrize(("python", "flask_caching"), _pairs(FLASK_CACHING))
def flask(session: nox.Session, flask_caching: str) -> None:
    """Flask-Caching backend and example app, oldest supported (on 3.11) and latest."""
    _framework(session, "flask", "flask-caching" if flask_caching == "latest" else f"flask-caching=={flask_caching}")


@nox.session
@nox.parametrize(("python", "litestar"), _pairs(LITESTAR))
def litestar(session: nox.Session, litestar: str) -> None:
    """Litestar Store and example app, oldest supported (on 3.11) and latest."""
    if litestar == "latest":
        _framework(session, "litestar", "litestar")
    else:  # litestar 2.0's TestClient predates httpx 0.28's API change
        session.install("httpx<0.28")
        _framework(session, "litestar", f"litestar=={litestar}")


@nox.session
@nox.parametrize(("python", "aiocache"), _pairs(AIOCACHE))
def aiocache(session: nox.Session, aiocache: str) -> None:
    """aiocache backend, oldest supported (on 3.11) and latest."""
    _framework(session, "aiocache", "aiocache" if aiocache == "latest" else f"aiocache=={aiocache}")


@nox.session(python=PYTHONS)
def fastapi(session: nox.Session) -> None:
    """FastAPI/Starlette lifespan helper and example app."""
    _framework(session, "fastapi", "fastapi")


@nox.session
@nox.parametrize(("python", "dogpile"), _pairs(DOGPILE))
def dogpile(session: nox.Session, dogpile: str) -> None:
    """dogpile.cache backend: dogpile's own ``_GenericBackendTestSuite``, ``_GenericMutexTestSuite`` and
    ``_GenericSerializerTestSuite`` from the installed wheel (``dogpile/testing``) and ours, oldest supported
    (on 3.11) and latest."""
    _framework(session, "dogpile", "dogpile.cache" if dogpile == "latest" else f"dogpile.cache=={dogpile}")


@nox.session
@nox.parametrize(("python", "hishel"), _pairs(HISHEL))
def hishel(session: nox.Session, hishel: str) -> None:
    """hishel storages, and its ASGI middleware in front of the example FastAPI app served by two uvicorn processes
    (the second serves the first's cached response), oldest supported (on 3.11) and latest."""
    session.install("fastapi>=0.100", "uvicorn>=0.30")
    _framework(session, "hishel", "hishel" if hishel == "latest" else f"hishel=={hishel}")


@nox.session(python=PYTHONS)
def faults(session: nox.Session) -> None:
    """The fault suite: broker kills, emulator restarts, lost notifications, fencing, clock skew, fuzzing."""
    _install(session, "dev")
    session.run(*PYTEST, "-m", "faults", "tests/faults", "-s", *session.posargs)
    session.run(*PYTEST, "tests/fuzz", *session.posargs)  # hostile input: fuzzed parsers, a request flood


@nox.session(python=PYTHONS)
def toxics(session: nox.Session) -> None:
    """The whole toxic matrix (tests/recovery/test_toxics.py, ``SSKV_TOXICS=full``: every toxic on the client's
    link, the emulator's and both, with the 30 s flapping) on the stream transport, on paho and on uvloop."""
    _install(session, "dev")
    args = ("-rs", "-s", "tests/recovery/test_toxics.py", "tests/testing/test_fault_proxy.py", *session.posargs)
    runs: list[dict[str, str]] = [{}, {"SSKV_MQTT_TRANSPORT": "paho"}]
    if sys.platform != "win32":
        runs.append({"SSKV_LOOP": "uvloop"})
    for extra in runs:
        session.run(*PYTEST, *args, env={"SSKV_TOXICS": "full", **extra})


@nox.session(name="paho", python=PYTHONS)
def paho_transport(session: nox.Session) -> None:
    """The client<->emulator suites on the paho transport (aiomqtt/paho; ``SSKV_MQTT_TRANSPORT=paho``, read by
    ``_transport/factory.py``): paho's packet handling on both ends (the emulator process inherits it)."""
    _install(session, "dev")
    session.env["SSKV_MQTT_TRANSPORT"] = "paho"
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
    found = _sdist_subdir(session, package, subdir)
    if found is None:
        session.error(f"the sdist of the installed {package} has no {subdir}/")
    return found


def _sdist_subdir(session: nox.Session, package: str, subdir: str) -> str | None:
    """:func:`_sdist_tests`, or ``None`` when the sdist has no ``subdir``."""
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
        member = f"{archive[: -len('.tar.gz')]}/{subdir}"
        with tarfile.open(os.path.join(tmp, archive)) as tar:
            if not any(name == member or name.startswith(member + "/") for name in tar.getnames()):
                session.log(f"{archive} has no {subdir}/")
                return None
        os.makedirs(dest)
        session.run("tar", "xzf", os.path.join(tmp, archive), "-C", dest, "--strip-components=1", member, external=True)
    return os.path.abspath(os.path.join(dest, subdir))


@nox.session(name="peer-django")
@nox.parametrize(("python", "django"), _pairs(DJANGO_SERIES))
def peer_django(session: nox.Session, django: str) -> None:
    """Django's own ``BaseCacheTests`` (from its sdist) against our backend in its default configuration, on
    Django 5.2, 6.0 and 6.1; exclusions with their reasons in ``tests/peer/django_exclusions.json``."""
    _install(session, "django", deps=(f"django=={django}.*",))
    tests_dir = _sdist_tests(session, "django", "tests/cache")
    session.run("python", "tests/peer/run_django_suite.py", os.path.dirname(tests_dir), "sync")
    # the same contract through our native a* methods (Django ships no async tests for real backends)
    session.run("python", "tests/peer/run_django_suite.py", os.path.dirname(tests_dir), "async")
    # and with a local cache: what a process reads after its own write is what the store holds
    session.run("python", "tests/peer/run_django_suite.py", os.path.dirname(tests_dir), "sync", "local")


@nox.session(name="peer-constance")
@nox.parametrize(("python", "django"), _pairs(DJANGO_SERIES))
def peer_constance(session: nox.Session, django: str) -> None:
    """django-constance's own backend tests (from its sdist: ``StorageTestsMixin`` and the Redis backend's test
    classes, sync and async) against our constance backend, on every Django of the matrix; no exclusions."""
    _install(session, "constance", deps=(f"django=={django}.*",))
    root = os.path.dirname(_sdist_tests(session, "django-constance", "tests"))
    session.run("python", "tests/peer/run_constance_suite.py", root)


@nox.session(name="peer-cachelib")
@nox.parametrize(("python", "cachelib"), _pairs(CACHELIB))
def peer_cachelib(session: nox.Session, cachelib: str) -> None:
    """cachelib's own backend mixins (from its sdist) against the Flask-Caching backend, default configuration
    (what Flask-Caching's backends are tested with); no exclusions."""
    pin = () if cachelib == "latest" else (f"cachelib=={cachelib}",)
    _install(session, "flask", deps=(*pin, "pytest-xprocess"))
    tests_dir = _sdist_tests(session, "cachelib", "tests")
    # their suites are synchronous; our asyncio plugin only warns, which their filterwarnings=error fails on
    session.run("python", "tests/peer/run_pytest_suite.py", tests_dir, "cachelib_backend_tests.py", "-p", "no:asyncio")


@nox.session(name="peer-flask")
@nox.parametrize(("python", "flask_caching"), _pairs(FLASK_CACHING))
def peer_flask(session: nox.Session, flask_caching: str) -> None:
    """Flask-Caching's own ``GenericCacheTests`` (from its sdist) against our backend, default configuration."""
    pin = () if flask_caching == "latest" else (f"flask-caching=={flask_caching}", "cachelib==0.9.0")
    _install(session, "flask", deps=(*pin, "pytest-xprocess"))
    tests_dir = _sdist_tests(session, "flask_caching", "tests")
    session.run(
        "python", "tests/peer/run_pytest_suite.py", tests_dir, "flask_caching_backend_tests.py", "-p", "no:asyncio"
    )


@nox.session(name="peer-django-redis")
@nox.parametrize(("python", "django"), _pairs(DJANGO_SERIES))
def peer_django_redis(session: nox.Session, django: str) -> None:
    """django-redis's own ``tests/test_backend.py`` (from its sdist) against our Django backend, on every Django of
    the matrix: its ``keys``, ``iter_keys``, ``delete_pattern``, ``ttl``/``pttl``, ``expire``... tests; what the
    store does not offer is deselected with the reason (``tests/peer/run_django_redis_suite.py``)."""
    # django-redis and redis: their test module imports both; pytest-mock: their mocker fixture; pytest-xdist: their
    # conftest imports its scheduler
    _install(
        session,
        "django",
        "msgpack",
        deps=(f"django=={django}.*", "django-redis", "redis", "pytest-mock", "pytest-xdist"),
    )
    tests_dir = _sdist_tests(session, "django-redis", "tests")
    session.run("python", "tests/peer/run_django_redis_suite.py", tests_dir, *session.posargs)


@nox.session(name="peer-litestar", python=_only(OLDEST))
def peer_litestar(session: nox.Session) -> None:
    """Litestar's own tests of response caching, server-side sessions and the rate-limit middleware with our store
    in place of its memory store, without and with a local cache (``tests/peer/run_litestar_suite.py``: what is
    deselected and why). Their ``tests/`` come from the installed release's sdist when it ships them; Litestar's
    sdists ship none (2.25.0: the package, its pyproject and licence), so give a checkout of its repository at that
    release as ``SSKV_LITESTAR_SOURCE`` or the first argument; without either the session is skipped, saying so."""
    # what their conftest imports (the Redis and Valkey stores' clients, time-machine before 3, lazy fixtures, the
    # client-side session backend's cryptography)
    deps = ("pytest-lazy-fixtures", "redis", "valkey", "time-machine<3", "cryptography", "httpx>=0.24")
    _install(session, "litestar", deps=deps)
    source = session.posargs[0] if session.posargs else os.environ.get("SSKV_LITESTAR_SOURCE")
    if not source:
        tests_dir = _sdist_subdir(session, "litestar", "tests")
        if tests_dir is None:
            session.skip(
                "the installed Litestar's sdist ships no tests: set SSKV_LITESTAR_SOURCE to a checkout of "
                "github.com/litestar-org/litestar at that release (or pass it as the first argument)"
            )
        source = os.path.dirname(tests_dir)
    elif not os.path.isdir(os.path.join(source, "tests")):
        session.error(f"no tests/ in {source} (SSKV_LITESTAR_SOURCE): give a checkout of Litestar's repository")
    session.run("python", "tests/peer/run_litestar_suite.py", source, *session.posargs[1:])
    session.run("python", "tests/peer/run_litestar_suite.py", source, "--local-cache", *session.posargs[1:])


@nox.session(name="peer-aiocache")
@nox.parametrize(("python", "aiocache"), _pairs(AIOCACHE))
def peer_aiocache(session: nox.Session, aiocache: str) -> None:
    """aiocache's own acceptance tests (from its sdist: the generic cache, decorator and lock classes) against our
    backend, default configuration and with a local cache (``-- -k sskv_cache_local`` for that half alone), with
    the pytest / pytest-asyncio / pytest-mock versions aiocache pins for them (``--assert=plain``: pytest 7.2's
    assertion rewriting fails on Python 3.11.7)."""
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
        *session.posargs,
    )
