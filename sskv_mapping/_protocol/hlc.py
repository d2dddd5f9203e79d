"""Hybrid logical clocks, the versions and fencing tokens of the state store (docs/design/protocol.md §5)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ClockDriftError, ProtocolError

__all__ = ["MAX_DRIFT_MS", "Clock", "HlcClock", "HybridLogicalClock", "system_clock_ms", "trusted"]

#: The largest distance (ms) an HLC may run ahead of the wall clock. Exactly this much is allowed.
MAX_DRIFT_MS = 60_000
_MAX_U64 = 2**64 - 1
_MAX_DIGITS = 20

#: A clock is a callable giving the wall time in whole milliseconds since the epoch.
Clock = Callable[[], int]


#: Linux's CLOCK_REALTIME_COARSE (linux/time.h; the time module names no constant for it): the wall clock at the
#: kernel tick's resolution (1-4 ms), which neither time-machine nor freezegun patch (docs/testing.md, "Time travel").
_REALTIME_COARSE = 5
_clock_gettime_ns = time.clock_gettime_ns if hasattr(time, "clock_gettime_ns") else None


def _coarse_wall_clock_works() -> bool:
    if _clock_gettime_ns is None or not sys.platform.startswith("linux"):
        return False
    try:
        resolution = time.clock_getres(_REALTIME_COARSE)
        now_ns = _clock_gettime_ns(_REALTIME_COARSE)
    except OSError:
        return False
    return resolution <= 0.02 and now_ns > 1_577_836_800 * 10**9  # a wall clock, after 2020-01-01


if _clock_gettime_ns is not None and _coarse_wall_clock_works():
    _gettime_ns = _clock_gettime_ns

    def system_clock_ms() -> int:
        """The wall clock in ms since the epoch, as the service and the emulator process read it: a test's time
        travel (time-machine, freezegun) moves ``time.time`` in its own process only, and a request stamped with
        a moved clock is refused as "too far in the future"."""
        return _gettime_ns(_REALTIME_COARSE) // 1_000_000

else:  # not Linux: time.time_ns, which time-machine and freezegun move (docs/testing.md, "Time travel")

    def system_clock_ms() -> int:
        """The wall clock in ms since the epoch (``time.time_ns``)."""
        return time.time_ns() // 1_000_000


def _uint(raw: str, what: str, text: str) -> int:
    # one leading '+' is accepted, as the Rust and Go SDKs' integer parsing does; formatting never writes it
    if raw.startswith("+"):
        raw = raw[1:]
    if not raw or len(raw) > _MAX_DIGITS or not (raw.isascii() and raw.isdigit()):
        raise ProtocolError(f"malformed HLC {what} in {text[:80]!r}")
    value = int(raw)
    if value > _MAX_U64:
        raise ProtocolError(f"HLC {what} out of range in {text[:80]!r}")
    return value


@dataclass(frozen=True, slots=True)
class HybridLogicalClock:
    """An immutable HLC value: a version of a key, or a fencing token.

    Example:
        >>> v = HybridLogicalClock.parse("1696374425000:1:StateStore")
        >>> str(v)
        '001696374425000:00001:StateStore'
        >>> v < HybridLogicalClock(1696374425000, 2, "StateStore")
        True
    """

    wall_ms: int
    counter: int
    node_id: str

    def __post_init__(self) -> None:
        if not (0 <= self.wall_ms <= _MAX_U64 and 0 <= self.counter <= _MAX_U64):
            raise ValueError("HLC wall time and counter must be unsigned 64-bit integers")
        if ":" in self.node_id:
            raise ValueError("an HLC node id may not contain ':'")

    @classmethod
    def parse(cls, text: str | bytes) -> HybridLogicalClock:
        """Parse ``wall:counter:node``; raises :class:`ProtocolError` on anything else."""
        if isinstance(text, bytes | bytearray | memoryview):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProtocolError("HLC is not UTF-8") from exc
        parts = text.split(":")
        if len(parts) != 3:
            raise ProtocolError(f"malformed HLC {text[:80]!r}: expected wall:counter:node")
        w, c, node = parts
        # the usual form (every request's __ts): plain ASCII digits and an ASCII node id, taken in one test; anything
        # else (a '+', a non-ASCII id, an error to report) goes the checking way below, with the same result
        if (
            w.isdigit()
            and c.isdigit()
            and w.isascii()
            and c.isascii()
            and node.isascii()
            and len(w) <= _MAX_DIGITS
            and len(c) <= _MAX_DIGITS
        ):
            wall, counter = int(w), int(c)
            if wall <= _MAX_U64 and counter <= _MAX_U64:
                return trusted(cls, wall, counter, node)
        wall = _uint(parts[0], "wall time", text)
        counter = _uint(parts[1], "counter", text)
        try:  # a str may carry lone surrogates (argv, JSON "\ud800"); the HLC goes on the wire as UTF-8
            parts[2].encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ProtocolError(f"HLC node id is not valid UTF-8 text in {text[:80]!r}") from exc
        return cls(wall, counter, parts[2])

    def __str__(self) -> str:
        return f"{self.wall_ms:015d}:{self.counter:05d}:{self.node_id}"

    def encode(self) -> str:
        """The service's text form, ``<wall ms, 15 digits>:<counter, 5 digits>:<node id>``."""
        return str(self)

    def sort_key(self) -> tuple[int, int, bytes]:
        """A tuple ordering clocks as the service does: wall time, then counter, then node id."""
        return (self.wall_ms, self.counter, self.node_id.encode("utf-8"))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, HybridLogicalClock):
            return NotImplemented  # so that comparing with another type is a TypeError
        return self.sort_key() < other.sort_key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, HybridLogicalClock):
            return NotImplemented  # so that comparing with another type is a TypeError
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, HybridLogicalClock):
            return NotImplemented  # so that comparing with another type is a TypeError
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, HybridLogicalClock):
            return NotImplemented  # so that comparing with another type is a TypeError
        return self.sort_key() >= other.sort_key()

    # -- the SDK clock rules, as pure functions returning the next value --------------------------------

    def ticked(self, now_ms: int, max_drift_ms: int = MAX_DRIFT_MS) -> HybridLogicalClock:
        """The value to send next: ``(now, 0)`` if the wall clock moved on, else counter + 1."""
        if now_ms > self.wall_ms:
            # an int wall clock (checked once here, not by __post_init__): what every request's tick makes
            if type(now_ms) is int and now_ms <= _MAX_U64:
                nxt = trusted(HybridLogicalClock, now_ms, 0, self.node_id)
            else:
                nxt = HybridLogicalClock(now_ms, 0, self.node_id)
        else:
            nxt = trusted(HybridLogicalClock, self.wall_ms, _next(self.counter), self.node_id)
        if nxt.wall_ms - now_ms > max_drift_ms:
            _check_drift(nxt, now_ms, max_drift_ms)
        return nxt

    def merged(self, other: HybridLogicalClock, now_ms: int, max_drift_ms: int = MAX_DRIFT_MS) -> HybridLogicalClock:
        """The value after receiving ``other`` (a response or notification ``__ts``)."""
        if other.node_id == self.node_id:
            return self
        if now_ms > self.wall_ms and now_ms > other.wall_ms:
            if type(now_ms) is int and now_ms <= _MAX_U64:
                nxt = trusted(HybridLogicalClock, now_ms, 0, self.node_id)
            else:
                nxt = HybridLogicalClock(now_ms, 0, self.node_id)
        elif self.wall_ms == other.wall_ms:
            nxt = trusted(HybridLogicalClock, self.wall_ms, _next(max(self.counter, other.counter)), self.node_id)
        elif self.wall_ms > other.wall_ms:
            nxt = trusted(HybridLogicalClock, self.wall_ms, _next(self.counter), self.node_id)
        else:
            nxt = trusted(HybridLogicalClock, other.wall_ms, _next(other.counter), self.node_id)
        _check_drift(nxt, now_ms, max_drift_ms)
        return nxt


