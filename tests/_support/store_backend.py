"""One implementation of the state store for a test: what the ``store_backend`` fixture (tests/conftest.py) gives.

The dict, cache, lock and election suites run every test twice, on ``"loopback"`` (the emulator's core on the
in-process loopback broker: no sockets, fast) and on ``"broker"`` (a real mosquitto with the emulator process
serving it: real). A test takes ``store_backend`` and asks it for clients:

* ``store_backend.client(**kw)``: a connected blocking :class:`StateStoreClient` (on the background loop thread);
* ``await store_backend.async_client(**kw)``: a connected :class:`AsyncStateStoreClient` on the test's loop;
* ``store_backend.client_kwargs``: the arguments that put a client of the test's own kind on this store, for a
  test that builds its client itself.

Every client made here is closed at the test's teardown (closing one earlier is fine).

The loopback broker serves one event loop, so on ``"loopback"`` there are two stores, one per kind of client: a
blocking client talks to the module's store on the loop thread (the ``loopback_store`` fixture), an async client
to a store started on the test's loop for this test. ``client_kwargs`` follow the test: an async test's are for
an async client (the test's loop), a blocking test's for a blocking client. On ``"broker"`` every client talks
to the session's mosquitto + emulator.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import pytest

from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient
from sskv_mapping.testing import InProcessStore

BackendName = Literal["loopback", "broker"]
NAMES: tuple[BackendName, ...] = ("loopback", "broker")


class StoreBackend:
    """One implementation of the store (``name``) and the clients a test made on it; see the module docstring."""

    def __init__(self, name: BackendName, request: pytest.FixtureRequest) -> None:
        self.name = name
        self._request = request
        self._async_test = inspect.iscoroutinefunction(getattr(request, "function", None))
        self._broker_kwargs: dict[str, Any] | None = None
        self._thread_store: InProcessStore | None = None  # loopback, for blocking clients (the loop thread)
        self._loop_store: InProcessStore | None = None  # loopback, for async clients on the test's loop
        self._clients: list[StateStoreClient] = []
        self._async_clients: list[AsyncStateStoreClient] = []
        if name == "broker":
            broker = request.getfixturevalue("mosquitto")
            request.getfixturevalue("emulator")  # marked ``broker`` at collection (tests/conftest.py)
            self._broker_kwargs = {"host": broker.host, "port": broker.port}
        elif not self._async_test:
            self._thread_store = request.getfixturevalue("loopback_store")

    def __repr__(self) -> str:
        return f"<StoreBackend {self.name}>"

    async def start(self) -> StoreBackend:
        """Called by the fixture: an async test on the loopback gets its store now, so ``client_kwargs`` are ready."""
        if self.name == "loopback" and self._async_test:
            await self._store_on_this_loop()
        return self

    @property
    def client_kwargs(self) -> dict[str, Any]:
        """Arguments for a client of the test's kind on this store (async test: async client; else blocking)."""
        if self._broker_kwargs is not None:
            return dict(self._broker_kwargs)
        if self._async_test:
            assert self._loop_store is not None, "start() runs before the test"
            return {"connection_factory": self._loop_store.broker.connection}
        return self._blocking_kwargs()

    def client(self, **kwargs: Any) -> StateStoreClient:
        """A connected blocking client on this store (``kwargs`` add to or override the store's arguments)."""
        base = self._broker_kwargs if self._broker_kwargs is not None else self._blocking_kwargs()
        client = StateStoreClient(**{**base, **kwargs})
        self._clients.append(client)
        client.connect()
        return client

    async def async_client(self, **kwargs: Any) -> AsyncStateStoreClient:
        """A connected async client on the running loop, on this store (``kwargs`` as for :meth:`client`)."""
        if self._broker_kwargs is not None:
            base = self._broker_kwargs
        else:
            base = {"connection_factory": (await self._store_on_this_loop()).broker.connection}
        client = AsyncStateStoreClient(**{**base, **kwargs})
        self._async_clients.append(client)
        await client.connect()
        return client

    async def aclose(self) -> None:
        """Called by the fixture at teardown: closes every client made here, then the test's own loopback store."""
        for async_client in self._async_clients:
            await async_client.close()
        for client in self._clients:
            client.close()
        if self._loop_store is not None:
            await self._loop_store.aclose()

    def _blocking_kwargs(self) -> dict[str, Any]:
        if self._thread_store is None:  # an async test that also wants a blocking client
            self._thread_store = self._request.getfixturevalue("loopback_store")
        return {"connection_factory": self._thread_store.broker.connection}

    async def _store_on_this_loop(self) -> InProcessStore:
        if self._loop_store is None:
            self._loop_store = await InProcessStore().astart()
        return self._loop_store
