"""The ``statestore`` fixture's store: the emulator on the loopback broker, on the loop thread, with a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Self

from .._blocking import get_loop_thread
from .._transport.base import ConnectionFactory
from ..emulator.inprocess import InProcessStateStore
from ._bridge import bridged_factory
from ._clock import FakeClock
from ._faces import StoreFaces

__all__ = ["InProcessStore"]

#: how many turns of the store's loop :meth:`InProcessStore.advance` gives the expiry timer at most
_EXPIRY_TURNS = 1000


class InProcessStore(StoreFaces):
    """A fresh state store in this process, and its clock: what the ``statestore`` fixture gives a test.

    The real emulator (core and server) answers on the in-process loopback broker: no sockets, no mosquitto, the
    same answers as the emulator process. It runs on the library's background loop thread, where every blocking
    client lives; async clients from any event loop reach it (:meth:`async_client`). Every client and face made
    here reads :attr:`clock`, which stands still until :meth:`advance` moves it.

    Args:
        namespace: the test's namespace (the faces' default).
        clock: the fake clock (default: a new one at the current time).
        store_options: for :class:`~sskv_mapping.emulator.inprocess.InProcessStateStore`: ``max_keys`` (a key
            quota), ``scan=False`` (a service without SCAN), ``scan_page_size``.

    Example:
        >>> with InProcessStore(namespace="demo").start() as statestore:  # doctest: +SKIP
        ...     statestore.client.set("k", b"v", ttl=1.0)
        ...     statestore.advance(1.0)
        ...     assert statestore.client.get("k") is None
    """

    def __init__(self, *, namespace: str = "test", clock: FakeClock | None = None, **store_options: Any) -> None:
        super().__init__(namespace)
        self.clock: FakeClock = clock if clock is not None else FakeClock()
        self._portal = get_loop_thread()
        #: the store itself: ``.core`` (the emulator core: ``.keys()``...), ``.server``, ``.broker``
        self.store = InProcessStateStore(now_ms=self.clock.wall_ms, **store_options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.clock.on_advance(self._clock_moved)

    def __repr__(self) -> str:
        return f"<InProcessStore namespace={self.namespace!r} {self.clock!r}>"

    def start(self) -> Self:
        """Start the store on the background loop thread."""

        async def start() -> asyncio.AbstractEventLoop:
            await self.store.start()
            return asyncio.get_running_loop()

        self._loop = self._portal.run(start())
        return self

    def close(self) -> None:
        """Close every client and face made here, then stop the store (stopped even if a close failed)."""
        try:
            super().close()
        finally:
            if self._loop is not None:
                self._loop = None
                self._portal.run(self.store.stop())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connection_factory(self) -> ConnectionFactory:
        """The ``connection_factory=`` that puts a client of your own (of either kind, on any loop) on this
        store; give it ``wall_clock_ms=statestore.clock.wall_ms`` too."""
        if self._loop is None:
            raise RuntimeError("the in-process store is not started")
        return bridged_factory(self.store.broker.connection, self._loop)

    def _client_kwargs(self) -> dict[str, Any]:
        return {"connection_factory": self.connection_factory, "wall_clock_ms": self.clock.wall_ms}

    def _async_client_kwargs(self) -> dict[str, Any]:
        return self._client_kwargs()

    def fastapi_lifespan(self, **options: Any) -> Any:
        """A lifespan for ``FastAPI(lifespan=...)`` / ``Starlette(lifespan=...)`` whose app state store is this one:
        an async client opened on the app's loop (a ``TestClient``'s), in the test's namespace unless
        ``namespace=`` is given; ``options`` as for ``statestore_lifespan`` (needs the ``fastapi`` extra)."""
        from ..integrations.fastapi import statestore_lifespan

        options.setdefault("namespace", self.namespace)

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[Any]:
            client = self.async_client()
            async with client, statestore_lifespan(client=client, **options)(app) as state:
                yield state

        return lifespan

    def advance(self, seconds: float) -> None:
        """Move the store's, the clients' and the faces' clocks forward by ``seconds``, at once.

        Keys whose ``PX`` ran out are gone when this returns (their watchers are sent the DELETE notifications,
        which reach a client a moment later, as from the real service); a lease that ran out is no longer held
        by its lock's clock, and a local cache's entries past ``max_staleness`` are revalidated on their next read.
        """
        self.clock.advance(seconds)

    def _clock_moved(self) -> None:
        if self._loop is not None:
            self._portal.run(self._expire_now())

    async def _expire_now(self) -> None:
        # the server's expiry timer slept for a real-time delay: wake it, and let it run until nothing due is left
        server, core = self.store.server, self.store.core
        server.clock_jumped()
        for _ in range(_EXPIRY_TURNS):
            due = core.next_expiry()
            if due is None or due > self.clock.wall_ms():
                return
            await asyncio.sleep(0)
