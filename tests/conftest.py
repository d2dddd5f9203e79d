"""Suite-wide fixtures: a private mosquitto and the emulator process.

* ``mosquitto`` (session): one broker for the whole run. Do not stop, restart or kill it.
* ``fresh_mosquitto`` (function): a broker of your own, for tests that restart or kill it.
* ``untuned_mosquitto``, ``untuned_emulator``, ``untuned_broker_address`` (session): a second broker, a mosquitto on
  its default settings (``MosquittoBroker(default_settings=True)``: no ``set_tcp_nodelay``), with an emulator of its
  own; the request-path tests run on it too (tests/transport, tests/client's round trips, a dict/cache contract
  subset).
* ``emulator`` (session): the emulator process on ``mosquitto``.
* ``fresh_emulator`` (function): an emulator process on ``fresh_mosquitto`` (ask for both fixtures to
  get the pair). For an emulator of your own on the session broker, call
  ``start_emulator(mosquitto.host, mosquitto.port)`` from ``tests._support.procs`` in a ``with``.
* ``broker_address``, ``client``, ``other`` (function): ``(host, port)`` of the session broker with the emulator on
  it, and two async clients on it (client tests; ``tests/lock`` makes its ``client`` / ``other`` with
  ``store_backend``, ``tests/boundary`` has its own ``client``, and ``tests/integrations`` its own ``client`` and
  ``broker_url``, the ``mqtt://host:port`` string the adapters take).
* ``namespace`` (function): a fresh namespace name (some modules override it with their own prefix).
* ``loopback_store`` (module): an in-process store started on the background loop thread, for blocking clients
  (``store_backend`` uses it).
* ``store_backend`` (function, params ``loopback`` and ``broker``): one implementation of the store, which makes
  connected clients on it and closes them at teardown (``tests/_support/store_backend.py``); the dict, cache, lock
  and election suites take it, so each of their tests runs on both.

Tests using any of them (``store_backend`` on its ``broker`` param) are marked ``broker`` automatically
(``-m "not broker"`` runs the rest).

The event loop: asyncio's own, or uvloop with ``SSKV_LOOP=uvloop`` (``nox -s uvloop``): its policy is set before
any loop is made, so every test's and fixture's loop and the blocking twins' loop thread are uvloop's; a missing
uvloop is a usage error, not a quiet fallback. The report header names the loop.
After the session, no mosquitto or emulator child may remain: the suite errors at teardown if one does
(it is killed first), and ``atexit`` hooks sweep up after a crash.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import NoReturn

import pytest
from hypothesis import settings

from sskv_mapping._blocking import get_loop_thread
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker, MosquittoStartError, live_brokers
from sskv_mapping.errors import ConfigurationError, StateStoreStartError
from sskv_mapping.testing import InProcessStore
from sskv_mapping.testing._server import live_servers
from tests._support.procs import (
    EmulatorProcess,
    child_processes,
    kill_child,
    live_emulators,
    start_emulator,
)
from tests._support.store_backend import NAMES, StoreBackend

# No property test has a time limit: hypothesis's default 200 ms deadline is a timed assertion, and a shared CI
# machine under load fails it on a correct example (seen: 384 ms, then 0.07 ms on the re-run). Speed is measured
# by the benchmarks.
settings.register_profile("sskv", deadline=None)
settings.load_profile("sskv")

#: ``SSKV_LOOP``: the event loop every async test runs on (see the module docstring)
LOOPS = ("asyncio", "uvloop")


def selected_loop() -> str:
    """The loop ``SSKV_LOOP`` asks for (``asyncio`` when unset)."""
    loop = os.environ.get("SSKV_LOOP", "").strip() or "asyncio"
    if loop not in LOOPS:
        raise pytest.UsageError(f"SSKV_LOOP={loop!r}: one of {', '.join(LOOPS)}")
    return loop


def pytest_configure(config: pytest.Config) -> None:
    # the policy, not pytest-asyncio's loop_factories hook: the policy also reaches the loops made outside the
    # tests (sskv_mapping._blocking's loop thread, asyncio.run in a helper) and works with every pytest-asyncio
    # from the declared floor (0.24) on; policies are deprecated from Python 3.14 only
    if selected_loop() == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise pytest.UsageError("SSKV_LOOP=uvloop but uvloop is not installed (pip install uvloop)") from None
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def pytest_report_header() -> str:
    loop = selected_loop()
    if loop == "uvloop":
        return f"event loop: uvloop {importlib.metadata.version('uvloop')} (SSKV_LOOP=uvloop)"
    return "event loop: asyncio's own (SSKV_LOOP=uvloop runs the suites on uvloop)"


BROKER_FIXTURES = frozenset(
    {
        "mosquitto",
        "fresh_mosquitto",
        "emulator",
        "fresh_emulator",
        "untuned_mosquitto",
        "untuned_emulator",
        "statestore_server",  # the pytest plugin's (pytest_sskv_mapping): statestore_url and statestore_live too
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        on_broker = getattr(getattr(item, "callspec", None), "params", {}).get("store_backend") == "broker"
        if on_broker or BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.broker)


def _fail(message: str) -> NoReturn:
    # pytrace=False: the message is the whole story; a session fixture's failure is cached by pytest,
    # so every test using it reports it without waiting again.
    pytest.fail(message, pytrace=False)


def _start_broker(*, default_settings: bool = False) -> MosquittoBroker:
    # pytest.fail outside the except blocks: the exception chain would only repeat the message.
    try:
        return MosquittoBroker(default_settings=default_settings).start()
    except ConfigurationError as exc:
        message = str(exc)
    except MosquittoStartError as exc:
        message = f"could not start a private mosquitto: {exc}"
    _fail(message)


def _start_emulator(broker: MosquittoBroker) -> EmulatorProcess:
    if importlib.util.find_spec("sskv_mapping.emulator.__main__") is None:
        _fail(
            "the emulator process is not available: sskv_mapping/emulator/__main__.py is missing "
            "(`python -m sskv_mapping.emulator` must print 'serving state store on ...' when ready)"
        )
    try:
        return start_emulator(broker.host, broker.port)
    except StateStoreStartError as exc:
        message = str(exc)
    _fail(message)


@pytest.fixture(scope="session")
def mosquitto() -> Iterator[MosquittoBroker]:
    """The session's private mosquitto (shared: never stop, restart or kill it; see fresh_mosquitto)."""
    broker = _start_broker()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def fresh_mosquitto() -> Iterator[MosquittoBroker]:
    """A private mosquitto for this test only; restart() and kill() are fine."""
    broker = _start_broker()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def untuned_mosquitto() -> Iterator[MosquittoBroker]:
    """A session mosquitto on its default settings (no socket options: Nagle on its side); shared, never stop it."""
    broker = _start_broker(default_settings=True)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def untuned_emulator(untuned_mosquitto: MosquittoBroker) -> Iterator[EmulatorProcess]:
    """The emulator process serving the untuned broker (shared: do not stop it)."""
    with _start_emulator(untuned_mosquitto) as proc:
        yield proc


