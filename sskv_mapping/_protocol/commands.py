"""One small frozen dataclass per state store command, encoded and decoded on both sides.

The client encodes a command and decodes its reply; the emulator parses a request with :func:`parse_command`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from ..errors import (
    KeyLengthZeroError,
    ProtocolError,
    RequestSyntaxError,
    UnknownCommandError,
    UnsupportedCommandError,
    WrongNumberOfArgumentsError,
)
from . import resp3
from .error_texts import service_error

__all__ = [
    "Command",
    "Delete",
    "Get",
    "KeyNotify",
    "Scan",
    "ScanPage",
    "Set",
    "SetCondition",
    "VDelete",
    "VDeleteResult",
    "parse_command",
]

R = TypeVar("R")


class SetCondition(enum.Enum):
    """``NX``: only if absent. ``NEX``: only if absent or equal to the value being set (lease renewal)."""

    NX = "NX"
    NEX = "NEX"


class VDeleteResult(enum.Enum):
    """The three outcomes of VDEL (docs/design/protocol.md §2)."""

    DELETED = 1
    NOT_FOUND = 0
    VALUE_MISMATCH = -1

    def __bool__(self) -> bool:
        return self is VDeleteResult.DELETED


def _reply(payload: bytes) -> resp3.Reply:
    reply = resp3.parse_reply(payload)
    if isinstance(reply, resp3.ErrorReply):
        raise service_error(reply.text)
    return reply


def _unexpected(verb: str, reply: resp3.Reply) -> ProtocolError:
    return ProtocolError(f"unexpected {verb} reply: {reply!r:.120}")


def _is_ok(reply: resp3.Reply) -> bool:
    return isinstance(reply, resp3.SimpleString) and reply.text == "OK"


class _Base(Generic[R]):
    VERB: ClassVar[bytes]

    def encode(self) -> bytes:
        raise NotImplementedError

    def decode(self, payload: bytes) -> R:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Get(_Base["bytes | None"]):
    """``GET key`` -> the value, or ``None`` for a missing key."""

    key: bytes
    VERB: ClassVar[bytes] = b"GET"

    def encode(self) -> bytes:
        key = self.key  # resp3.encode_request(b"GET", key), in one step (one per read)
        return b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)

    def decode(self, payload: bytes) -> bytes | None:
        reply = resp3.parse_reply(payload)  # _reply(payload), its call saved: one per read
        if reply is None or type(reply) is bytes:
            return reply
        if isinstance(reply, resp3.ErrorReply):
            raise service_error(reply.text)
        if isinstance(reply, bytes):
            return reply
        raise _unexpected("GET", reply)


@dataclass(frozen=True, slots=True)
class Set(_Base[bool]):
    """``SET key value [NX|NEX] [PX ms]`` -> ``True`` if applied, ``False`` if skipped by the condition."""

    key: bytes
    value: bytes
    condition: SetCondition | None = None
    expiry_ms: int | None = None
    VERB: ClassVar[bytes] = b"SET"

    def encode(self) -> bytes:
        key, value = self.key, self.value
        if self.condition is None and self.expiry_ms is None:  # encode_request(b"SET", key, value), in one step
            return b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)
        args = [b"SET", key, value]
        if self.condition is not None:
            args.append(self.condition.value.encode())
        if self.expiry_ms is not None:
            args += [b"PX", b"%d" % self.expiry_ms]
        return resp3.encode_request(*args)

    def decode(self, payload: bytes) -> bool:
        if payload == b"+OK\r\n":  # the usual reply, as parse_reply reads it (to its OK): one per write
            return True
        reply = _reply(payload)
        if _is_ok(reply):
            return True
        if reply == -1 and not isinstance(reply, bool):
            return False
        raise _unexpected("SET", reply)


@dataclass(frozen=True, slots=True)
class Delete(_Base[bool]):
    """``DEL key`` -> ``True`` if a key was deleted, ``False`` if it did not exist."""

    key: bytes
    VERB: ClassVar[bytes] = b"DEL"

    def encode(self) -> bytes:
        return resp3.encode_request(b"DEL", self.key)

    def decode(self, payload: bytes) -> bool:
        reply = _reply(payload)
        if isinstance(reply, int) and reply in (0, 1):
            return reply == 1
        raise _unexpected("DEL", reply)


@dataclass(frozen=True, slots=True)
class VDelete(_Base[VDeleteResult]):
    """``VDEL key value`` -> :class:`VDeleteResult`."""

    key: bytes
    value: bytes
    VERB: ClassVar[bytes] = b"VDEL"

    def encode(self) -> bytes:
        return resp3.encode_request(b"VDEL", self.key, self.value)

    def decode(self, payload: bytes) -> VDeleteResult:
        reply = _reply(payload)
        if isinstance(reply, int) and reply in (-1, 0, 1):
            return VDeleteResult(reply)
        raise _unexpected("VDEL", reply)


@dataclass(frozen=True, slots=True)
class KeyNotify(_Base[bool]):
    """``KEYNOTIFY key [STOP]`` -> ``True`` (registered / was registered), ``False`` (STOP, unknown)."""

    key: bytes
    stop: bool = False
    VERB: ClassVar[bytes] = b"KEYNOTIFY"

    def encode(self) -> bytes:
        if self.stop:
            return resp3.encode_request(b"KEYNOTIFY", self.key, b"STOP")
        return resp3.encode_request(b"KEYNOTIFY", self.key)

    def decode(self, payload: bytes) -> bool:
        reply = _reply(payload)
        if _is_ok(reply):
            return True
        if self.stop and reply == 0:
            return False
        raise _unexpected("KEYNOTIFY", reply)


@dataclass(frozen=True, slots=True)
class ScanPage:
    """One SCAN reply: the page's ``keys`` (possibly none) and the continuation ``token`` (``None``: last page)."""

    keys: list[bytes]
    token: bytes | None