_new_object = object.__new__
# the slots' own setters (a frozen dataclass refuses setattr; these are what object.__setattr__ ends in, without
# its name lookup and argument parsing)
_set_wall = HybridLogicalClock.__dict__["wall_ms"].__set__
_set_counter = HybridLogicalClock.__dict__["counter"].__set__
_set_node = HybridLogicalClock.__dict__["node_id"].__set__


def trusted(cls: type[HybridLogicalClock], wall_ms: int, counter: int, node_id: str) -> HybridLogicalClock:
    """``cls(wall_ms, counter, node_id)`` for values the caller knows valid (unsigned 64-bit numbers, an id without
    ``':'``: those of a clock, or just parsed), without ``__post_init__``'s checks: the emulator makes one or two
    per request."""
    value = _new_object(cls)
    _set_wall(value, wall_ms)
    _set_counter(value, counter)
    _set_node(value, node_id)
    return value


def _next(counter: int) -> int:
    # A received __ts may carry the largest counter; +1 would fail in __post_init__ with a ValueError.
    if counter >= _MAX_U64:
        raise ClockDriftError("hybrid logical clock counter overflow; the clock cannot advance")
    return counter + 1


def _check_drift(value: HybridLogicalClock, now_ms: int, max_drift_ms: int) -> None:
    if value.wall_ms - now_ms > max_drift_ms:
        raise ClockDriftError(
            f"hybrid logical clock {value} is {value.wall_ms - now_ms} ms ahead of the wall clock "
            f"(at most {max_drift_ms} ms allowed); ensure the system clocks are synchronized"
        )