@pytest.fixture
def untuned_broker_address(untuned_mosquitto: MosquittoBroker, untuned_emulator: EmulatorProcess) -> tuple[str, int]:
    """``(host, port)`` of the untuned broker with its emulator serving on it."""
    return untuned_mosquitto.host, untuned_mosquitto.port


@pytest.fixture(scope="session")
def emulator(mosquitto: MosquittoBroker) -> Iterator[EmulatorProcess]:
    """The emulator process serving the session broker (shared: do not stop it)."""
    with _start_emulator(mosquitto) as proc:
        yield proc


@pytest.fixture
def fresh_emulator(fresh_mosquitto: MosquittoBroker) -> Iterator[EmulatorProcess]:
    """An emulator process for this test only, serving ``fresh_mosquitto``."""
    with _start_emulator(fresh_mosquitto) as proc:
        yield proc


@pytest.fixture(scope="session", autouse=True)
def _no_leaked_child_processes() -> Iterator[None]:
    """At session end no mosquitto/emulator started by us may remain (they are killed, then reported).

    Autouse and session-scoped, so it is set up before and torn down after every other session fixture.
    """
    yield
    # The pytest plugin's session server (statestore_server) is torn down by pytest in reverse setup order: when a
    # test outside tests/ (the example apps) set it up before this fixture, it is still running now. Not a leak.
    for server in live_servers():
        server.stop()
    leaks: list[str] = []
    for broker in live_brokers():
        leaks.append(repr(broker))
        broker.stop()
    for proc in live_emulators():
        leaks.append(repr(proc))
        proc.kill()
    # Also mosquittos not started through MosquittoBroker (a test's own subprocess).
    for pid, comm in child_processes("mosquitto"):
        leaks.append(f"{comm} pid={pid}")
        kill_child(pid)
    assert not leaks, f"child processes left running after the test session (now killed): {leaks}"


# -- two async clients on the session broker + emulator (client tests) ---------------------------------------------


@pytest.fixture
def broker_address(mosquitto: MosquittoBroker, emulator: EmulatorProcess) -> tuple[str, int]:
    """The session broker with the session emulator serving on it."""
    return mosquitto.host, mosquitto.port


@pytest.fixture
async def client(broker_address: tuple[str, int]) -> AsyncIterator[AsyncStateStoreClient]:
    async with AsyncStateStoreClient(*broker_address) as c:
        yield c


@pytest.fixture
async def other(broker_address: tuple[str, int]) -> AsyncIterator[AsyncStateStoreClient]:
    async with AsyncStateStoreClient(*broker_address) as c:
        yield c


# -- a fresh namespace, a loopback store for blocking clients (store_backend) --------------------------------------


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def loopback_store() -> Iterator[InProcessStore]:
    """An in-process store on the loop thread's event loop, on the real clock (the blocking clients' loop)."""
    portal = get_loop_thread()
    store = portal.run(InProcessStore().astart())
    yield store
    portal.run(store.aclose())


# -- one implementation of the store, loopback or broker (dict, cache, lock and election tests) --------------------


@pytest.fixture(params=NAMES)
async def store_backend(request: pytest.FixtureRequest) -> AsyncIterator[StoreBackend]:
    """The test runs once per implementation of the store: see ``tests/_support/store_backend.py``."""
    backend = await StoreBackend(request.param, request).start()
    try:
        yield backend
    finally:
        await backend.aclose()
