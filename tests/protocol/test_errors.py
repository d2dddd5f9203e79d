"""The exception tree and the service error table (docs/design/protocol.md §3, docs/contributing.md house rule 4)."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given

import sskv_mapping
import sskv_mapping.errors as public_errors
from sskv_mapping import errors
from sskv_mapping._protocol.commands import Get
from sskv_mapping._protocol.error_texts import ERROR_TEXTS, service_error
from sskv_mapping._protocol.resp3 import encode_error
from sskv_mapping.errors import (
    ClockDriftError,
    ConfigurationError,
    FencingTokenLowerVersionError,
    FencingTokenRequiredError,
    FencingTokenSkewError,
    KeyLengthZeroError,
    MalformedTimestampError,
    MissingTimestampError,
    NotAuthorizedError,
    ProtocolError,
    QuotaExceededError,
    RequestSyntaxError,
    ResponseTooLargeError,
    RpcStatusError,
    ServiceError,
    StateStoreError,
    TimestampSkewError,
    UnknownCommandError,
    UnsupportedVersionError,
    WrongNumberOfArgumentsError,
)

from ._strategies import FAST, line_text

# Copied verbatim from docs/design/protocol.md §3, not from the code under test.
PROTOCOL_MD_TEXTS: list[tuple[str, type[ServiceError]]] = [
    (
        "the request timestamp is too far in the future; ensure that the client and broker system clocks "
        "are synchronized",
        TimestampSkewError,
    ),
    ("a fencing token is required for this request", FencingTokenRequiredError),
    (
        "the request fencing token timestamp is too far in the future; ensure that the client and broker "
        "system clocks are synchronized",
        FencingTokenSkewError,
    ),
    (
        "the request fencing token is a lower version than the fencing token protecting the resource",
        FencingTokenLowerVersionError,
    ),
    ("the quota has been exceeded", QuotaExceededError),
    ("syntax error", RequestSyntaxError),
    ("not authorized", NotAuthorizedError),
    ("unknown command", UnknownCommandError),
    ("wrong number of arguments", WrongNumberOfArgumentsError),
    ("missing timestamp", MissingTimestampError),
    ("malformed timestamp", MalformedTimestampError),
    ("the key length is zero", KeyLengthZeroError),
]


def test_table_has_exactly_the_twelve_documented_texts() -> None:
    assert len(PROTOCOL_MD_TEXTS) == 12
    assert dict(PROTOCOL_MD_TEXTS) == ERROR_TEXTS


def test_the_emulators_own_text_maps_to_its_class() -> None:
    """Not one of the service's texts: the emulator's answer to a request whose response would be over its
    broker's Maximum Packet Size."""
    text = "the response is too large for the broker's maximum packet size"
    exc = service_error(text)
    assert type(exc) is ResponseTooLargeError and exc.text == text == ResponseTooLargeError.TEXT
    assert text not in ERROR_TEXTS


@pytest.mark.parametrize(("text", "cls"), PROTOCOL_MD_TEXTS, ids=[c.__name__ for _, c in PROTOCOL_MD_TEXTS])
def test_each_text_maps_to_its_class_with_text_kept(text: str, cls: type[ServiceError]) -> None:
    exc = service_error(text)
    assert type(exc) is cls
    assert exc.text == text
    assert str(exc) == text
    assert text == cls.TEXT
    assert cls().text == text  # raising the class bare (the emulator does) gives the canonical text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "something new",
        "Syntax error",  # exact match only: case matters
        "syntax error ",
        " syntax error",  # what "-ERR  syntax error" (two spaces) leaves
        "syntax",
        # the article's misspelling; the service says "than"
        "the request fencing token is a lower version that the fencing token protecting the resource",
        "ERR syntax error",
    ],
)
def test_unknown_text_gives_the_base_class_with_text_kept(text: str) -> None:
    exc = service_error(text)
    assert type(exc) is ServiceError
    assert exc.text == text


