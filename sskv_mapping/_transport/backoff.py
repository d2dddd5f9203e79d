"""The one exponential backoff (reconnects, watch restores, resends); pure, the caller sleeps."""

from __future__ import annotations

import random
from collections.abc import Callable

from ..errors import ConfigurationError

__all__ = ["Backoff"]


class Backoff:
    """Delays that double from ``initial`` up to ``cap``; with ``jitter`` (full jitter), each is drawn from ``[0, d]``.

    Full jitter keeps a crowd of clients that lost the same broker from coming back in lock step (and two processes
    that share a client id from meeting again); a resend to a service that is restarting needs no jitter (it is one
    client's own retry).

    Example:
        >>> b = Backoff(0.05, 0.2, jitter=False)
        >>> [b.next() for _ in range(4)]
        [0.05, 0.1, 0.2, 0.2]
    """

    __slots__ = ("_cap", "_delay", "_initial", "_jitter", "_random")

    def __init__(
        self,
        initial: float,
        cap: float,
        *,
        jitter: bool = True,
        random_fraction: Callable[[], float] = random.random,
    ) -> None:
        if not (0 < initial <= cap):
            raise ConfigurationError(f"need 0 < initial <= cap for a backoff, not {initial!r}, {cap!r}")
        self._initial = initial
        self._cap = cap
        self._jitter = jitter
        self._random = random_fraction
        self._delay = initial

    @property
    def current(self) -> float:
        """The un-jittered delay :meth:`next` draws from now."""
        return self._delay

    def next(self) -> float:
        """The delay to wait now; the one after it doubles (up to ``cap``)."""
        delay = self._delay
        self._delay = min(self._cap, delay * 2)
        if self._jitter:
            return self._random() * delay
        return delay

    def reset(self) -> None:
        """Start again from ``initial`` (after a success)."""
        self._delay = self._initial
