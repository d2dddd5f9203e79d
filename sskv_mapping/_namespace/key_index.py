"""The seam between a namespace and its key listing: :class:`KeyIndex` and the :class:`IndexEntry` it lists.

The dict injects SCAN or its stored index (``mapping/_listing.py``); the cache injects none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["IndexEntry", "KeyIndex"]


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """A listed key: when it was first listed, and when its data expires (``None``: never), in wall-clock ms."""

    added_ms: int
    expires_ms: int | None = None


class KeyIndex(Protocol):
    """What a namespace needs from its key listing: the dict injects SCAN or its stored index (``mapping._listing``)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def listing(self, *, refresh: bool = False) -> dict[str, IndexEntry]:
        """Every listed key -> its entry (kept current by notifications; ``refresh`` reads the store now)."""
        ...

    async def add(self, keys: Iterable[tuple[str, int | None]]) -> None:
        """Make sure each ``(key, expires_ms)`` is listed with an expiry of the same kind."""
        ...

    async def remove(self, keys: Iterable[str]) -> None: ...

    async def prune(self, missing: Iterable[str]) -> int: ...

    async def candidate(self, skip: Iterable[str] = ()) -> str | None:
        """A listed key not in ``skip`` (what ``popitem`` pops), ``None`` if there is none."""
        ...
