"""The whole state store in this process (the real server and core on the loopback broker), for fast tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from .._protocol.hlc import system_clock_ms
from .._transport.loopback import LoopbackBroker
from .._transport.settings import ConnectionSettings
from ..client._client import AsyncStateStoreClient
from .core import EmulatorCore
from .scan import DEFAULT_SCAN_PAGE_SIZE
from .server import EmulatorServer

__all__ = ["InProcessStateStore"]


class InProcessStateStore:
    """A loopback broker plus the emulator serving on it, started by ``async with``.

    ``scan=False`` makes it an older service without SCAN; ``scan_page_size`` and ``scan_empty_pages`` shape its
    SCAN pages (see :class:`~sskv_mapping.emulator.core.EmulatorCore`)."""

    def __init__(
        self,
        *,
        now_ms: Callable[[], int] = system_clock_ms,
        max_keys: int | None = None,
        scan: bool = True,
        scan_page_size: int = DEFAULT_SCAN_PAGE_SIZE,
        scan_empty_pages: int = 0,
    ) -> None:
        self.broker = LoopbackBroker()
        self.core = EmulatorCore(
            now_ms=now_ms,
            max_keys=max_keys,
            scan=scan,
            scan_page_size=scan_page_size,
            scan_empty_pages=scan_empty_pages,
        )
        self.server = EmulatorServer(
            ConnectionSettings(client_id="sskv-emulator"),
            self.core,
            connection_factory=self.broker.connection,
            now_ms=now_ms,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> InProcessStateStore:
        self._task = asyncio.get_running_loop().create_task(self.server.run(), name="sskv-inprocess-emulator")
        ready = asyncio.ensure_future(self.server.wait_ready())
        done, _ = await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            ready.cancel()
            self._task.result()  # raises what stopped it
            raise RuntimeError("the in-process emulator stopped before it was ready")
        return self

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            self.server.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 5)

    async def __aenter__(self) -> InProcessStateStore:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def client(self, **kwargs: Any) -> AsyncStateStoreClient:
        """An :class:`AsyncStateStoreClient` wired to this store (not yet connected; use ``async with``)."""
        kwargs.setdefault("connection_factory", self.broker.connection)
        return AsyncStateStoreClient(**kwargs)
