"""SCAN (docs/design/protocol.md §8): glob patterns, the sorted key space, pages and tokens.

The choices where §8 leaves the service open: docs/design/architecture.md, "The emulator's parts".
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from .._protocol import resp3
from .._protocol.commands import Scan
from ..errors import RequestSyntaxError, ServiceError

__all__ = ["DEFAULT_SCAN_PAGE_SIZE", "INVALID_TOKEN_TEXT", "Glob", "KeySpace", "compile_glob", "glob_match"]

#: Keys per SCAN page unless configured (``--scan-page-size``).
DEFAULT_SCAN_PAGE_SIZE = 100
#: The ``-ERR`` text for a continuation token that does not verify (the service's text is unknown).
INVALID_TOKEN_TEXT = "invalid scan continuation token"

_STAR = None  # an element of a parsed glob: None is "*"; a str or a _Class stands for one character
_TOKEN_FORMAT = 1
_MAC_SIZE = 8
_MAX_EMPTY_PAGES = 255


@dataclass(frozen=True, slots=True)
class _Class:
    """``[...]``: ``members`` and ``ranges`` (inclusive), negated by ``[!...]``."""

    negate: bool
    members: frozenset[str]
    ranges: tuple[tuple[str, str], ...]


_Element = str | _Class | None  # a literal character, a class, "?" as the empty string, or _STAR (None)


@dataclass(frozen=True, slots=True)
class Glob:
    """A compiled pattern: ``prefix`` (its literal beginning, bytes) and a matcher for what follows it."""

    prefix: bytes
    #: the elements after the literal prefix (a key in the prefix's range only needs these matched)
    rest: tuple[_Element, ...]
    #: "prefix*": every key with the prefix matches (no per-key work)
    prefix_only: bool
    _fullmatch: Callable[[str], object]

    def matches(self, key: bytes) -> bool:
        return key.startswith(self.prefix) and self.matches_rest(key)

    def matches_rest(self, key: bytes) -> bool:
        """Does ``key``, known to start with the prefix, match?"""
        if self.prefix_only:
            return True
        return self._fullmatch(key[len(self.prefix) :].decode("utf-8", "surrogateescape")) is not None


def _class_regex(cls: _Class) -> str:
    parts = [re.escape(ch) for ch in sorted(cls.members)]
    parts += [f"{re.escape(lo)}-{re.escape(hi)}" for lo, hi in cls.ranges if lo <= hi]  # a reversed range: none
    if not parts:
        return "." if cls.negate else "(?!)"
    return "[" + ("^" if cls.negate else "") + "".join(parts) + "]"


def _regex(elements: tuple[_Element, ...]) -> str:
    """The elements as a regular expression (DOTALL, matched whole): the rules are this module's, the regex
    engine only runs them."""
    out = []
    for element in elements:
        if element is _STAR:
            out.append(".*")
        elif isinstance(element, str):
            out.append(re.escape(element) if element else ".")
        else:
            out.append(_class_regex(element))
    return "".join(out)


def _bracket(text: str, i: int) -> tuple[_Class, int]:
    """Parse the class starting after ``[`` at ``i``; returns it and the index after its ``]``."""
    negate = i < len(text) and text[i] == "!"
    if negate:
        i += 1
    start = i
    members: set[str] = set()
    ranges: list[tuple[str, str]] = []
    while True:
        if i >= len(text):
            raise RequestSyntaxError()  # an unclosed "["
        ch = text[i]
        if ch == "]" and i > start:
            return _Class(negate, frozenset(members), tuple(ranges)), i + 1
        if i + 2 < len(text) and text[i + 1] == "-" and text[i + 2] != "]":
            ranges.append((ch, text[i + 2]))
            i += 3
            continue
        members.add(ch)
        i += 1


@functools.lru_cache(maxsize=256)
def compile_glob(pattern: bytes) -> Glob:
    """Compile a SCAN pattern; :class:`RequestSyntaxError` for an empty one or an unclosed ``[``."""
    if not pattern:
        raise RequestSyntaxError()
    cut = min((p for p in (pattern.find(b"*"), pattern.find(b"?"), pattern.find(b"[")) if p >= 0), default=-1)
    prefix = pattern if cut < 0 else pattern[:cut]
    text = pattern.decode("utf-8", "surrogateescape")
    elements: list[_Element] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "*":
            if not elements or elements[-1] is not _STAR:
                elements.append(_STAR)
            i += 1
        elif ch == "?":
            elements.append("")
            i += 1
        elif ch == "[":
            cls, i = _bracket(text, i + 1)
            elements.append(cls)
        else:
            elements.append(ch)
            i += 1
    prefix_only = cut >= 0 and pattern[cut:] == b"*"
    skip = len(prefix.decode("utf-8", "surrogateescape"))  # the prefix's elements: one literal per character
    rest = tuple(elements[skip:])
    return Glob(prefix, rest, prefix_only, re.compile(_regex(rest), re.DOTALL).fullmatch)


def glob_match(pattern: bytes, key: bytes) -> bool:
    """Does the whole ``key`` match the glob ``pattern``? (The emulator's rules: docs/design/protocol.md §8.)"""
    return compile_glob(pattern).matches(key)


def _reply(keys: list[bytes], token: bytes | None) -> bytes:
    head = b"*2\r\n" if token is not None else b"*1\r\n"
    body = resp3.encode_request(*keys)  # an array of bulk strings
    return head + body + (resp3.encode_bulk(token) if token is not None else b"")


class KeySpace:
    """The store's keys in sorted order, and SCAN answered over them.

    The core calls :meth:`added` for every new key and :meth:`removed` for every key that goes (deleted,
    expired), and :meth:`answer` for a SCAN; ``live(key)`` tells whether a listed key is still there and unexpired.
    """

    def __init__(self, *, page_size: int = DEFAULT_SCAN_PAGE_SIZE, empty_pages: int = 0, secret: bytes | None = None):
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError("the SCAN page size must be an int >= 1")
        if (
            isinstance(empty_pages, bool)
            or not isinstance(empty_pages, int)
            or not 0 <= empty_pages <= _MAX_EMPTY_PAGES
        ):
            raise ValueError(f"empty_pages must be an int in 0..{_MAX_EMPTY_PAGES}")
        self.page_size = page_size
        self.empty_pages = empty_pages
        self.examine_limit = max(10 * page_size, 64)
        self._secret = secret if secret is not None else secrets.token_bytes(16)
        self._keys: list[bytes] = []

    def __len__(self) -> int:
        return len(self._keys)

    def added(self, key: bytes) -> None:
        bisect.insort(self._keys, key)

    def removed(self, key: bytes) -> None:
        keys = self._keys
        i = bisect.bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            del keys[i]

    def answer(self, cmd: Scan, live: Callable[[bytes], bool]) -> bytes:
        """The reply payload to ``cmd``; raises the :class:`ServiceError` to answer instead."""
        glob = compile_glob(cmd.pattern)
        if cmd.token is None:
            after, empties = None, self.empty_pages
        else:
            after, empties = self._open(cmd.pattern, cmd.token)
        if empties > 0:
            return _reply([], self._seal(cmd.pattern, after, empties - 1))
        keys, last, more = self._page(glob, after, live)
        return _reply(keys, self._seal(cmd.pattern, last, self.empty_pages) if more else None)

    def _page(
        self, glob: Glob, after: bytes | None, live: Callable[[bytes], bool]
    ) -> tuple[list[bytes], bytes | None, bool]:
        keys = self._keys
        prefix = glob.prefix
        i = bisect.bisect_left(keys, prefix) if after is None else bisect.bisect_right(keys, max(after, prefix))
        n = len(keys)
        found: list[bytes] = []
        examined = 0
        last = after
        while i < n and len(found) < self.page_size and examined < self.examine_limit:
            key = keys[i]
            if not key.startswith(prefix):
                return found, last, False  # past the prefix's range: nothing further can match
            examined += 1
            i += 1
            last = key
            if glob.matches_rest(key) and live(key):
                found.append(key)
        return found, last, i < n and keys[i].startswith(prefix)

    def _mac(self, pattern: bytes, body: bytes) -> bytes:
        h = hashlib.blake2b(key=self._secret, digest_size=_MAC_SIZE)
        h.update(b"%d:" % len(pattern))
        h.update(pattern)
        h.update(body)
        return h.digest()

    def _seal(self, pattern: bytes, after: bytes | None, empties: int) -> bytes:
        body = bytes((empties,)) + (b"\x00" if after is None else b"\x01" + after)
        return bytes((_TOKEN_FORMAT,)) + self._mac(pattern, body) + body

    def _open(self, pattern: bytes, token: bytes) -> tuple[bytes | None, int]:
        if len(token) < 3 + _MAC_SIZE or token[0] != _TOKEN_FORMAT:
            raise ServiceError(INVALID_TOKEN_TEXT)
        mac, body = token[1 : 1 + _MAC_SIZE], token[1 + _MAC_SIZE :]
        if not secrets.compare_digest(mac, self._mac(pattern, body)):
            raise ServiceError(INVALID_TOKEN_TEXT)
        empties, flag, rest = body[0], body[1], body[2:]
        if flag == 0 and not rest:
            return None, empties
        if flag == 1 and rest:
            return rest, empties
        raise ServiceError(INVALID_TOKEN_TEXT)