@pytest.mark.parametrize(
    ("payload", "text"),
    [(b"-ERR  syntax error\r\n", " syntax error"), (b"-ERR: not authorized\r\n", "ERR: not authorized")],
    ids=["two-spaces", "article-style-colon"],
)
def test_near_misses_on_the_wire_are_not_known_errors_and_keep_their_text(payload: bytes, text: str) -> None:
    with pytest.raises(ServiceError) as info:
        Get(b"k").decode(payload)
    assert type(info.value) is ServiceError
    assert info.value.text == text


@FAST
@given(line_text)
def test_any_err_text_round_trips_through_the_wire(text: str) -> None:
    with pytest.raises(ServiceError) as info:
        Get(b"k").decode(encode_error(text))
    assert info.value.text == text
    assert type(info.value) is ERROR_TEXTS.get(text, ServiceError)


# ---------------------------------------------------------------------------------------------------------
# the tree


ALL_CLASSES = [getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)]


def test_every_exported_class_is_a_state_store_error() -> None:
    assert len(ALL_CLASSES) >= 25
    for cls in ALL_CLASSES:
        assert issubclass(cls, StateStoreError), cls


def test_no_state_store_error_is_a_lookup_error() -> None:
    # a network failure must never look like "key absent" to dict.get
    for cls in ALL_CLASSES:
        assert not issubclass(cls, LookupError), cls


@pytest.mark.parametrize(
    ("cls", "bases"),
    [
        (errors.ConfigurationError, (StateStoreError, ValueError)),
        (errors.ClientStateError, (StateStoreError, RuntimeError)),
        (errors.BrokerConnectError, (errors.TransportError,)),
        (errors.ConnectionLostError, (errors.TransportError,)),
        (errors.RequestTimeoutError, (errors.TransportError, TimeoutError)),
        (UnsupportedVersionError, (ProtocolError,)),
        (RpcStatusError, (ServiceError,)),
        (ClockDriftError, (StateStoreError,)),
        (errors.LockError, (StateStoreError,)),
        (errors.CodecError, (StateStoreError, ValueError)),
        (errors.EncodeError, (errors.CodecError,)),
        (errors.DecodeError, (errors.CodecError,)),
        *((cls, (ServiceError,)) for _, cls in PROTOCOL_MD_TEXTS),
    ],
)
def test_tree_shape(cls: type[Exception], bases: tuple[type[Exception], ...]) -> None:
    for base in bases:
        assert issubclass(cls, base)


@pytest.mark.parametrize("cls", [ProtocolError, ServiceError, ClockDriftError, errors.TransportError])
def test_the_main_branches_are_disjoint(cls: type[Exception]) -> None:
    others = {ProtocolError, ServiceError, ClockDriftError, errors.TransportError} - {cls}
    assert not any(issubclass(cls, other) for other in others)


def test_public_modules_re_export_the_same_classes() -> None:
    for cls in ALL_CLASSES:
        assert getattr(public_errors, cls.__name__) is cls
        assert getattr(sskv_mapping, cls.__name__) is cls


# ---------------------------------------------------------------------------------------------------------
# RpcStatusError


def test_rpc_status_error_keeps_status_and_message() -> None:
    exc = RpcStatusError(503, "service unavailable")
    assert exc.status == 503
    assert exc.text == "service unavailable"
    assert str(exc) == "RPC status 503: service unavailable"


def test_rpc_status_error_without_message() -> None:
    exc = RpcStatusError(500)
    assert exc.text == ""
    assert str(exc) == "RPC status 500"


@pytest.mark.parametrize(
    "exc",
    [
        RpcStatusError(408, "timeout"),
        RpcStatusError(500),
        ServiceError("future text"),
        RequestSyntaxError(),
        KeyLengthZeroError(),
        ProtocolError("bad"),
        ConfigurationError("bad setting"),
    ],
    ids=repr,
)
def test_errors_survive_pickle_and_copy(exc: Exception) -> None:
    # exceptions cross process boundaries (ProcessPoolExecutor, multiprocessing) and get copied by loggers
    for clone in (pickle.loads(pickle.dumps(exc)), copy.copy(exc), copy.deepcopy(exc)):
        assert type(clone) is type(exc)
        assert str(clone) == str(exc)
        assert getattr(clone, "text", None) == getattr(exc, "text", None)
        assert getattr(clone, "status", None) == getattr(exc, "status", None)
