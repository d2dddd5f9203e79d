"""Commands (docs/design/protocol.md §1 to §3): exact request bytes, reply decoding, and the service-side parser."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.commands import (
    Command,
    Delete,
    Get,
    KeyNotify,
    Set,
    SetCondition,
    VDelete,
    VDeleteResult,
    parse_command,
)
from sskv_mapping._protocol.error_texts import ERROR_TEXTS
from sskv_mapping._protocol.resp3 import encode_request as req
from sskv_mapping.errors import (
    KeyLengthZeroError,
    ProtocolError,
    RequestSyntaxError,
    ServiceError,
    UnknownCommandError,
    WrongNumberOfArgumentsError,
)

from ._strategies import FAST, FUZZ, encode_reply, garbage, keys_or_nasty, mutated, replies, values_or_nasty

SET_EXAMPLE = b"*6\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n1000\r\n"

# ---------------------------------------------------------------------------------------------------------
# encoding (client side)


def test_set_nex_is_a_bare_token_before_px() -> None:
    assert resp3.parse_request(Set(b"lock", b"me", SetCondition.NEX, 500).encode()) == [
        b"SET",
        b"lock",
        b"me",
        b"NEX",
        b"PX",
        b"500",
    ]
    assert resp3.parse_request(Set(b"lock", b"me", SetCondition.NEX).encode()) == [
        b"SET",
        b"lock",
        b"me",
        b"NEX",
    ]


def test_set_with_px_only() -> None:
    assert resp3.parse_request(Set(b"k", b"v", expiry_ms=1).encode()) == [b"SET", b"k", b"v", b"PX", b"1"]


@pytest.mark.parametrize(
    ("command", "payload"),
    [
        (Set(b"key", b"value", SetCondition.NX, 1000), SET_EXAMPLE),  # the spec's own example
        (Set(b"k", b"v"), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"),
        (Set(b"k", b""), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"),  # an empty value is $0
        (Get(b"k"), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
        (Delete(b"k"), b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n"),
        (VDelete(b"k", b"v"), b"*3\r\n$4\r\nVDEL\r\n$1\r\nk\r\n$1\r\nv\r\n"),
        (KeyNotify(b"k"), b"*2\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n"),
        (KeyNotify(b"k", stop=True), b"*3\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n$4\r\nSTOP\r\n"),
        (Get(b"\r\n\x00"), b"*2\r\n$3\r\nGET\r\n$3\r\n\r\n\x00\r\n"),
    ],
)
def test_encode_exact_bytes(command: Command, payload: bytes) -> None:
    assert command.encode() == payload
    assert resp3.parse_request(payload)[0] == command.VERB


# ---------------------------------------------------------------------------------------------------------
# decoding replies (client side), every row of docs/design/protocol.md §2


@pytest.mark.parametrize(
    ("command", "payload", "decoded"),
    [
        (Get(b"k"), b"$5\r\nvalue\r\n", b"value"),
        (Get(b"k"), b"$0\r\n\r\n", b""),  # a hit with an empty value is not a miss
        (Get(b"k"), b"$4\r\n\r\n\x00\xff\r\n", b"\r\n\x00\xff"),
        (Get(b"k"), b"$-1\r\n", None),  # the miss
        (Set(b"k", b"v", SetCondition.NX), b"+OK\r\n", True),
        (Set(b"k", b"v", SetCondition.NX), b":-1\r\n", False),
        (Set(b"k", b"v", SetCondition.NX), b"-1\r\n", False),
        (Delete(b"k"), b":1\r\n", True),
        (Delete(b"k"), b":0\r\n", False),
        (VDelete(b"k", b"v"), b":1\r\n", VDeleteResult.DELETED),
        (VDelete(b"k", b"v"), b":0\r\n", VDeleteResult.NOT_FOUND),
        (VDelete(b"k", b"v"), b":-1\r\n", VDeleteResult.VALUE_MISMATCH),
        (VDelete(b"k", b"v"), b"-1\r\n", VDeleteResult.VALUE_MISMATCH),  # the article's legacy spelling
        (KeyNotify(b"k"), b"+OK\r\n", True),  # registered even for a missing key
        (KeyNotify(b"k", stop=True), b"+OK\r\n", True),
        (KeyNotify(b"k", stop=True), b":0\r\n", False),  # was not registered
    ],
)
def test_decode_outcomes(command: Command, payload: bytes, decoded: object) -> None:
    result = command.decode(payload)
    assert result == decoded and type(result) is type(decoded)


def test_vdelete_result_truthiness() -> None:
    assert bool(VDeleteResult.DELETED) is True
    assert bool(VDeleteResult.NOT_FOUND) is False
    assert bool(VDeleteResult.VALUE_MISMATCH) is False


@pytest.mark.parametrize(
    ("command", "payload"),
    [
        (Get(b"k"), b"+OK\r\n"),
        (Get(b"k"), b":1\r\n"),
        (Get(b"k"), b"-1\r\n"),
        (Get(b"k"), b"*1\r\n$1\r\nv\r\n"),
        (Set(b"k", b"v"), b":0\r\n"),
        (Set(b"k", b"v"), b":1\r\n"),
        (Set(b"k", b"v"), b"+QUEUED\r\n"),
        (Set(b"k", b"v"), b"+ok\r\n"),
        (Set(b"k", b"v"), b"$2\r\nOK\r\n"),
        (Set(b"k", b"v"), b"$-1\r\n"),
        (Delete(b"k"), b":-1\r\n"),
        (Delete(b"k"), b"-1\r\n"),
        (Delete(b"k"), b":2\r\n"),
        (Delete(b"k"), b"+OK\r\n"),
        (Delete(b"k"), b"$1\r\n1\r\n"),
        (VDelete(b"k", b"v"), b":2\r\n"),
        (VDelete(b"k", b"v"), b":-2\r\n"),
        (VDelete(b"k", b"v"), b"+OK\r\n"),
        (KeyNotify(b"k"), b":0\r\n"),  # only STOP answers :0
        (KeyNotify(b"k"), b":1\r\n"),
        (KeyNotify(b"k", stop=True), b":1\r\n"),
        (KeyNotify(b"k", stop=True), b"*0\r\n"),
    ],
)
def test_reply_of_the_wrong_shape_is_a_protocol_error(command: Command, payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        command.decode(payload)


ALL_COMMANDS: list[Command] = [
    Get(b"k"),
    Set(b"k", b"v"),
    Set(b"k", b"v", SetCondition.NEX, 10),
    Delete(b"k"),
    VDelete(b"k", b"v"),
    KeyNotify(b"k"),
    KeyNotify(b"k", stop=True),
]


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=repr)
@pytest.mark.parametrize("text", sorted(ERROR_TEXTS))
def test_every_command_maps_every_error_text(command: Command, text: str) -> None:
    with pytest.raises(ERROR_TEXTS[text]) as info:
        command.decode(resp3.encode_error(text))
    assert type(info.value) is ERROR_TEXTS[text]
    assert info.value.text == text


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=repr)
def test_every_command_keeps_an_unknown_error_text(command: Command) -> None:
    with pytest.raises(ServiceError) as info:
        command.decode(b"-ERR the service learned a new trick\r\n")
    assert type(info.value) is ServiceError
    assert info.value.text == "the service learned a new trick"


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=repr)
@pytest.mark.parametrize("payload", [b"", b"+OK", b"$5\r\nval\r\n", b"+OK\r\n\r\n", b":1\r\n:1\r\n", b"\xff"])
def test_every_command_turns_malformed_replies_into_protocol_errors(command: Command, payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        command.decode(payload)


# ---------------------------------------------------------------------------------------------------------
# parse_command (service side)


def test_parse_command_set_example() -> None:
    assert parse_command(SET_EXAMPLE) == Set(b"key", b"value", SetCondition.NX, 1000)


@pytest.mark.parametrize(
    ("args", "command"),
    [
        ([b"GET", b"k"], Get(b"k")),
        ([b"get", b"k"], Get(b"k")),
        ([b"gEt", b"k"], Get(b"k")),
        ([b"DEL", b"k"], Delete(b"k")),
        ([b"del", b"k"], Delete(b"k")),
        ([b"VDEL", b"k", b"v"], VDelete(b"k", b"v")),
        ([b"vdel", b"k", b""], VDelete(b"k", b"")),
        ([b"KEYNOTIFY", b"k"], KeyNotify(b"k")),
        ([b"keynotify", b"k", b"stop"], KeyNotify(b"k", stop=True)),
        ([b"KEYNOTIFY", b"k", b"STOP"], KeyNotify(b"k", stop=True)),
        ([b"SET", b"k", b"v"], Set(b"k", b"v")),
        ([b"set", b"k", b""], Set(b"k", b"")),
        ([b"SET", b"k", b"v", b"NX"], Set(b"k", b"v", SetCondition.NX)),
        ([b"SET", b"k", b"v", b"nex"], Set(b"k", b"v", SetCondition.NEX)),
        ([b"SET", b"k", b"v", b"px", b"1"], Set(b"k", b"v", expiry_ms=1)),
        ([b"SET", b"k", b"v", b"NEX", b"PX", b"30000"], Set(b"k", b"v", SetCondition.NEX, 30000)),
        ([b"Set", b"k", b"v", b"Nx", b"pX", b"0010"], Set(b"k", b"v", SetCondition.NX, 10)),
        # verbs and options are case-insensitive, keys and values are not
        ([b"SET", b"Key", b"NX"], Set(b"Key", b"NX")),
        ([b"GET", b"\r\n\x00"], Get(b"\r\n\x00")),
    ],
)
def test_parse_command_accepts(args: list[bytes], command: Command) -> None:
    assert parse_command(req(*args)) == command


#: requests the parser refuses, with the error class and the ``-ERR`` text the service answers them with
WRONG_ARITY = ("wrong number of arguments", WrongNumberOfArgumentsError)
UNKNOWN = ("unknown command", UnknownCommandError)
EMPTY_KEY = ("the key length is zero", KeyLengthZeroError)
SYNTAX = ("syntax error", RequestSyntaxError)
REFUSED: list[tuple[list[bytes] | bytes, tuple[str, type[ServiceError]]]] = [
    ([b"GET"], WRONG_ARITY),
    ([b"GET", b"k", b"x"], WRONG_ARITY),
    ([b"DEL"], WRONG_ARITY),
    ([b"DEL", b"k", b"x"], WRONG_ARITY),
    ([b"VDEL", b"k"], WRONG_ARITY),
    ([b"VDEL", b"k", b"v", b"x"], WRONG_ARITY),
    ([b"KEYNOTIFY"], WRONG_ARITY),
    ([b"KEYNOTIFY", b"k", b"STOP", b"x"], WRONG_ARITY),
    ([b"SET"], WRONG_ARITY),
    ([b"SET", b"k"], WRONG_ARITY),
    ([b"SET", b"k", b"v", b"NX", b"PX", b"1", b"x"], WRONG_ARITY),
    *[([verb, b"k"], UNKNOWN) for verb in [b"PING", b"HGET", b"SCANX", b"GETX", b"", b"SET ", b"\xff"]],
    ([b"GET", b""], EMPTY_KEY),
    ([b"DEL", b""], EMPTY_KEY),
    ([b"VDEL", b"", b"v"], EMPTY_KEY),
    ([b"KEYNOTIFY", b""], EMPTY_KEY),
    ([b"KEYNOTIFY", b"", b"STOP"], EMPTY_KEY),
    ([b"SET", b"", b"v"], EMPTY_KEY),
    ([b"SET", b"k", b"v", b"PX"], SYNTAX),  # PX without milliseconds
    ([b"SET", b"k", b"v", b"PX", b"0"], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"-1"], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"+5"], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b" 5"], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"5 "], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"1.5"], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"1e3"], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b""], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"abc"], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", "٣".encode()], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"9" * 40], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"100", b"NX"], SYNTAX),  # the condition always comes before PX
    ([b"SET", b"k", b"v", b"PX", b"100", b"NEX"], SYNTAX),
    ([b"SET", b"k", b"v", b"NX", b"NX"], SYNTAX),
    ([b"SET", b"k", b"v", b"NX", b"NEX"], SYNTAX),
    ([b"SET", b"k", b"v", b"XX"], SYNTAX),
    ([b"SET", b"k", b"v", b"NEX", b"value"], SYNTAX),  # NEX is a bare token, not "NEX <value>"
    ([b"SET", b"k", b"v", b"EX", b"10"], SYNTAX),
    ([b"SET", b"k", b"v", b"PX", b"10", b"PX"], SYNTAX),
    ([b"KEYNOTIFY", b"k", b"START"], SYNTAX),
    ([b"KEYNOTIFY", b"k", b""], SYNTAX),
    # payloads that are no RESP array of bulk strings at all
    (b"", SYNTAX),
    (b"GET k\r\n", SYNTAX),  # inline commands are not RESP
    (b"*0\r\n", SYNTAX),
    (b"$3\r\nGET\r\n", SYNTAX),
    (b"*2\r\n$3\r\nGET\r\n:1\r\n", SYNTAX),
    (b"*2\r\n$3\r\nGET\r\n$-1\r\n", SYNTAX),
    (b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nX", SYNTAX),
    (b"*2\r\n$3\r\nGET\r\n$2\r\nk\r\n", SYNTAX),
    (b"*2\r\n$3\r\nGET\r\n*1\r\n$1\r\nk\r\n", SYNTAX),
    (b"*999999999999999999\r\n$3\r\nGET\r\n", SYNTAX),
    (b"\xff\xfe", SYNTAX),
]


@pytest.mark.parametrize(("request_", "refusal"), REFUSED)
def test_parse_command_refuses(request_: list[bytes] | bytes, refusal: tuple[str, type[ServiceError]]) -> None:
    """An argument list (encoded as a request) or a raw payload: the typed error, with the service's text."""
    text, error = refusal
    with pytest.raises(error) as info:
        parse_command(req(*request_) if isinstance(request_, list) else request_)
    assert info.value.text == text


