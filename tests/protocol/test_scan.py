"""SCAN (docs/design/protocol.md §8): request bytes, the strict reply grammar, the service parse, ``escape_glob``."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sskv_mapping import escape_glob
from sskv_mapping._keys import scan_pattern
from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.commands import Scan, ScanPage, parse_command
from sskv_mapping._protocol.resp3 import encode_request as req
from sskv_mapping.errors import (
    ConfigurationError,
    NotAuthorizedError,
    ProtocolError,
    RequestSyntaxError,
    ServiceError,
    UnknownCommandError,
    UnsupportedCommandError,
    WrongNumberOfArgumentsError,
)

from ._strategies import FAST, FUZZ, garbage, keys_or_nasty, mutated

# ---------------------------------------------------------------------------------------------------------
# requests


def test_first_and_later_page_bytes_from_protocol_md() -> None:
    assert Scan(b"key*").encode() == b"*2\r\n$4\r\nSCAN\r\n$4\r\nkey*\r\n"
    assert Scan(b"key*", b"\x00\xffx").encode() == b"*3\r\n$4\r\nSCAN\r\n$4\r\nkey*\r\n$3\r\n\x00\xffx\r\n"


def test_no_match_count_or_cursor_keyword() -> None:
    args = resp3.parse_request(Scan(b"*").encode())
    assert args == [b"SCAN", b"*"]


@FAST
@given(pattern=keys_or_nasty, token=st.none() | st.binary(min_size=1, max_size=64))
def test_request_round_trips_through_the_service_parser(pattern: bytes, token: bytes | None) -> None:
    cmd = Scan(pattern, token)
    assert parse_command(cmd.encode()) == cmd  # the token echoed byte for byte


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([b"SCAN"], WrongNumberOfArgumentsError),
        ([b"SCAN", b"*", b"t", b"x"], WrongNumberOfArgumentsError),
        ([b"SCAN", b""], RequestSyntaxError),
        ([b"SCAN", b"*", b""], RequestSyntaxError),
    ],
)
def test_service_side_refusals(args: list[bytes], error: type[ServiceError]) -> None:
    with pytest.raises(error):
        parse_command(req(*args))


def test_verb_is_case_insensitive_on_the_service_side() -> None:
    assert parse_command(req(b"scan", b"a*")) == Scan(b"a*")


# ---------------------------------------------------------------------------------------------------------
# replies


@pytest.mark.parametrize(
    ("payload", "page"),
    [
        (b"*1\r\n*2\r\n$4\r\nkey1\r\n$4\r\nkey2\r\n", ScanPage([b"key1", b"key2"], None)),
        (b"*1\r\n*0\r\n", ScanPage([], None)),
        (b"*2\r\n*0\r\n$3\r\n\x00\xffx\r\n", ScanPage([], b"\x00\xffx")),
        (b"*2\r\n*1\r\n$4\r\na\r\nb\r\n$1\r\nt\r\n", ScanPage([b"a\r\nb"], b"t")),
        (b"*2\r\n*1\r\n$0\r\n\r\n$0\r\n\r\n", ScanPage([b""], b"")),  # odd but well-formed: kept as sent
    ],
)
def test_well_formed_replies(payload: bytes, page: ScanPage) -> None:
    assert Scan(b"*").decode(payload) == page


@pytest.mark.parametrize(
    "payload",
    [
        b"*0\r\n",  # no elements
        b"*3\r\n*0\r\n$1\r\nt\r\n$1\r\nu\r\n",  # three elements
        b"*1\r\n*x\r\n",  # a non-numeric count
        b"*1\r\n$1\r\na\r\n",  # keys not an array
        b"*1\r\n:1\r\n",
        b"*1\r\n*1\r\n$2\r\na\r\n",  # a wrong bulk length
        b"*1\r\n*2\r\n$1\r\na\r\n",  # fewer keys than counted
        b"*2\r\n*0\r\n",  # *2 without a token
        b"*1\r\n*0\r\nx",  # trailing bytes
        b"*1\r\n*0\r\n\r\n",
        b"*-1\r\n",  # a null array
        b"*1\r\n*-1\r\n",
        b"*1\r\n*1\r\n$-1\r\n",  # a null key
        b"*2\r\n*0\r\n$-1\r\n",  # a null token
        b"*2\r\n*0\r\n*0\r\n",  # a token that is an array
        b"*1\r\n*1\r\n*0\r\n",  # a key that is an array
        b"*1\r\n*1\r\n:5\r\n",
        b"+OK\r\n",
        b":1\r\n",
        b"$-1\r\n",
        b"-1\r\n",
        b"",
    ],
)
def test_malformed_replies_raise_protocol_error(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        Scan(b"*").decode(payload)
    with pytest.raises(ProtocolError):
        Scan(b"*", b"tok").decode(payload)


def test_unknown_command_on_a_first_page_is_unsupported() -> None:
    with pytest.raises(UnsupportedCommandError) as info:
        Scan(b"*").decode(b"-ERR unknown command\r\n")
    assert isinstance(info.value, UnknownCommandError) and info.value.text == "unknown command"


def test_unknown_command_on_a_later_page_is_a_plain_unknown_command() -> None:
    with pytest.raises(UnknownCommandError) as info:
        Scan(b"*", b"tok").decode(b"-ERR unknown command\r\n")
    assert type(info.value) is UnknownCommandError


def test_errors_map_through_the_table_and_unknown_texts_are_kept() -> None:
    with pytest.raises(NotAuthorizedError):
        Scan(b"*").decode(b"-ERR not authorized\r\n")
    with pytest.raises(ServiceError) as info:
        Scan(b"*", b"t").decode(b"-ERR invalid scan continuation token\r\n")
    assert type(info.value) is ServiceError and info.value.text == "invalid scan continuation token"


def encode_page(keys: list[bytes], token: bytes | None) -> bytes:
    head = b"*2\r\n" if token is not None else b"*1\r\n"
    return head + req(*keys) + (resp3.encode_bulk(token) if token is not None else b"")


pages = st.builds(ScanPage, st.lists(keys_or_nasty | st.just(b""), max_size=8), st.none() | st.binary(max_size=40))


@FUZZ
@given(page=pages)
def test_page_round_trip(page: ScanPage) -> None:
    assert Scan(b"k*").decode(encode_page(page.keys, page.token)) == page


@FUZZ
@given(data=garbage | mutated(pages.map(lambda p: encode_page(p.keys, p.token))))
@example(b"*2\r\n*1\r\n$1\r\na\r\n$1\r\nt\r\n" + b"\x00")
def test_anything_malformed_raises_protocol_error_only(data: bytes) -> None:
    for cmd in (Scan(b"*"), Scan(b"*", b"t")):
        try:
            page = cmd.decode(data)
        except (ProtocolError, ServiceError):
            continue
        # accepted: what it read encodes and decodes back to itself
        assert cmd.decode(encode_page(page.keys, page.token)) == page


# ---------------------------------------------------------------------------------------------------------
# the pattern and escape_glob (client side, before any I/O)


def test_scan_pattern_checks() -> None:
    assert scan_pattern("clé*") == "clé*".encode()
    assert scan_pattern(bytearray(b"a?")) == b"a?"
    for bad in ("", b"", None, 5, ["*"], "\udc80"):
        with pytest.raises(ConfigurationError):
            scan_pattern(bad)


@pytest.mark.parametrize(
    ("literal", "escaped"),
    [
        ("plain", b"plain"),
        ("ns*", b"ns[*]"),
        (b"a?b", b"a[?]b"),
        ("x[1]", b"x[[]1]"),
        ("*?[", b"[*][?][[]"),
        ("back\\slash!-]", b"back\\slash!-]"),
        ("", b""),
    ],
)
def test_escape_glob(literal: str | bytes, escaped: bytes) -> None:
    assert escape_glob(literal) == escaped


def test_escape_glob_refuses_other_types() -> None:
    with pytest.raises(ConfigurationError):
        escape_glob(5)  # type: ignore[arg-type]
