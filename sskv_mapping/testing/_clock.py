"""One fake clock for a test: the store's wall clock, the clients' clocks and the faces' monotonic clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["FakeClock"]


class FakeClock:
    """A wall clock and a monotonic clock that stand still until :meth:`advance` moves them, together.

    Args:
        wall_ms: where the wall clock starts (milliseconds since the epoch; default: now).
        monotonic: where the monotonic clock starts (seconds; default: ``time.monotonic()`` now).

    Example:
        >>> clock = FakeClock(wall_ms=1_000, monotonic=5.0)
        >>> clock.advance(2.5)
        >>> clock.wall_ms(), clock.monotonic()
        (3500, 7.5)
    """

    def __init__(self, *, wall_ms: int | None = None, monotonic: float | None = None) -> None:
        self._lock = threading.Lock()
        self._wall_ms = time.time_ns() // 1_000_000 if wall_ms is None else int(wall_ms)
        self._monotonic = time.monotonic() if monotonic is None else float(monotonic)
        self._listeners: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<FakeClock wall_ms={self._wall_ms} monotonic={self._monotonic:.3f}>"

    def wall_ms(self) -> int:
        """The wall clock, milliseconds since the epoch (what ``now_ms=`` and a client's ``wall_clock_ms=`` take)."""
        return self._wall_ms

    def monotonic(self) -> float:
        """The monotonic clock, seconds (what a lock's, a dict's or a cache's ``monotonic=`` takes)."""
        return self._monotonic

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (not backwards: a monotonic clock never does), then tell the
        listeners (the in-process store looks at its expiry timer again)."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward: advance({seconds!r})")
        with self._lock:
            self._monotonic += seconds
            self._wall_ms += round(seconds * 1000)
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def on_advance(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every :meth:`advance`."""
        with self._lock:
            self._listeners.append(listener)