class HlcClock:
    """A node's running hybrid logical clock (thread-safe), with an injectable wall clock.

    Example:
        >>> clock = HlcClock("my-client", now_ms=lambda: 1_000)
        >>> str(clock.tick())
        '000000000001000:00000:my-client'
        >>> str(clock.tick())
        '000000000001000:00001:my-client'
    """

    def __init__(self, node_id: str, now_ms: Clock = system_clock_ms, max_drift_ms: int = MAX_DRIFT_MS):
        self._now = now_ms
        self._max_drift = max_drift_ms
        self._node = HybridLogicalClock(0, 0, node_id).node_id  # (checked: no ':')
        # the value as two ints (a request's tick and a response's merge change them, no object made); the
        # HybridLogicalClock of them is made when asked for (``_value``: None until then)
        self._wall = 0
        self._counter = 0
        self._value: HybridLogicalClock | None = None
        self._lock = threading.Lock()

    @property
    def node_id(self) -> str:
        return self._node

    @property
    def current(self) -> HybridLogicalClock:
        with self._lock:
            return self._current()

    def _current(self) -> HybridLogicalClock:
        value = self._value
        if value is None:
            value = self._value = trusted(HybridLogicalClock, self._wall, self._counter, self._node)
        return value

    def _store(self, value: HybridLogicalClock) -> HybridLogicalClock:
        self._wall, self._counter, self._value = value.wall_ms, value.counter, value
        return value

    def now_ms(self) -> int:
        return self._now()

    def tick(self) -> HybridLogicalClock:
        """Advance for a send and return the new value; on drift error the clock is unchanged."""
        with self._lock:
            self._advance()
            return self._current()

    def tick_text(self) -> str:
        """:meth:`tick`, as its text (``str(self.tick())``) without the value object: one per request sent."""
        with self._lock:
            # _advance's usual cases, inline (one per request): the wall clock moved on, or the counter goes up
            now = self._now()
            wall = self._wall
            if now > wall:
                if type(now) is int and now <= _MAX_U64 and self._max_drift >= 0:
                    self._wall, self._counter, self._value = now, 0, None
                    return f"{now:015d}:00000:{self._node}"
            elif self._counter < _MAX_U64 and wall - now <= self._max_drift:
                counter = self._counter = self._counter + 1
                self._value = None
                return f"{wall:015d}:{counter:05d}:{self._node}"
            self._store(self._current().ticked(now, self._max_drift))
            return f"{self._wall:015d}:{self._counter:05d}:{self._node}"

    def _advance(self) -> None:
        # HybridLogicalClock.ticked's arithmetic on the ints; what is not the usual case (a wall clock that is not
        # an int, an overflow, a drift error to raise) goes through ticked itself, with its exact result
        now = self._now()
        wall = self._wall
        if now > wall:
            if type(now) is int and now <= _MAX_U64 and self._max_drift >= 0:
                self._wall, self._counter, self._value = now, 0, None
                return
        elif self._counter < _MAX_U64 and wall - now <= self._max_drift:
            self._counter += 1
            self._value = None
            return
        self._store(self._current().ticked(now, self._max_drift))

    def update(self, other: HybridLogicalClock) -> HybridLogicalClock:
        """Merge a received HLC and return the new value; on drift error the clock is unchanged."""
        with self._lock:
            self._merge(other)
            return self._current()

    def merge(self, other: HybridLogicalClock) -> None:
        """:meth:`update` without making the new value: one per response received."""
        with self._lock:
            self._merge(other)

    def _merge(self, other: HybridLogicalClock) -> None:
        # HybridLogicalClock.merged's arithmetic on the ints (the usual cases); anything else through merged
        if other.node_id == self._node:
            return
        now = self._now()
        wall, counter = self._wall, self._counter
        other_wall = other.wall_ms
        if now > wall and now > other_wall:
            if type(now) is int and now <= _MAX_U64 and self._max_drift >= 0:
                self._wall, self._counter, self._value = now, 0, None
                return
        else:
            if wall == other_wall:
                other_counter = other.counter
                counter = counter if counter > other_counter else other_counter
            elif wall < other_wall:
                wall, counter = other_wall, other.counter
            if counter < _MAX_U64 and wall - now <= self._max_drift:
                self._wall, self._counter, self._value = wall, counter + 1, None
                return
        self._store(self._current().merged(other, now, self._max_drift))
