"""The bound on a client's requests awaiting an answer (``max_in_flight=``), and background work's share of it.

Why a bound: docs/design/architecture.md, "The client's parts".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from ..errors import ConfigurationError, RequestTimeoutError

__all__ = [
    "BACKGROUND_BUSY",
    "BACKGROUND_IDLE",
    "BACKGROUND_QUIET",
    "BACKGROUND_RATIO",
    "DEFAULT_MAX_IN_FLIGHT",
    "InFlightGate",
    "background",
    "foreground",
]

#: Default bound on a client's requests awaiting an answer: well under what mosquitto's defaults queue per session
#: (20 in flight + 1,000 queued), so that one client's burst never fills the service's queue on its own, and far
#: above what a round trip needs to keep a loopback or LAN link busy (bench_rpc saturates at 64 in flight).
DEFAULT_MAX_IN_FLIGHT = 256
#: Background requests (see :func:`background`) in flight at once while the client's calls are in flight or
#: waiting, or were sent within the last :data:`BACKGROUND_QUIET` seconds (a caller that sends call after call is
#: busy between its calls too).
BACKGROUND_BUSY = 1
#: ... and, then, one background request is let through per this many calls let through (or one per quiet period
#: with none: never starved): background work takes about a ninth of the requests while calls are made (at 4, a
#: new key cost 1.6x its settled figure beside the STOPs a 100k-key read fill left behind: ``bench_wake --fill read``).
BACKGROUND_RATIO = 8
#: Background requests in flight at once while the client is quiet: enough to keep a loopback or LAN link busy, few
#: enough that the first call after a quiet moment finds at most this many ahead of it.
BACKGROUND_IDLE = 8
#: Seconds without a call after which the client is quiet; also the background's floor while it is busy (one
#: request per period). The timer runs only while background requests wait.
BACKGROUND_QUIET = 0.01

# Set in the tasks that do a library's background work (watch releases, revalidations, sweeps); tasks they start
# inherit it (asyncio copies the context into each new task).
_BACKGROUND: ContextVar[bool] = ContextVar("sskv_mapping_background", default=False)


@contextlib.contextmanager
def background() -> Iterator[None]:
    """Make the requests sent in this block, and by the tasks started in it, background work: they yield to the
    client's other calls (:class:`InFlightGate`). Enter and leave it in one task."""
    token = _BACKGROUND.set(True)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)


@contextlib.contextmanager
def foreground() -> Iterator[None]:
    """Undo :func:`background` for this block (and the tasks started in it): for work that must not wait behind
    background requests although background work started it -- a lock a sweep takes, whose lease renewals and
    release are due on time. Enter and leave it in one task."""
    token = _BACKGROUND.set(False)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)