# ---------------------------------------------------------------------------------------------------------
# properties


commands: st.SearchStrategy[Command] = st.one_of(
    st.builds(Get, keys_or_nasty),
    st.builds(Delete, keys_or_nasty),
    st.builds(VDelete, keys_or_nasty, values_or_nasty),
    st.builds(KeyNotify, keys_or_nasty, st.booleans()),
    st.builds(
        Set,
        keys_or_nasty,
        values_or_nasty,
        st.none() | st.sampled_from(SetCondition),
        st.none() | st.integers(1, 10**18 - 1),
    ),
)


@FAST
@given(commands)
def test_encode_then_parse_command_round_trips(command: Command) -> None:
    assert parse_command(command.encode()) == command


_WORDS = [b"GET", b"SET", b"DEL", b"VDEL", b"KEYNOTIFY", b"NX", b"NEX", b"PX", b"STOP", b"1", b"0", b"-1"]
_arg = st.sampled_from(_WORDS) | st.sampled_from(_WORDS).map(bytes.lower) | st.binary(max_size=4)


@FUZZ
@given(st.lists(_arg, max_size=7))
def test_parse_command_on_any_argument_list_never_returns_a_wrong_command(args: list[bytes]) -> None:
    try:
        command = parse_command(req(*args))
    except ServiceError as exc:
        assert type(exc) in set(ERROR_TEXTS.values())
        return
    # what was parsed is exactly what was sent, with only verbs and options upper-cased
    sent = resp3.parse_request(command.encode())
    assert len(sent) == len(args)
    for i, (got, original) in enumerate(zip(sent, args, strict=True)):
        if isinstance(command, Set) and command.expiry_ms is not None and i == len(sent) - 1:
            assert int(got) == int(original) == command.expiry_ms  # "010" is read as 10
        else:
            assert got == original or (got == original.upper() and got in _WORDS)


