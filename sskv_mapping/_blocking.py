"""The one background event-loop thread behind every blocking twin.

I/O is written once, async; each blocking class runs its async twin on this loop (docs/design/architecture.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

from ._fork import in_child_after_fork
from .errors import ClientStateError

__all__ = ["BlockingTwin", "LoopThread", "SharesCore", "get_loop_thread"]

T = TypeVar("T")
C = TypeVar("C")

#: What a call on a face made before ``os.fork()`` says in the child: its connection and loop stay the parent's.
FORKED = (
    "this object was made before os.fork(), in the parent process: its connection and event-loop thread stay "
    "there (its local cache was emptied in this child); connect a new client, dict or cache in the child"
)


class LoopThread:
    """An asyncio event loop running forever on a daemon thread."""

    def __init__(self, name: str = "sskv-loop") -> None:
        self._ready = threading.Event()
        self._stopping = False
        self._pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        while not self._stopping:
            try:
                self.loop.run_forever()
            except BaseException:
                # A KeyboardInterrupt or SystemExit raised in a task (a codec's loads, a callback) leaves
                # run_forever after the task has recorded it: going on delivers it to that task's caller (its
                # done callbacks are still queued), and every other user of the process-wide loop keeps it.
                continue

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and block until it finishes; its exception is re-raised here."""
        if self.in_loop_thread():
            coro.close()
            raise ClientStateError(
                "a blocking sskv_mapping call was made from its own event-loop thread (it would deadlock); "
                "use the async API there"
            )
        if not self._thread.is_alive():
            coro.close()
            if os.getpid() != self._pid:
                raise ClientStateError(FORKED)
            raise ClientStateError("the sskv_mapping event-loop thread has stopped")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            raise ClientStateError("the call was cancelled on the event-loop thread") from None
        except KeyboardInterrupt:
            fut.cancel()
            raise

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` running on this loop, from any event loop, without blocking a thread.

        On the loop thread itself it is simply awaited; elsewhere the caller's loop waits on a future that
        this loop completes (how async framework code uses a client that lives on the background loop).
        """
        if self.in_loop_thread():
            return await coro
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()
            raise

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stopping = True
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)


_lock = threading.Lock()
_instance: LoopThread | None = None


def get_loop_thread() -> LoopThread:
    """The process-wide loop thread, started on first use."""
    global _instance
    inst = _instance
    if inst is not None and inst.thread.is_alive():
        return inst
    with _lock:
        if _instance is None or not _instance.thread.is_alive():
            _instance = LoopThread()
        return _instance


def _after_fork_in_child() -> None:
    global _instance, _lock
    # The parent's loop thread does not exist in the child; its loop object must not be reused.
    _instance = None
    _lock = threading.Lock()


in_child_after_fork(_after_fork_in_child)


class BlockingTwin:
    """Base of every blocking facade (``StateStoreClient``, ``StateStoreDict``, ``StateStoreCache``, ``LeasedLock``,
    ``LeaderElection``, ``KeyWatch``): :meth:`_run` runs one coroutine of the async twin on the process-wide loop
    thread and returns its result, typed (``self._run(self.async_x.get(k))`` is an ``Entry | None`` for mypy).

    A facade holds its async twin and calls its public API; what is done in the calling thread (a local-cache hit,
    encoding a value) goes through the private core both twins share (:class:`SharesCore`).
    """

    def __init__(self) -> None:
        self._portal = get_loop_thread()

    @property
    def portal(self) -> LoopThread:
        """The loop thread the async twin lives on."""
        return self._portal

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._portal.run(coro)


class SharesCore(Generic[C]):
    """Base of both twins of a pair whose state and non-async steps live in one private core object (httpx's
    ``BaseClient`` idea): the async twin makes the core; the blocking one shares it (:meth:`_share_core`), so what it
    does in the calling thread (serve a local-cache hit, encode a value, count) needs no public method on the async
    class, and no logic of its own."""

    _core: C

    def _share_core(self, twin: SharesCore[C]) -> None:
        """Use ``twin``'s core: the blocking twin calls this with the async twin it drives."""
        self._core = twin._core
