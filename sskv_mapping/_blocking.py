"""The one background event-loop thread behind every blocking twin.

I/O is written once, async; each blocking class runs its async twin on this loop (docs/design/architecture.md).
Codec work a call hands back (``in_caller_thread``) runs in the thread waiting for that call, not on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from ._fork import in_child_after_fork
from .errors import ClientStateError

__all__ = ["BlockingTwin", "LoopThread", "SharesCore", "get_loop_thread", "in_caller_thread"]

T = TypeVar("T")
C = TypeVar("C")

#: What a call on a face made before ``os.fork()`` says in the child: its connection and loop stay the parent's.
FORKED = (
    "this object was made before os.fork(), in the parent process: its connection and event-loop thread stay "
    "there (its local cache was emptied in this child); connect a new client, dict or cache in the child"
)


class _Caller:
    """The thread blocked in :meth:`LoopThread.run`, able to run work for its call (a codec's decode) while it waits,
    so the loop thread does none of it. Work handed over once the call is over is done on the loop, as asked."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open = True

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job`` for the waiting thread; ``False`` if the call is over (the job was not queued)."""
        with self._lock:
            if self._open:
                self._jobs.put(job)
            return self._open

    def finished(self, _: object = None) -> None:
        self._jobs.put(None)

    def serve(self) -> None:
        """Run queued jobs until the call is finished; then nothing more is queued, and what is left (queued by a task
        the call started, as it ended; or behind a KeyboardInterrupt) goes back to the loop rather than wait forever."""
        jobs = self._jobs
        try:
            while (job := jobs.get()) is not None:
                job()
        finally:
            with self._lock:
                self._open = False
            while not jobs.empty():
                job = jobs.get_nowait()
                if job is not None:
                    self._loop.call_soon_threadsafe(job)


class _CallerLoop:
    """The event loop awaiting :meth:`LoopThread.run_async`: work for its call runs on it (the caller's own loop, as
    an async face's would), while the call lasts."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._open = True

    def submit(self, job: Callable[[], None]) -> bool:
        with self._lock:
            if not self._open:
                return False
            try:
                self._loop.call_soon_threadsafe(job)
            except RuntimeError:  # that loop is closed
                return False
            return True

    def close(self) -> None:
        with self._lock:
            self._open = False


_caller: contextvars.ContextVar[_Caller | _CallerLoop | None] = contextvars.ContextVar("sskv_caller", default=None)


async def in_caller_thread(fn: Callable[[], T]) -> T:
    """``fn()`` run by the caller of this call -- the thread blocked in :meth:`LoopThread.run`, or the event loop
    awaiting :meth:`LoopThread.run_async` -- the loop thread meanwhile free for others; run here when the call came
    from no such caller (an async face on its own loop, a background task, a call that is over)."""
    caller = _caller.get()
    if caller is None:
        return fn()
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def deliver(ok: bool, outcome: Any) -> None:
        if fut.done():  # the call was cancelled meanwhile
            return
        if ok:
            fut.set_result(outcome)
        else:
            fut.set_exception(outcome)

    def job() -> None:
        try:
            outcome: Any = fn()
        except Exception as exc:
            loop.call_soon_threadsafe(deliver, False, exc)
        except BaseException:  # a KeyboardInterrupt: raised in the waiting thread, its call cancelled
            loop.call_soon_threadsafe(fut.cancel)
            raise
        else:
            loop.call_soon_threadsafe(deliver, True, outcome)

    if not caller.submit(job):
        return fn()
    return await fut


async def _as_caller(caller: _Caller | _CallerLoop, coro: Coroutine[Any, Any, T]) -> T:
    _caller.set(caller)  # this task's context only (and that of the tasks it starts; see in_caller_thread)
    return await coro


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
        caller = _Caller(self.loop)
        fut = asyncio.run_coroutine_threadsafe(_as_caller(caller, coro), self.loop)
        fut.add_done_callback(caller.finished)
        try:
            caller.serve()
            return fut.result()
        except concurrent.futures.CancelledError:
            raise ClientStateError("the call was cancelled on the event-loop thread") from None
        except BaseException:  # a KeyboardInterrupt while waiting, or raised by work done here (a codec's)
            fut.cancel()
            raise

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` running on this loop, from any event loop, without blocking a thread.

        On the loop thread itself it is simply awaited; elsewhere the caller's loop waits on a future that
        this loop completes (how async framework code uses a client that lives on the background loop).
        """
        if self.in_loop_thread():
            return await coro
        caller = _CallerLoop(asyncio.get_running_loop())
        fut = asyncio.run_coroutine_threadsafe(_as_caller(caller, coro), self.loop)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        finally:
            caller.close()

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
