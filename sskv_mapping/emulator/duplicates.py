"""The answers the emulator remembers so that a request sent twice is applied once.

The window and what counts as a copy: docs/design/architecture.md, "The emulator's parts"; docs/emulator.md.
"""

from __future__ import annotations

from collections import OrderedDict

from .._protocol.hlc import HybridLogicalClock

__all__ = ["DEFAULT_MAX_AGE_MS", "DEFAULT_MAX_ENTRIES", "RecentAnswers"]

#: How long an answer is remembered (ms).
DEFAULT_MAX_AGE_MS = 60_000
#: How many answers are remembered at most.
DEFAULT_MAX_ENTRIES = 50_000

# (when, len(request), hash(request), answer payload, answer __ts)
_Entry = tuple[int, int, int, bytes, HybridLogicalClock | None]


class RecentAnswers:
    """The answers to recent requests, by ``(client id, correlation data)``, bounded in count and age.

    Args:
        max_entries: the most answers kept (the oldest go first); ``0`` keeps none.
        max_age_ms: how long an answer is kept after the request it answered (ms).

    Example:
        >>> answers = RecentAnswers(max_entries=2, max_age_ms=1_000)
        >>> answers.remember(("c", b"1"), b"SET k v", b"+OK\\r\\n", None, now=0)
        >>> answers.answer(("c", b"1"), b"SET k v", now=999)
        (b'+OK\\r\\n', None)
        >>> answers.answer(("c", b"1"), b"SET k v", now=1_000) is None  # too old
        True
    """

    __slots__ = ("_entries", "max_age_ms", "max_entries")

    def __init__(self, *, max_entries: int = DEFAULT_MAX_ENTRIES, max_age_ms: int = DEFAULT_MAX_AGE_MS) -> None:
        if max_entries < 0 or max_age_ms < 0:
            raise ValueError("max_entries and max_age_ms must be >= 0")
        self.max_entries = max_entries
        self.max_age_ms = max_age_ms
        self._entries: OrderedDict[tuple[str, bytes], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def answer(
        self, key: tuple[str, bytes], request: bytes, now: int
    ) -> tuple[bytes, HybridLogicalClock | None] | None:
        """The first answer (payload, ``__ts``) to this very request if it was served within the window."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        at, size, digest, payload, version = entry
        if now - at >= self.max_age_ms:
            return None  # too old: forgotten (removed by the next remember)
        if size != len(request) or digest != hash(request):
            return None  # the same correlation data on another request: not a copy
        return payload, version

    def remember(
        self, key: tuple[str, bytes], request: bytes, payload: bytes, version: HybridLogicalClock | None, now: int
    ) -> None:
        """Keep the answer to ``request``; forget answers past the window's age or count."""
        entries = self._entries
        if self.max_entries == 0:
            return
        entries.pop(key, None)  # a reused correlation: the newest request's answer, at the end
        entries[key] = (now, len(request), hash(request), payload, version)
        oldest = now - self.max_age_ms
        while entries:
            first = next(iter(entries.values()))
            if len(entries) <= self.max_entries and first[0] > oldest:
                break
            entries.popitem(last=False)