@FUZZ
@given(garbage | mutated(commands.map(lambda c: c.encode())))
@example(b"*1\r\n$3\r\nGET\r\n")
def test_parse_command_raises_only_service_errors(payload: bytes) -> None:
    try:
        command = parse_command(payload)
    except ServiceError as exc:
        assert not isinstance(exc, ProtocolError)
        assert exc.text in ERROR_TEXTS
        return
    assert parse_command(command.encode()) == command


def _expected(command: Command, reply: resp3.Reply) -> object:
    """The outcome docs/design/protocol.md §2 prescribes for ``reply``; a ProtocolError class for anything else."""
    if isinstance(reply, resp3.ErrorReply):
        return ERROR_TEXTS.get(reply.text, ServiceError)
    ok = reply == resp3.SimpleString("OK")
    if isinstance(command, Get):
        return reply if reply is None or isinstance(reply, bytes) else ProtocolError
    if isinstance(command, Set):
        return True if ok else False if reply == -1 and type(reply) is int else ProtocolError
    if isinstance(command, Delete):
        return {1: True, 0: False}.get(reply, ProtocolError) if type(reply) is int else ProtocolError
    if isinstance(command, VDelete):
        table = {1: VDeleteResult.DELETED, 0: VDeleteResult.NOT_FOUND, -1: VDeleteResult.VALUE_MISMATCH}
        return table.get(reply, ProtocolError) if type(reply) is int else ProtocolError
    assert isinstance(command, KeyNotify)
    if ok:
        return True
    return False if command.stop and reply == 0 and type(reply) is int else ProtocolError