class InFlightGate:
    """At most ``limit`` holders at a time; the others wait in arrival order -- and background work yields.

    A holder is a call unless it runs inside :func:`background`. Background requests take a bounded share: while
    calls are in flight or waiting, or were made within the last ``quiet`` seconds, at most
    :data:`BACKGROUND_BUSY` background request is in flight, and one is let through per :data:`BACKGROUND_RATIO`
    calls let through (or per ``quiet`` seconds without one); once the client is quiet, up to
    :data:`BACKGROUND_IDLE` at once. A call never queues behind background work: a freed slot goes to a waiting call
    first -- except when the whole window is full of calls and none is background: then one slot goes to background,
    so that it is never starved.

    Example:
        >>> gate = InFlightGate(1)
        >>> gate.try_enter(), gate.try_enter()
        (True, False)
        >>> gate.leave()
        >>> gate.in_flight
        0
    """

    __slots__ = (
        "_background_waiters",
        "_credit_mark",
        "_foreground_sent",
        "_quiet",
        "_tick",
        "_tick_mark",
        "_waiters",
        "background",
        "background_sent",
        "background_waited",
        "busy_background_peak",
        "in_flight",
        "limit",
        "quiet",
        "waited",
    )

    def __init__(self, limit: int, *, quiet: float = BACKGROUND_QUIET) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"max_in_flight must be a positive int, not {limit!r}")
        self.limit = limit
        #: holders now, foreground and background
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._background_waiters: deque[asyncio.Future[None]] = deque()
        #: how many callers had to wait for a slot (background ones too)
        self.waited = 0
        #: background holders now (part of ``in_flight``)
        self.background = 0
        #: background holders let through so far
        self.background_sent = 0
        #: background requests that waited for a slot (the foreground's share, the background bound, the limit)
        self.background_waited = 0
        #: the most background holders there were as one was let through while foreground calls were in flight
        #: or waiting: never over :data:`BACKGROUND_BUSY` (what the tests check)
        self.busy_background_peak = 0
        #: seconds without a call after which the client is quiet (:data:`BACKGROUND_QUIET`)
        self.quiet = quiet
        self._foreground_sent = 0  # calls let through so far
        self._credit_mark = 0  # ... as the last background request was let through (lowered by a tick: one may go)
        self._tick_mark = 0  # ... at the last tick
        self._quiet = True  # no call was made in the last tick's period (and none is in flight)
        self._tick: asyncio.TimerHandle | None = None  # armed while background requests wait

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot now (background requests not counted: see :attr:`background_waiting`)."""
        return len(self._waiters)

    @property
    def background_waiting(self) -> int:
        """Background requests waiting for a slot now (their share is taken, or the window is full)."""
        return len(self._background_waiters)

    def try_enter(self) -> bool:
        """Take a slot if one is free and nobody waits for one (no barging past the queue)."""
        if _BACKGROUND.get():
            if not self._background_waiters and self._background_room() > 0:
                self._let_background_in()
                return True
            return False
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            self._foreground_sent += 1
            return True
        return False

    def _background_room(self) -> int:
        """How many more background holders may enter now (ignoring its waiters' queue)."""
        if self.in_flight >= self.limit or self._waiters:
            return 0
        if self._quiet and self.in_flight == self.background and self._foreground_sent == self._tick_mark:
            return BACKGROUND_IDLE - self.background
        return 1 if self._share_due() else 0

    def _on_tick(self) -> None:
        """Every ``quiet`` seconds while background requests wait: is the client quiet (no call let through since
        the last tick, none in flight)? Either way one background request may go now (the floor)."""
        self._tick = None
        self._quiet = self.in_flight == self.background and self._foreground_sent == self._tick_mark
        self._tick_mark = self._foreground_sent
        self._credit_mark = min(self._credit_mark, self._foreground_sent - BACKGROUND_RATIO)  # the floor: one may go
        self._admit()
        self._arm()

    def _arm(self) -> None:
        if self._background_waiters and self._tick is None:
            self._tick = asyncio.get_running_loop().call_later(self.quiet, self._on_tick)

    def _let_background_in(self) -> None:
        self.in_flight += 1
        self.background += 1
        self.background_sent += 1
        self._credit_mark = self._foreground_sent
        if (self.in_flight > self.background or self._waiters) and self.background > self.busy_background_peak:
            self.busy_background_peak = self.background

    async def enter(self, deadline: float | None) -> bool:
        """Wait for a slot until ``deadline`` (loop time; ``None``: no limit). ``False`` if the deadline passed
        first (no slot is held then). A cancelled waiter holds no slot either."""
        if self.try_enter():
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if _BACKGROUND.get():
            self._background_waiters.append(fut)
            self.background_waited += 1
            self._arm()
        else:
            self._waiters.append(fut)
        self.waited += 1
        timer = None if deadline is None else loop.call_at(deadline, _give_up, fut)
        try:
            await fut
            return True
        except _SlotTimeout:
            self._forget(fut)
            return False
        except BaseException:
            self._forget(fut)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.leave()  # the slot was handed over just as we were cancelled: pass it on
            raise
        finally:
            if timer is not None:
                timer.cancel()

    async def wait(self, deadline: float | None, what: Callable[[], str]) -> None:
        """:meth:`enter`, or :class:`RequestTimeoutError` (``what()``, then the load) when the deadline passes."""
        if not await self.enter(deadline):
            raise RequestTimeoutError(
                f"{what()}: {self.in_flight} requests in flight (max_in_flight={self.limit}); nothing was sent"
            )

    def _forget(self, fut: asyncio.Future[None]) -> None:
        for waiters in (self._waiters, self._background_waiters):
            with contextlib.suppress(ValueError):  # not there: already handed a slot (popped by _admit)
                waiters.remove(fut)

    def leave(self) -> None:
        """Give a slot back (in the task that took it): handed to the first foreground waiter still waiting, or to
        background waiters as their share allows, else freed."""
        self.in_flight -= 1
        if _BACKGROUND.get():
            self.background -= 1
        if self._waiters or self._background_waiters:
            self._admit()

    def _admit(self) -> None:
        """Hand the free slots to waiters: calls first, then background within its share -- except that background
        with nothing in flight and its share due goes before waiting calls (the window full of calls: never starved)."""
        while self.in_flight < self.limit:
            if self._background_waiters and self._waiters and self._share_due() and _wake(self._background_waiters):
                self._let_background_in()
            elif self._waiters and _wake(self._waiters):
                self.in_flight += 1
                self._foreground_sent += 1
            elif self._background_waiters and self._background_room() > 0 and _wake(self._background_waiters):
                self._let_background_in()
            else:
                return

    def _share_due(self) -> bool:
        """Background has nothing in flight and its share is due (enough calls went, or a quiet period)."""
        return self.background < BACKGROUND_BUSY and self._foreground_sent - self._credit_mark >= BACKGROUND_RATIO


def _wake(waiters: deque[asyncio.Future[None]]) -> bool:
    """Give a slot to the first waiter still waiting (dropping the ones that gave up); False if none is left."""
    while waiters:
        fut = waiters.popleft()
        if not fut.done():
            fut.set_result(None)
            return True
    return False


class _SlotTimeout(Exception):
    """The deadline passed while waiting for a slot."""


def _give_up(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(_SlotTimeout())
