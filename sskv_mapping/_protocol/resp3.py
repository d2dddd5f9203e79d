"""RESP3-style payloads of the state store, bytes in and values out; strict, every malformed input a ``ProtocolError``.

The grammar: docs/design/protocol.md §1 and §2.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ProtocolError

__all__ = [
    "ErrorReply",
    "Reply",
    "SimpleString",
    "encode_array",
    "encode_bulk",
    "encode_error",
    "encode_integer",
    "encode_request",
    "encode_simple",
    "parse_reply",
    "parse_request",
]

#: Nesting limit for arrays; replies of this service are at most two deep (SCAN).
MAX_DEPTH = 8
#: A length, count or integer header longer than this many digits is refused before int() sees it
#: (RESP integers are signed 64-bit: at most 19 digits).
_MAX_DIGITS = 19
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class SimpleString:
    """A RESP simple string such as ``+OK``."""

    text: str


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """A RESP error. ``text`` is what follows ``-ERR `` (or the whole line if it has another prefix)."""

    text: str


Reply = SimpleString | int | bytes | None | ErrorReply | list["Reply"]

_OK = SimpleString("OK")  # (immutable: every OK reply parsed may be this one)


# ---------------------------------------------------------------------------------------------------------
# encoding


def encode_request(*args: bytes) -> bytes:
    """Encode a request: an array of bulk strings. ``encode_request(b"GET", b"k")``."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts.append(b"$%d\r\n" % len(arg))
        parts.append(arg)
        parts.append(b"\r\n")
    return b"".join(parts)


def encode_simple(text: str) -> bytes:
    if "\r" in text or "\n" in text:
        raise ValueError("a simple string may not contain CR or LF")
    return b"+" + text.encode() + b"\r\n"


def encode_integer(value: int) -> bytes:
    return b":%d\r\n" % value


def encode_bulk(value: bytes | None) -> bytes:
    if value is None:
        return b"$-1\r\n"
    return b"$%d\r\n%s\r\n" % (len(value), value)


def encode_error(text: str) -> bytes:
    if "\r" in text or "\n" in text:
        raise ValueError("an error text may not contain CR or LF")
    return b"-ERR " + text.encode() + b"\r\n"


def encode_array(items: list[bytes]) -> bytes:
    """Encode an array of bulk strings (notifications use this)."""
    return encode_request(*items)


# ---------------------------------------------------------------------------------------------------------
# parsing


def _line(data: bytes, pos: int) -> tuple[bytes, int]:
    """Return the bytes from ``pos`` to the next CRLF, and the position after the CRLF."""
    end = data.find(b"\r\n", pos)
    if end < 0:
        raise ProtocolError("truncated RESP payload: missing CRLF")
    return data[pos:end], end + 2


def _int(raw: bytes, what: str) -> int:
    # int() would accept '+5', ' 5', '5_0' and unicode digits; the protocol allows none of them.
    neg = raw[:1] == b"-"
    digits = raw[1:] if neg else raw
    if not digits or len(digits) > _MAX_DIGITS or not digits.isdigit():
        raise ProtocolError(f"malformed {what}: {raw[:40]!r}")
    value = -int(digits) if neg else int(digits)
    if not _I64_MIN <= value <= _I64_MAX:
        raise ProtocolError(f"{what} outside the signed 64-bit range: {raw[:40]!r}")
    return value


def _text_line(raw: bytes, what: str) -> str:
    # A lone CR or LF cannot occur in a simple string or error line (the encoders refuse them too).
    if b"\r" in raw or b"\n" in raw:
        raise ProtocolError(f"CR or LF inside {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} is not UTF-8") from exc


