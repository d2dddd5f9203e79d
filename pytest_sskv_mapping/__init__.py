"""The pytest plugin of sskv-mapping: state store fixtures for your app's tests (docs/testing.md).

Registered by the ``pytest11`` entry point of the ``sskv-mapping`` distribution, so every pytest run in an
environment where it is installed has these fixtures; ``-p no:sskv_mapping`` turns it off.

A top-level module, not ``sskv_mapping.<something>``: importing anything under ``sskv_mapping`` runs the
package's ``__init__``, which imports the whole library. This module imports only pytest; each fixture imports
``sskv_mapping.testing`` when a test first asks for it, so a suite that does not use them pays nothing.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from sskv_mapping.testing import FaultProxy, InProcessStore, LiveStore, StateStoreServer

__all__ = [
    "statestore",
    "statestore_faults",
    "statestore_live",
    "statestore_namespace",
    "statestore_server",
    "statestore_url",
]

_NOT_NAMESPACE = re.compile(r"[^A-Za-z0-9_.-]+")
_OURS = frozenset(__all__)
ASYNCIO_ONLY = (
    "sskv-mapping's async clients run on asyncio only, not on {backend}: pin anyio's backend with an "
    '`anyio_backend` fixture returning "asyncio" in your conftest.py (docs/testing.md, "Async tests")'
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """anyio's plugin runs an ``@pytest.mark.anyio`` test once per installed backend (trio too): a test that uses
    these fixtures is skipped on any backend but asyncio, with a message saying how to pin it."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "anyio_backend" not in callspec.params:
            continue
        backend = callspec.params["anyio_backend"]
        name = backend[0] if isinstance(backend, tuple) else backend
        if name != "asyncio" and _OURS.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.skip(reason=ASYNCIO_ONLY.format(backend=name)))


@pytest.fixture
def statestore_namespace(request: pytest.FixtureRequest) -> str:
    """A namespace no other test uses: the test's name (shortened) and a random suffix."""
    name = _NOT_NAMESPACE.sub("-", request.node.name).strip("-")[:40] or "test"
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def statestore(statestore_namespace: str) -> Iterator[InProcessStore]:
    """A fresh in-process state store (the real emulator over the loopback broker) and its fake clock.

    ``statestore.client`` is a connected blocking client, ``statestore.async_client()`` an async one to open with
    ``async with``, ``statestore.dict()`` / ``.cache()`` / ``.lock(name)`` ready faces in the test's namespace;
    ``statestore.advance(seconds)`` moves the clock of the store, the clients and the faces forward.
    """
    from sskv_mapping.testing import InProcessStore

    store = InProcessStore(namespace=statestore_namespace).start()
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(scope="session")
def statestore_server() -> Iterator[StateStoreServer]:
    """A private mosquitto and the emulator process on loopback, once per session (per pytest-xdist worker)."""
    from sskv_mapping.testing import StateStoreServer, StateStoreStartError

    server = StateStoreServer()
    try:
        server.start()
    except StateStoreStartError as exc:
        message = str(exc)
    else:
        try:
            yield server
        finally:
            server.stop()
        return
    pytest.fail(message, pytrace=False)  # the whole story is the message (and pytest caches it for the session)


@pytest.fixture(scope="session")
def statestore_url(statestore_server: StateStoreServer) -> str:
    """``mqtt://127.0.0.1:PORT`` of ``statestore_server``: give it to your app's settings (with a namespace)."""
    return statestore_server.url


@pytest.fixture
def statestore_live(statestore_server: StateStoreServer, statestore_namespace: str) -> Iterator[LiveStore]:
    """The test's own namespace on ``statestore_server``: clients, faces and the framework adapters' settings."""
    from sskv_mapping.testing import LiveStore

    live = LiveStore(statestore_server, statestore_namespace)
    try:
        yield live
    finally:
        live.close()


@pytest.fixture
def statestore_faults(statestore_server: StateStoreServer) -> Iterator[FaultProxy]:
    """A fault proxy between your app and ``statestore_server``: give your app ``statestore_faults.url``, then
    switch toxics on and off (``add_toxic("latency", latency=50)``, ``cut()``, ``disable()``...) and arm the
    SDK faultable broker's faults (``reject_next("publish", 0x87)``...). One per test; docs/testing.md "Faults"."""
    from sskv_mapping.testing import FaultProxy

    with FaultProxy((statestore_server.host, statestore_server.port), mqtt=True) as proxy:
        yield proxy
