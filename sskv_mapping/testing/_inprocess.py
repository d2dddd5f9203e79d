"""The ``statestore`` fixture's store: the emulator on the in-process loopback broker, blocking or on your loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Self

from .._blocking import LoopThread, get_loop_thread
from .._protocol.hlc import system_clock_ms
from .._transport.base import ConnectionFactory
from .._transport.loopback import LoopbackBroker
from .._transport.settings import ConnectionSettings
from ..emulator.core import EmulatorCore
from ..emulator.server import EmulatorServer
from ._bridge import bridged_factory
from ._clock import FakeClock
from ._faces import StoreFaces

__all__ = ["InProcessStore"]

#: how many turns of the store's loop :meth:`InProcessStore.advance` gives the expiry timer at most
_EXPIRY_TURNS = 1000


class InProcessStore(StoreFaces):
    """A fresh state store in this process, and its clock: what the ``statestore`` fixture gives a test.

    The real emulator (:attr:`core` and :attr:`server`) answers on the in-process loopback :attr:`broker`: no
    sockets, no mosquitto, the same answers as the emulator process. Two ways to run it (docs/testing.md):

    * :meth:`start` (blocking, the fixture's): on the library's background loop thread, where every blocking client
      lives; async clients from any event loop reach it (:meth:`async_client`). It reads :attr:`clock`, a fake
      clock that stands still until :meth:`advance` moves it.
    * ``async with`` (or :meth:`astart`): on the running event loop, for async clients on that loop
      (:meth:`async_client`, no bridge between loops). It reads ``clock`` if one is given, else the real clock.

    Every client and face made here reads the store's clock.

    Args:
        namespace: the test's namespace (the faces' default).
        clock: the fake clock (default: a new one at the current time when started blocking, the real clock
            when started with ``async with``).
        store_options: for :class:`~sskv_mapping.emulator.core.EmulatorCore`: ``max_keys`` (a key quota),
            ``scan=False`` (a service without SCAN), ``scan_page_size``, ``scan_empty_pages``.

    Example:
        >>> with InProcessStore(namespace="demo").start() as statestore:  # doctest: +SKIP
        ...     statestore.client.set("k", b"v", ttl=1.0)
        ...     statestore.advance(1.0)
        ...     assert statestore.client.get("k") is None
        >>> async with InProcessStore() as store, store.async_client() as client:  # doctest: +SKIP
        ...     await client.set("k", b"v")
    """

    def __init__(self, *, namespace: str = "test", clock: FakeClock | None = None, **store_options: Any) -> None:
        super().__init__(namespace)
        self._clock: FakeClock | None = None
        if clock is not None:
            self._use_clock(clock)
        #: the in-process broker the store serves on
        self.broker = LoopbackBroker()
        #: the emulator core: the store's keys (``.keys()``, ``.entry(key)``, ``.next_expiry()``...)
        self.core = EmulatorCore(now_ms=self._wall_ms, **store_options)
        #: the emulator server: the core's MQTT face on :attr:`broker`
        self.server = EmulatorServer(
            ConnectionSettings(client_id="sskv-emulator"),
            self.core,
            connection_factory=self.broker.connection,
            now_ms=self._wall_ms,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._portal: LoopThread | None = None  # set while started blocking
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<InProcessStore namespace={self.namespace!r} {self._clock or 'real clock'!r}>"

    @property
    def clock(self) -> FakeClock:
        """The fake clock the store, its clients and its faces read (made on first use when none was given).

        Raises:
            RuntimeError: the store was started with ``async with`` and no ``clock=``: it reads the real clock.
        """
        if self._clock is None:
            if self._loop is not None:
                raise RuntimeError("this in-process store reads the real clock: give it InProcessStore(clock=...)")
            self._use_clock(FakeClock())
        assert self._clock is not None
        return self._clock

    def _use_clock(self, clock: FakeClock) -> None:
        self._clock = clock
        clock.on_advance(self._clock_moved)

    def _wall_ms(self) -> int:
        return system_clock_ms() if self._clock is None else self._clock.wall_ms()

    # -- running it -----------------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the store on the background loop thread, on :attr:`clock`."""
        self.clock  # noqa: B018  # a blocking store always reads a fake clock
        portal = get_loop_thread()
        portal.run(self.astart())
        self._portal = portal
        return self

    def close(self) -> None:
        """Close every client and face made here, then stop a store started by :meth:`start` (stopped even if a
        close failed)."""
        try:
            super().close()
        finally:
            portal, self._portal = self._portal, None
            if portal is not None:
                portal.run(self.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def astart(self) -> Self:
        """Start the store on the running event loop (what ``async with`` does)."""
        if self._loop is not None:
            raise RuntimeError("the in-process store is already started")
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self.server.run(), name="sskv-inprocess-emulator")
        ready = asyncio.ensure_future(self.server.wait_ready())
        done, _ = await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            ready.cancel()
            self._task.result()  # raises what stopped it
            raise RuntimeError("the in-process emulator stopped before it was ready")
        return self

    async def aclose(self) -> None:
        """Stop the store (on its own event loop); the clients made here are yours to close."""
        task, self._task = self._task, None
        self._loop = None
        if task is not None:
            self.server.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 5)

    async def __aenter__(self) -> Self:
        return await self.astart()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- clients --------------------------------------------------------------------------------------------------

    def _store_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the in-process store is not started")
        return self._loop

    @property
    def connection_factory(self) -> ConnectionFactory:
        """The ``connection_factory=`` that puts a client of your own (of either kind, on any loop) on this
        store; give it ``wall_clock_ms=statestore.clock.wall_ms`` too."""
        return bridged_factory(self.broker.connection, self._store_loop())

    def _clock_kwargs(self) -> dict[str, Any]:
        return {} if self._clock is None else {"wall_clock_ms": self._clock.wall_ms}

    def _face_kwargs(self) -> dict[str, Any]:
        return {} if self._clock is None else {"monotonic": self._clock.monotonic}

    def _client_kwargs(self) -> dict[str, Any]:
        if self._loop is not None and self._portal is None:
            raise RuntimeError("a store started by `async with` serves async clients (async_client()); start() it")
        return {"connection_factory": self.connection_factory, **self._clock_kwargs()}

    def _async_client_kwargs(self) -> dict[str, Any]:
        self._store_loop()
        if self._portal is None:  # started on the caller's loop: clients on that loop need no bridge
            return {"connection_factory": self.broker.connection, **self._clock_kwargs()}
        return self._client_kwargs()

    def fastapi_lifespan(self, **options: Any) -> Any:
        """A lifespan for ``FastAPI(lifespan=...)`` / ``Starlette(lifespan=...)`` whose app state store is this one:
        an async client opened on the app's loop (a ``TestClient``'s), in the test's namespace unless
        ``namespace=`` is given; ``options`` as for ``statestore_lifespan`` (needs the ``fastapi`` extra)."""
        from ..integrations.fastapi import statestore_lifespan

        options.setdefault("namespace", self.namespace)

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[Any]:
            client = self.async_client(connection_factory=self.connection_factory)  # the app's loop: bridged
            async with client, statestore_lifespan(client=client, **options)(app) as state:
                yield state

        return lifespan

    # -- time -----------------------------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the store's, the clients' and the faces' clocks forward by ``seconds``, at once.

        Keys whose ``PX`` ran out are gone when this returns (their watchers are sent the DELETE notifications,
        which reach a client a moment later, as from the real service); a lease that ran out is no longer held
        by its lock's clock, and a local cache's entries past ``max_staleness`` are revalidated on their next read.
        On a store started with ``async with`` they are gone once its loop runs again (``await asyncio.sleep(0)``).
        """
        self.clock.advance(seconds)

    def _clock_moved(self) -> None:
        loop = self._loop
        if loop is None:
            return
        if self._portal is not None:
            self._portal.run(self._expire_now())
            return
        try:
            on_its_loop = asyncio.get_running_loop() is loop
        except RuntimeError:  # no loop runs in this thread
            on_its_loop = False
        if on_its_loop:
            self.server.clock_jumped()
        else:
            loop.call_soon_threadsafe(self.server.clock_jumped)

    async def _expire_now(self) -> None:
        # the server's expiry timer slept for a real-time delay: wake it, and let it run until nothing due is left
        self.server.clock_jumped()
        for _ in range(_EXPIRY_TURNS):
            due = self.core.next_expiry()
            if due is None or due > self.clock.wall_ms():
                return
            await asyncio.sleep(0)