def _parse(data: bytes, pos: int, depth: int) -> tuple[Reply, int]:
    if pos >= len(data):
        raise ProtocolError("truncated RESP payload")
    kind = data[pos : pos + 1]
    if kind == b"$":
        raw, pos = _line(data, pos + 1)
        n = _int(raw, "bulk length")
        if n == -1:
            return None, pos
        if n < 0:
            raise ProtocolError(f"negative bulk length {n}")
        end = pos + n
        if end + 2 > len(data):
            raise ProtocolError("truncated bulk string")
        if data[end : end + 2] != b"\r\n":
            raise ProtocolError("bulk string not terminated by CRLF at its declared length")
        return data[pos:end], end + 2
    if kind == b":":
        raw, pos = _line(data, pos + 1)
        return _int(raw, "integer"), pos
    if kind == b"+":
        raw, pos = _line(data, pos + 1)
        return SimpleString(_text_line(raw, "simple string")), pos
    if kind == b"-":
        raw, pos = _line(data, pos + 1)
        if raw == b"1":
            return -1, pos  # the article's legacy "not applied"
        text = _text_line(raw, "error text")
        if text.startswith("ERR "):
            text = text[4:]
        elif text == "ERR":  # no space, no text: as malformed as the Rust SDK holds it
            raise ProtocolError("an error reply without text ('-ERR' with nothing after it)")
        return ErrorReply(text), pos
    if kind == b"*":
        if depth >= MAX_DEPTH:
            raise ProtocolError("RESP arrays nested too deeply")
        raw, pos = _line(data, pos + 1)
        n = _int(raw, "array length")
        if n < 0:
            raise ProtocolError(f"negative array length {n}")
        # every element takes at least 3 bytes; refuse counts the payload cannot hold before looping
        if n * 3 > len(data) - pos:
            raise ProtocolError("truncated array")
        items: list[Reply] = []
        for _ in range(n):
            item, pos = _parse(data, pos, depth + 1)
            items.append(item)
        return items, pos
    raise ProtocolError(f"unknown RESP type byte {kind!r}")


def parse_reply(data: bytes) -> Reply:
    """Parse exactly one reply; anything after it is an error."""
    if type(data) is not bytes:
        pass
    elif data[:1] == b"$":
        # a bulk string (a GET's value), the usual reply: taken here when well-formed, with _parse's result;
        # anything else goes the general way below, which says what is wrong
        end = data.find(b"\r\n", 1)
        raw = data[1:end]
        if end > 0 and raw.isdigit() and len(raw) <= _MAX_DIGITS:
            stop = end + 2 + int(raw)
            if stop + 2 == len(data) and data.endswith(b"\r\n"):
                return data[end + 2 : stop]
    elif data == b"+OK\r\n":  # a SET's or KEYNOTIFY's OK
        return _OK
    value, pos = _parse(bytes(data), 0, 0)
    if pos != len(data):
        raise ProtocolError(f"{len(data) - pos} unexpected bytes after the reply")
    return value


def _parse_request_fast(data: bytes) -> list[bytes] | None:
    """A well-formed request's arguments, or ``None`` for anything unusual (which the general parser then answers,
    with its exact error). Every request the emulator serves passes here: one flat loop, no recursion, no tuples
    (the general parser was about a third of the emulator core's instructions per GET). It accepts only what
    :func:`_parse` accepts, with the same result: plain decimal lengths (no sign, at most 10 digits for a bulk
    string, 3 for the count), each bulk string followed by its CRLF, nothing after the last."""
    end = data.find(b"\r\n", 1)
    raw = data[1:end]
    if end < 0 or not raw.isdigit() or len(raw) > 3:
        return None
    pos = end + 2
    args: list[bytes] = []
    for _ in range(int(raw)):
        if data[pos : pos + 1] != b"$":
            return None
        end = data.find(b"\r\n", pos + 1)
        raw = data[pos + 1 : end]
        if end < 0 or not raw.isdigit() or len(raw) > 10:
            return None
        pos = end + 2
        stop = pos + int(raw)
        if data[stop : stop + 2] != b"\r\n":
            return None
        args.append(data[pos:stop])
        pos = stop + 2
    return args if pos == len(data) else None


def parse_request(data: bytes) -> list[bytes]:
    """Parse a request: exactly one array of bulk strings, nothing after it (the emulator uses this)."""
    data = bytes(data)
    if data[:1] == b"*":
        fast = _parse_request_fast(data)
        if fast is not None:
            return fast
    return _parse_request_general(data)


def _parse_request_general(data: bytes) -> list[bytes]:
    if data[:1] != b"*":
        raise ProtocolError("a request must be an array")
    value, pos = _parse(data, 0, MAX_DEPTH - 1)  # depth: elements may not be arrays
    if pos != len(data):
        raise ProtocolError(f"{len(data) - pos} unexpected bytes after the request")
    assert isinstance(value, list)
    args: list[bytes] = []
    for item in value:
        if not isinstance(item, bytes):
            raise ProtocolError("request elements must be bulk strings")
        args.append(item)
    return args