def _scan_malformed(why: str, reply: object) -> ProtocolError:
    return ProtocolError(f"malformed SCAN reply ({why}): {reply!r:.120}")


@dataclass(frozen=True, slots=True)
class Scan(_Base[ScanPage]):
    """``SCAN pattern [token]`` -> :class:`ScanPage` (docs/design/protocol.md §8).

    The first page carries no token; later pages echo the previous reply's token byte for byte with the same
    pattern. ``unknown command`` on a first page raises :class:`UnsupportedCommandError` (an older service); the
    reply grammar is enforced exactly (``*1``/``*2``, an array of non-null bulk keys, a non-null bulk token).
    """

    pattern: bytes
    token: bytes | None = None
    VERB: ClassVar[bytes] = b"SCAN"

    def encode(self) -> bytes:
        if self.token is None:
            return resp3.encode_request(b"SCAN", self.pattern)
        return resp3.encode_request(b"SCAN", self.pattern, self.token)

    def decode(self, payload: bytes) -> ScanPage:
        reply = resp3.parse_reply(payload)
        if isinstance(reply, resp3.ErrorReply):
            if self.token is None and reply.text == UnknownCommandError.TEXT:
                raise UnsupportedCommandError(reply.text)
            raise service_error(reply.text)
        if not isinstance(reply, list):
            raise _scan_malformed("not an array", reply)
        if not 1 <= len(reply) <= 2:
            raise _scan_malformed(f"{len(reply)} elements, not 1 or 2", reply)
        items = reply[0]
        if not isinstance(items, list):
            raise _scan_malformed("the keys are not an array", reply)
        keys: list[bytes] = []
        for key in items:
            if not isinstance(key, bytes):
                raise _scan_malformed("a key that is not a bulk string", reply)
            keys.append(key)
        if len(reply) == 1:
            return ScanPage(keys, None)
        token = reply[1]
        if not isinstance(token, bytes):
            raise _scan_malformed("the token is not a bulk string", reply)
        return ScanPage(keys, token)


Command = Get | Set | Delete | VDelete | KeyNotify | Scan

_ARITY = {b"GET": (2, 2), b"DEL": (2, 2), b"VDEL": (3, 3), b"KEYNOTIFY": (2, 3), b"SET": (3, 6), b"SCAN": (2, 3)}


def _positive_ms(raw: bytes) -> int:
    if not raw.isdigit() or len(raw) > 18:
        raise RequestSyntaxError()
    value = int(raw)
    if value <= 0:
        raise RequestSyntaxError()
    return value


def parse_command(payload: bytes) -> Command:
    """Service side: parse a request payload, raising the :class:`ServiceError` the service would answer.

    Verbs and options are matched case-insensitively, like Redis; clients send upper case.
    """
    try:
        args = resp3.parse_request(payload)
    except ProtocolError as exc:
        raise RequestSyntaxError() from exc
    if not args:
        raise RequestSyntaxError()
    verb = args[0].upper()
    arity = _ARITY.get(verb)
    if arity is None:
        raise UnknownCommandError()
    if not arity[0] <= len(args) <= arity[1]:
        raise WrongNumberOfArgumentsError()
    if verb == b"SCAN":
        # An empty pattern (which the SDKs refuse before sending) or an empty token: the emulator's choice.
        if not args[1] or (len(args) == 3 and not args[2]):
            raise RequestSyntaxError()
        return Scan(args[1], args[2] if len(args) == 3 else None)
    key = args[1]
    if not key:
        raise KeyLengthZeroError()
    if verb == b"GET":
        return Get(key)
    if verb == b"DEL":
        return Delete(key)
    if verb == b"VDEL":
        return VDelete(key, args[2])
    if verb == b"KEYNOTIFY":
        if len(args) == 3:
            if args[2].upper() != b"STOP":
                raise RequestSyntaxError()
            return KeyNotify(key, stop=True)
        return KeyNotify(key)
    # SET key value [NX|NEX] [PX ms] -- the condition always before PX
    if len(args) == 3:  # most SETs: no option to read
        return Set(key, args[2], None, None)
    rest = [a.upper() for a in args[3:]]
    condition: SetCondition | None = None
    expiry: int | None = None
    i = 0
    if i < len(rest) and rest[i] in (b"NX", b"NEX"):
        condition = SetCondition(rest[i].decode())
        i += 1
    if i < len(rest) and rest[i] == b"PX":
        if i + 1 >= len(rest):
            raise RequestSyntaxError()
        expiry = _positive_ms(rest[i + 1])
        i += 2
    if i != len(rest):
        raise RequestSyntaxError()
    return Set(key, args[2], condition, expiry)
