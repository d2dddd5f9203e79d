"""RESP3 framing (docs/design/protocol.md §1, §2): exact bytes, strict parsing, and never a crash or a wrong value."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.resp3 import (
    MAX_DEPTH,
    ErrorReply,
    SimpleString,
    encode_array,
    encode_bulk,
    encode_error,
    encode_integer,
    encode_request,
    encode_simple,
    parse_reply,
    parse_request,
)
from sskv_mapping.errors import ProtocolError

from ._strategies import (
    FAST,
    FUZZ,
    I64_MAX,
    I64_MIN,
    encode_reply,
    garbage,
    line_text,
    mutated,
    replies,
    values_or_nasty,
)

SET_EXAMPLE = b"*6\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n1000\r\n"


# ---------------------------------------------------------------------------------------------------------
# requests


def test_set_example_from_protocol_md_encodes_byte_for_byte() -> None:
    assert encode_request(b"SET", b"key", b"value", b"NX", b"PX", b"1000") == SET_EXAMPLE


def test_set_example_from_protocol_md_parses_back() -> None:
    assert parse_request(SET_EXAMPLE) == [b"SET", b"key", b"value", b"NX", b"PX", b"1000"]


def test_request_arguments_are_binary_safe() -> None:
    nasty = b"a\r\nb\x00c\r\n$3\r\n*1\r\n"
    payload = encode_request(b"SET", nasty, b"\r\n")
    assert payload == b"*3\r\n$3\r\nSET\r\n$16\r\n" + nasty + b"\r\n$2\r\n\r\n\r\n"
    assert parse_request(payload) == [b"SET", nasty, b"\r\n"]


def test_empty_argument_is_dollar_zero() -> None:
    assert encode_request(b"SET", b"k", b"") == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
    assert parse_request(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n") == [b"SET", b"k", b""]


def test_encode_array_is_an_array_of_bulk_strings() -> None:
    assert encode_array([b"NOTIFY", b"DELETE"]) == b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"


def test_empty_request_array_parses_to_empty_list() -> None:
    assert parse_request(b"*0\r\n") == []


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"$3\r\nGET\r\n",  # not an array
        b":1\r\n",
        b"+OK\r\n",
        b"*1\r\n:1\r\n",  # elements must be bulk strings
        b"*1\r\n+GET\r\n",
        b"*1\r\n$-1\r\n",  # ... and not null
        b"*1\r\n*0\r\n",  # ... and not arrays
        b"*1\r\n*1\r\n$1\r\na\r\n",
        b"*1\r\n$3\r\nGET\r\nX",  # trailing bytes
        b"*1\r\n$3\r\nGET\r\n*0\r\n",
        b"*2\r\n$3\r\nGET\r\n",  # fewer elements than declared
        b"*1\r\n$3\r\nGE\r\n",
        b"*-1\r\n",
        b"*+1\r\n$1\r\na\r\n",
        b"* 1\r\n$1\r\na\r\n",
    ],
)
def test_parse_request_rejects(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_request(payload)


# ---------------------------------------------------------------------------------------------------------
# replies: every row of docs/design/protocol.md §2


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"+OK\r\n", SimpleString("OK")),  # SET applied, KEYNOTIFY registered
        (b":-1\r\n", -1),  # SET skipped by NX/NEX, VDEL value differs
        (b"-1\r\n", -1),  # the article's legacy "not applied"
        (b"$5\r\nvalue\r\n", b"value"),  # GET hit
        (b"$0\r\n\r\n", b""),  # GET hit, empty value
        (b"$-1\r\n", None),  # GET miss
        (b":1\r\n", 1),  # DEL / VDEL deleted
        (b":0\r\n", 0),  # DEL / VDEL missing, KEYNOTIFY STOP not registered
        (b"-ERR syntax error\r\n", ErrorReply("syntax error")),
        (b"$4\r\n\r\n\r\n\r\n", b"\r\n\r\n"),  # binary-safe: CRLF inside a bulk string
        (b"*0\r\n", []),
        (
            b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$1\r\nv\r\n",
            [b"NOTIFY", b"SET", b"VALUE", b"v"],
        ),
        (  # the coming SCAN: an array of keys and a continuation token
            b"*2\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n$3\r\ntok\r\n",
            [[b"a", b"b"], b"tok"],
        ),
        (b"*3\r\n:7\r\n$-1\r\n+x\r\n", [7, None, SimpleString("x")]),
    ],
)
def test_parse_reply_examples(payload: bytes, expected: resp3.Reply) -> None:
    assert parse_reply(payload) == expected


def test_legacy_minus_one_and_integer_minus_one_are_the_same_value() -> None:
    assert parse_reply(b"-1\r\n") == parse_reply(b":-1\r\n") == -1
    assert type(parse_reply(b"-1\r\n")) is int


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        (b"-ERR syntax error\r\n", "syntax error"),
        (b"-ERR  syntax error\r\n", " syntax error"),  # exactly one space is stripped, no more
        (b"-ERR \r\n", ""),
        (b"-ERRsyntax error\r\n", "ERRsyntax error"),  # not the ERR prefix: the whole line is kept
        (b"-ERR: unknown command\r\n", "ERR: unknown command"),  # the article's KEYNOTIFY spelling
        (b"-WRONGTYPE nope\r\n", "WRONGTYPE nope"),
        (b"-ERR -1\r\n", "-1"),
        ("-ERR ключ\r\n".encode(), "ключ"),
    ],
)
def test_error_reply_text(payload: bytes, text: str) -> None:
    assert parse_reply(payload) == ErrorReply(text)


def test_a_bare_err_without_text_is_a_protocol_error() -> None:
    # the Rust SDK's own test vector: '-ERR' needs a space and a text (an empty text after the space is kept)
    with pytest.raises(ProtocolError):
        parse_reply(b"-ERR\r\n")


def test_encoders_produce_the_documented_bytes() -> None:
    assert encode_simple("OK") == b"+OK\r\n"
    assert encode_integer(-1) == b":-1\r\n"
    assert encode_integer(0) == b":0\r\n"
    assert encode_bulk(b"value") == b"$5\r\nvalue\r\n"
    assert encode_bulk(b"") == b"$0\r\n\r\n"
    assert encode_bulk(None) == b"$-1\r\n"
    assert encode_error("syntax error") == b"-ERR syntax error\r\n"


@pytest.mark.parametrize("text", ["a\rb", "a\nb", "\r\n"])
def test_line_encoders_refuse_cr_and_lf(text: str) -> None:
    with pytest.raises(ValueError):
        encode_simple(text)
    with pytest.raises(ValueError):
        encode_error(text)


# ---------------------------------------------------------------------------------------------------------
# strictness


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"$",
        b"$3\r\nab\r\n",  # shorter than declared
        b"$3\r\nabcd\r\n",  # longer than declared
        b"$3\r\nabc",  # missing CRLF
        b"$3\r\nabc\r",
        b"$3\r\nabc\n\r",
        b"$3\r\nabc\n",
        b"$3\nabc\r\n",  # bare LF after the header
        b"$3",
        b"$-1",
        b"$-1\r\n\r\n",  # trailing bytes
        b"$1\r\na\r\n$1\r\nb\r\n",  # two replies
        b"+OK",
        b"+OK\n",
        b"+OK\r\nX",
        b"+OK\r\n\r\n",
        b":1",
        b":1\n",
        b":1\r\n:1\r\n",
        b":1\r\n ",
        b"-1",
        b"-ERR x",
        # length / integer headers: ASCII digits and an optional '-' only
        b"$+3\r\nabc\r\n",
        b"$ 3\r\nabc\r\n",
        b"$3 \r\nabc\r\n",
        b"$3.0\r\nabc\r\n",
        b"$0x3\r\nabc\r\n",
        b"$1_0\r\n0123456789\r\n",
        "$\u0663\r\nabc\r\n".encode(),  # ARABIC-INDIC DIGIT THREE
        "$\uff13\r\nabc\r\n".encode(),  # FULLWIDTH DIGIT THREE
        "$³\r\nabc\r\n".encode(),  # SUPERSCRIPT THREE
        b"$\r\n\r\n",
        b"$-\r\n",
        b"$--1\r\n",
        b"$-2\r\n",
        b"$-1\r\nabc\r\n",
        b":+1\r\n",
        b": 1\r\n",
        b":1 \r\n",
        b":\r\n",
        b":-\r\n",
        b":--1\r\n",
        b":1e3\r\n",
        "*\u0661\r\n:1\r\n".encode(),  # ARABIC-INDIC DIGIT ONE
        b"*+1\r\n:1\r\n",
        b"*-1\r\n",  # RESP2 null array: not used by this service
        b"*1\r\n",
        b"*2\r\n$1\r\na\r\n",
        b"*1\r\n$1\r\na\r\nX",
        # type bytes and encodings
        b"?x\r\n",
        b"_\r\n",  # RESP3 null: the service never sends it
        b"#t\r\n",
        b"\r\n",
        b"+\xff\r\n",  # simple string not UTF-8
        b"-ERR \xff\xfe\r\n",  # error not UTF-8
        b"+O\nK\r\n",  # a lone CR or LF cannot be inside a line (the encoders refuse them as well)
        b"+OK\r\r\n",
        b"-ERR syntax\nerror\r\n",
        b"-\r\r\n",
    ],
)
def test_parse_reply_rejects_malformed(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_reply(payload)


def test_nesting_up_to_max_depth_is_accepted() -> None:
    payload = b"*1\r\n" * MAX_DEPTH + b":1\r\n"
    value = parse_reply(payload)
    for _ in range(MAX_DEPTH):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == 1


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100, 100_000])
def test_nesting_too_deep_is_a_protocol_error_not_recursion_error(depth: int) -> None:
    with pytest.raises(ProtocolError, match="nested"):
        parse_reply(b"*1\r\n" * depth + b":1\r\n")


@pytest.mark.parametrize(
    "payload",
    [
        b"$999999999999999999\r\nab\r\n",
        b"$999999999999999999\r\n",
        b"*999999999999999999\r\n:1\r\n",
        b"*99999999\r\n" + b":1\r\n" * 10,
        b"*1\r\n" * 7 + b"*999999999999999999\r\n",
        b"$" + b"9" * 19 + b"\r\nab\r\n",
        b"*" + b"9" * 40 + b"\r\n",
        b"$" + b"9" * 5000 + b"\r\nab\r\n",  # int() itself would raise ValueError past 4300 digits
        b":" + b"9" * 5000 + b"\r\n",
        b":-" + b"9" * 5000 + b"\r\n",
    ],
)
def test_huge_declared_lengths_fail_fast_with_protocol_error(payload: bytes) -> None:
    start = time.perf_counter()
    for _ in range(200):
        with pytest.raises(ProtocolError):
            parse_reply(payload)
    # no allocation or loop proportional to the declared size: 200 rejections take microseconds each
    assert time.perf_counter() - start < 1.0


def test_huge_declared_count_in_a_request_fails_fast() -> None:
    start = time.perf_counter()
    for _ in range(200):
        with pytest.raises(ProtocolError):
            parse_request(b"*999999999999999999\r\n$1\r\na\r\n")
    assert time.perf_counter() - start < 1.0


def test_sixty_five_thousand_byte_values_round_trip() -> None:
    # docs/design/protocol.md §1: the SDK tests store 6,500-byte keys and 65,000-byte values
    key, value = bytes(range(256)) * 25 + b"k" * 100, b"\r\n" * 32_500
    assert parse_request(encode_request(b"SET", key, value)) == [b"SET", key, value]
    assert parse_reply(encode_bulk(value)) == value


@pytest.mark.parametrize("value", [I64_MAX, I64_MIN, 10**18, -(10**18), 999_999_999_999_999_999])
def test_64_bit_integers_parse(value: int) -> None:
    assert parse_reply(encode_integer(value)) == value


@pytest.mark.parametrize("value", [I64_MAX + 1, I64_MIN - 1, 10**19])
def test_integers_outside_64_bits_are_refused(value: int) -> None:
    with pytest.raises(ProtocolError):
        parse_reply(encode_integer(value))


# ---------------------------------------------------------------------------------------------------------
# properties: round trips


@FAST
@given(st.lists(values_or_nasty, max_size=8))
def test_request_round_trip(args: list[bytes]) -> None:
    assert parse_request(encode_request(*args)) == args


@FAST
@given(values_or_nasty | st.none())
def test_bulk_round_trip(value: bytes | None) -> None:
    assert parse_reply(encode_bulk(value)) == value


@FAST
@given(st.integers(I64_MIN, I64_MAX))
@example(I64_MAX)
@example(I64_MIN)
@example(-1)
def test_integer_round_trip(value: int) -> None:
    assert parse_reply(encode_integer(value)) == value


@FAST
@given(line_text)
def test_simple_round_trip(text: str) -> None:
    assert parse_reply(encode_simple(text)) == SimpleString(text)


@FAST
@given(line_text)
@example("1")
@example("")
def test_error_round_trip(text: str) -> None:
    assert parse_reply(encode_error(text)) == ErrorReply(text)


@FAST
@given(replies)
def test_any_reply_round_trips(value: resp3.Reply) -> None:
    assert parse_reply(encode_reply(value)) == value


# ---------------------------------------------------------------------------------------------------------
# properties: never a crash, never a wrong value


def _check_reply_shape(value: resp3.Reply) -> None:
    if isinstance(value, list):
        for item in value:
            _check_reply_shape(item)
    else:
        assert value is None or isinstance(value, bytes | int | SimpleString | ErrorReply)
        assert not isinstance(value, bool)


@FUZZ
@given(garbage)
@example(b"\r\n")
@example(b"*1\r\n*1\r\n")
@example(b"-")
def test_parse_reply_on_arbitrary_bytes_raises_only_protocol_error(data: bytes) -> None:
    try:
        value = parse_reply(data)
    except ProtocolError:
        return
    _check_reply_shape(value)
    # whatever was accepted is a stable value: encoding it again gives the same value back
    assert parse_reply(encode_reply(value)) == value


@FUZZ
@given(garbage)
def test_parse_request_on_arbitrary_bytes_raises_only_protocol_error(data: bytes) -> None:
    try:
        args = parse_request(data)
    except ProtocolError:
        return
    assert isinstance(args, list) and all(type(a) is bytes for a in args)
    assert parse_request(encode_request(*args)) == args


@FAST
@given(replies, st.data())
def test_every_truncation_of_a_valid_reply_is_rejected(value: resp3.Reply, data: st.DataObject) -> None:
    payload = encode_reply(value)
    cut = data.draw(st.integers(0, len(payload) - 1), label="cut")
    with pytest.raises(ProtocolError):
        parse_reply(payload[:cut])


@FAST
@given(replies, st.binary(min_size=1, max_size=8))
def test_trailing_bytes_after_a_valid_reply_are_rejected(value: resp3.Reply, extra: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_reply(encode_reply(value) + extra)


@FAST
@given(st.lists(values_or_nasty, max_size=6), st.data())
def test_every_truncation_of_a_valid_request_is_rejected(args: list[bytes], data: st.DataObject) -> None:
    payload = encode_request(*args)
    cut = data.draw(st.integers(0, len(payload) - 1), label="cut")
    with pytest.raises(ProtocolError):
        parse_request(payload[:cut])


@FUZZ
@given(mutated(replies.map(encode_reply)))
def test_mutated_replies_raise_only_protocol_error(data: bytes) -> None:
    try:
        value = parse_reply(data)
    except ProtocolError:
        return
    _check_reply_shape(value)
    assert parse_reply(encode_reply(value)) == value


@FUZZ
@given(mutated(st.lists(values_or_nasty, max_size=6).map(lambda a: encode_request(*a))))
def test_mutated_requests_raise_only_protocol_error(data: bytes) -> None:
    try:
        args = parse_request(data)
    except ProtocolError:
        return
    assert all(type(a) is bytes for a in args)


# -- the request fast path: never a different answer from the general parser ------------------------------


def _general(data: bytes) -> list[bytes] | type[ProtocolError]:
    try:
        return resp3._parse_request_general(data)
    except ProtocolError:
        return ProtocolError


@FUZZ
@given(mutated(st.lists(values_or_nasty, max_size=6).map(lambda args: encode_request(*args))) | garbage)
@example(b"*1\r\n$-1\r\n")
@example(b"*1\r\n$+3\r\nGET\r\n")
@example(b"*1\r\n$03\r\nGET\r\n")
@example(b"*01\r\n$3\r\nGET\r\n")
@example(b"*1\r\n*1\r\n$1\r\nx\r\n")
@example(b"*0\r\n")
@example(b"*2\r\n$3\r\nGET\r\n")
@example(b"*1\r\n$3\r\nGETX\r\n")
def test_the_request_fast_path_accepts_only_what_the_general_parser_accepts_with_the_same_result(
    data: bytes,
) -> None:
    fast = resp3._parse_request_fast(data) if data[:1] == b"*" else None
    if fast is not None:
        assert _general(data) == fast
    try:
        answer: list[bytes] | type[ProtocolError] = parse_request(data)
    except ProtocolError:
        answer = ProtocolError
    assert answer == _general(data)  # parse_request, fast path or not, answers as the general parser


@given(st.lists(values_or_nasty, max_size=8))
def test_every_encoded_request_takes_the_fast_path(args: list[bytes]) -> None:
    assert resp3._parse_request_fast(encode_request(*args)) == args


@given(
    st.one_of(
        st.binary(max_size=40).map(lambda v: b"$%d\r\n%s\r\n" % (len(v), v)),
        st.tuples(st.binary(max_size=6), st.binary(max_size=20), st.binary(max_size=4)).map(
            lambda t: b"$" + t[0] + b"\r\n" + t[1] + t[2]
        ),
        st.sampled_from([b"+OK\r\n", b"+OK\r\nx", b"$-1\r\n", b"$01\r\nx\r\n", b"$+1\r\nx\r\n", b"$1\r\nxy\r\n"]),
    )
)
def test_the_fast_ways_of_parse_reply_agree_with_the_general_parser(data: bytes) -> None:
    try:
        value, pos = resp3._parse(data, 0, 0)
        expected: object = value if pos == len(data) else ProtocolError
    except ProtocolError:
        expected = ProtocolError
    try:
        got: object = resp3.parse_reply(data)
    except ProtocolError:
        got = ProtocolError
    assert got == expected
