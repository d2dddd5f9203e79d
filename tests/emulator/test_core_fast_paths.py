"""The emulator core's fast paths for a plain GET and SET read a request exactly as the general parser does: for any
payload they either give the same command or step aside (``None``) for ``parse_command`` to answer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping._protocol.commands import Get, Set, parse_command
from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping.emulator.core import _GET_HEAD, _SET_HEAD, _get_key, _plain_set
from sskv_mapping.errors import ServiceError


def _general(payload: bytes) -> object:
    try:
        return parse_command(payload)
    except ServiceError as exc:
        return type(exc)


def _check(payload: bytes) -> None:
    general = _general(payload)
    if payload[:14] == _GET_HEAD:
        key = _get_key(payload)
        assert key is None or general == Get(key)
    if payload[:14] == _SET_HEAD:
        plain = _plain_set(payload)
        assert plain is None or general == plain


EDGES = [
    encode_request(b"GET", b"k"),
    encode_request(b"GET", b""),
    encode_request(b"GET", b"k\r\n$1\r\n"),
    encode_request(b"GET", b"k") + b"x",
    encode_request(b"SET", b"k", b"v"),
    encode_request(b"SET", b"k", b""),
    encode_request(b"SET", b"", b"v"),
    encode_request(b"SET", b"k\r\n$", b"v" * 100),
    encode_request(b"SET", b"k", b"v") + b"x",
    encode_request(b"SET", b"k", b"v")[:-1],
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$+1\r\nv\r\n",
    b"*3\r\n$3\r\nSET\r\n$01\r\nk\r\n$1\r\nv\r\n",
    b"*2\r\n$3\r\nGET\r\n$-1\r\n",
]


def test_the_edges_read_as_the_general_parser_reads_them() -> None:
    assert _get_key(EDGES[0]) == b"k" and _plain_set(EDGES[4]) == Set(b"k", b"v")  # the fast paths are taken
    for payload in EDGES:
        _check(payload)


@given(st.binary(max_size=40), st.binary(max_size=40), st.integers(0, 60), st.binary(max_size=8))
def test_any_mangled_request_reads_as_the_general_parser_reads_it(
    key: bytes, value: bytes, cut: int, junk: bytes
) -> None:
    for payload in (encode_request(b"GET", key), encode_request(b"SET", key, value)):
        _check(payload)
        _check(payload[:cut] + junk + payload[cut:])
        _check(payload[:cut] + payload[cut + len(junk) :])
