"""The reads of a local cache in flight: a ticket per read, and whether its result may still be stored.

Sans-IO; its cache calls it under the cache's lock. Part of ``sskv_mapping.local_cache``.
"""

from __future__ import annotations

import enum
from types import TracebackType
from typing import Protocol

from ..errors import ConfigurationError

__all__ = ["ReadTicket", "TicketOwner"]


class TicketOwner(Protocol):
    """The cache that issues tickets (a :class:`~sskv_mapping.local_cache.LocalCache`): a ticket's ``with`` block
    abandons it there."""

    def abandon(self, ticket: ReadTicket) -> None: ...


class ReadTicket:
    """Proof that a read of ``key`` started at a given moment; see :meth:`LocalCache.begin_read`.

    A ticket is closed exactly once, by :meth:`LocalCache.finish_read` or :meth:`LocalCache.abandon`;
    closing it again is a no-op. Used as a context manager it is abandoned on exit unless finished, so an
    exception or a cancellation cannot leak it.

    Example:
        >>> cache: LocalCache[bytes] = LocalCache(maxsize=10)
        >>> with cache.begin_read(b"k") as ticket:
        ...     value = b"v"  # the network GET goes here
        ...     cache.finish_read(ticket, CachedEntry(value, value, None))
        True
        >>> cache.reads_in_flight
        0
    """

    __slots__ = ("_open", "changes", "epoch", "key", "owner", "stores")

    def __init__(self, cache: TicketOwner, key: bytes, changes: int, stores: int, epoch: int) -> None:
        #: the cache that issued the ticket (only it may close it)
        self.owner = cache
        self.key = key
        #: the key's change and store counts and the cache's epoch when the read began
        self.changes = changes
        self.stores = stores
        self.epoch = epoch
        self._open = True

    @property
    def closed(self) -> bool:
        """Whether the ticket was finished or abandoned."""
        return not self._open

    def close(self) -> bool:
        """Close the ticket (its owner does, under its lock); whether it was still open."""
        was_open, self._open = self._open, False
        return was_open

    def __enter__(self) -> ReadTicket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._open:
            self.owner.abandon(self)

    def __repr__(self) -> str:
        return f"<ReadTicket key={self.key[:40]!r} {'closed' if self.closed else 'open'}>"


class _Flight:
    """Book-keeping for the open read tickets of one key; removed when the last one closes."""

    __slots__ = ("changes", "count", "stores")

    def __init__(self) -> None:
        self.count = 0  # open tickets
        self.changes = 0  # events, writes and invalidations of the key since the first ticket opened
        self.stores = 0  # read results stored since the first ticket opened


class _Verdict(enum.Enum):
    """What :meth:`_InFlightReads.finish` says of a read's result."""

    #: the ticket was closed already, or the key changed (or the cache was emptied) since the read began
    REFUSE = "refuse"
    #: another read of the key stored its result meanwhile: only versions can order the two
    RACED = "raced"
    #: nothing happened to the key since the read began: anything held now was there before the GET was sent
    UNDISTURBED = "undisturbed"


class _InFlightReads:
    """The reads of one :class:`LocalCache` that are in flight, and whether each one's result may still be stored.

    A read opens a :class:`ReadTicket` (:meth:`begin`) before its GET is sent. Per key it counts the open tickets,
    the changes of the key (:meth:`changed`: an event, a write, an invalidation) and the read results stored
    (:meth:`stored`) since the first of them opened; a ticket remembers both counts and the epoch, which
    :meth:`new_epoch` bumps when the whole cache is emptied (clear, disconnect, reconnect). :meth:`finish` compares
    them and gives a :class:`_Verdict`; what to store is the cache's business. A key's book-keeping goes when its
    last ticket closes, so memory follows the reads in flight, not the keys ever read.

    Not thread-safe: its cache calls it under the cache's lock. ``owner`` is that cache: the tickets name it, so
    that a ticket's ``with`` block abandons it there, and a ticket of another cache is refused.
    """

    __slots__ = ("_epoch", "_flights", "_owner")

    def __init__(self, owner: TicketOwner) -> None:
        self._owner = owner
        self._flights: dict[bytes, _Flight] = {}
        self._epoch = 0

    def begin(self, key: bytes) -> ReadTicket:
        """Open a ticket for a read of ``key`` that is about to be sent."""
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = _Flight()
        flight.count += 1
        return ReadTicket(self._owner, key, flight.changes, flight.stores, self._epoch)

    def finish(self, ticket: ReadTicket) -> _Verdict:
        """Close ``ticket`` (a result arrived) and say whether its result may be stored."""
        self._check(ticket)
        if not ticket.close():
            return _Verdict.REFUSE
        flight = self._flights[ticket.key]
        changed = flight.changes != ticket.changes or ticket.epoch != self._epoch
        raced = flight.stores != ticket.stores
        self._release(ticket.key, flight)
        if changed:
            return _Verdict.REFUSE
        return _Verdict.RACED if raced else _Verdict.UNDISTURBED

    def abandon(self, ticket: ReadTicket) -> None:
        """Close ``ticket`` without a result (the read failed or was cancelled); idempotent."""
        self._check(ticket)
        if ticket.close():
            self._release(ticket.key, self._flights[ticket.key])

    def changed(self, key: bytes) -> None:
        """``key`` changed (an event, a write, an invalidation): the reads of it in flight must not be stored."""
        flight = self._flights.get(key)
        if flight is not None:
            flight.changes += 1

    def stored(self, key: bytes) -> None:
        """A read's result for ``key`` was stored: the other reads of it in flight raced with that one."""
        flight = self._flights.get(key)
        if flight is not None:
            flight.stores += 1

    def new_epoch(self) -> None:
        """The cache was emptied (clear, disconnect, reconnect): no read begun before may be stored."""
        self._epoch += 1

    @property
    def tickets(self) -> int:
        """How many tickets are open."""
        return sum(f.count for f in self._flights.values())

    def __contains__(self, key: object) -> bool:
        """Whether a read of ``key`` is in flight."""
        return key in self._flights

    def __len__(self) -> int:
        """How many keys have a read in flight (each keeps its book-keeping until its last ticket closes)."""
        return len(self._flights)

    def _release(self, key: bytes, flight: _Flight) -> None:
        flight.count -= 1
        if flight.count == 0:
            del self._flights[key]

    def _check(self, ticket: ReadTicket) -> None:
        if ticket.owner is not self._owner:
            raise ConfigurationError("this read ticket belongs to another LocalCache")