_interesting_replies = replies | st.sampled_from(
    [
        resp3.SimpleString("OK"),
        -1,
        0,
        1,
        None,
        b"",
        *(resp3.ErrorReply(t) for t in ERROR_TEXTS),
        resp3.ErrorReply("brand new"),
    ]
)


@FAST
@given(st.sampled_from(ALL_COMMANDS), _interesting_replies)
def test_decode_matches_protocol_md_for_every_reply(command: Command, reply: resp3.Reply) -> None:
    expected = _expected(command, reply)
    payload = encode_reply(reply)
    if isinstance(expected, type) and issubclass(expected, Exception):
        with pytest.raises(expected) as info:
            command.decode(payload)
        assert type(info.value) is expected
        if isinstance(reply, resp3.ErrorReply):
            assert isinstance(info.value, ServiceError) and info.value.text == reply.text
    else:
        assert command.decode(payload) == expected


@FUZZ
@given(st.sampled_from(ALL_COMMANDS), garbage | mutated(replies.map(encode_reply)))
@example(Get(b"k"), b"-1\r\n")
def test_decode_of_arbitrary_bytes_raises_only_protocol_or_service_errors(command: Command, payload: bytes) -> None:
    try:
        result = command.decode(payload)
    except ServiceError as exc:
        # only a well-formed -ERR line yields a ServiceError, with its text kept
        reply = resp3.parse_reply(payload)
        assert isinstance(reply, resp3.ErrorReply) and exc.text == reply.text
        return
    except ProtocolError:
        return
    assert result == _expected(command, resp3.parse_reply(payload))


@given(st.binary(min_size=1, max_size=300), st.binary(max_size=300))
def test_get_and_plain_set_encode_as_encode_request_does(key: bytes, value: bytes) -> None:
    assert Get(key).encode() == resp3.encode_request(b"GET", key)
    assert Set(key, value).encode() == resp3.encode_request(b"SET", key, value)
