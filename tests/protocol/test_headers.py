"""MQTT 5 user properties and response header checks (docs/design/protocol.md §1, §2, §3)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sskv_mapping._protocol.headers import (
    CONTENT_TYPE,
    check_response,
    expiry_seconds,
    request_properties,
    response_properties,
)
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping.errors import (
    ProtocolError,
    RpcStatusError,
    ServiceError,
    StateStoreError,
    UnsupportedVersionError,
)

from ._strategies import FAST, FUZZ, hlcs

H = HybridLogicalClock
TS = H(1696374425000, 1, "StateStore")
OK = {"__stat": "200", "__protVer": "1.0"}


# ---------------------------------------------------------------------------------------------------------
# request properties


def test_request_properties_every_request_carries() -> None:
    props = request_properties("client-1", H(5, 6, "client-1"))
    assert dict(props) == {
        "__ts": "000000000000005:00006:client-1",
        "__srcId": "client-1",
        "__protVer": "1.0",
        "$partition": "client-1",
        "$high_priority": "",
    }
    assert len(props) == len(dict(props))  # no duplicates


def test_request_properties_with_fencing_token_and_persistence() -> None:
    token = H(1696374425000, 0, "StateStore")
    props = dict(request_properties("c", H(5, 6, "c"), fencing_token=token, persist=True))
    assert props["__ft"] == "001696374425000:00000:StateStore"
    assert props["aio-persistence"] == "true"


def test_request_properties_omit_optional_ones_by_default() -> None:
    props = dict(request_properties("c", H(5, 6, "c")))
    assert "__ft" not in props
    assert "aio-persistence" not in props


def test_response_properties() -> None:
    assert dict(response_properties(TS)) == {"__stat": "200", "__protVer": "1.0", "__ts": str(TS)}
    # GET miss: __ts absent (clients rely on this)
    assert dict(response_properties(None)) == {"__stat": "200", "__protVer": "1.0"}
    assert dict(response_properties(None, 503, "busy")) == {
        "__stat": "503",
        "__protVer": "1.0",
        "__stMsg": "busy",
    }


# ---------------------------------------------------------------------------------------------------------
# check_response


@pytest.mark.parametrize(
    ("props", "content_type", "expected"),
    [
        pytest.param({**OK, "__ts": str(TS)}, CONTENT_TYPE, TS, id="ok-returns-its-ts"),
        pytest.param({**OK, "__ts": "1696374425000:1:StateStore"}, None, TS, id="ts-may-be-unpadded"),
        pytest.param(OK, None, None, id="ok-without-ts-returns-none"),
        pytest.param({"__stat": "204", "__protVer": "1.0", "__ts": str(TS)}, None, TS, id="status-204-is-ok"),
        pytest.param([("__ts", str(TS)), ("__protVer", "1.0"), ("__stat", "200")], None, TS, id="pairs-in-any-order"),
        pytest.param(
            [("__stat", "200"), ("__protVer", "1.0"), ("x-note", "a"), ("x-note", "b"), ("__ts", str(TS))],
            None,
            TS,
            id="other-repeated-user-properties-are-ignored",
        ),
        pytest.param(response_properties(TS), CONTENT_TYPE, TS, id="round-trip-with-response-properties"),
        pytest.param(response_properties(None), None, None, id="round-trip-of-a-miss"),
    ],
)
def test_accepted_responses(
    props: Mapping[str, str] | Iterable[tuple[str, str]], content_type: str | None, expected: HybridLogicalClock | None
) -> None:
    assert check_response(props, content_type) == expected


@pytest.mark.parametrize("name", ["__stat", "__ts", "__protVer", "__stMsg", "__supProtMajVer"])
def test_a_repeated_response_header_is_a_protocol_error(name: str) -> None:
    """Which of two ``__stat`` (or ``__ts``...) to believe? Neither: the response is malformed."""
    values = {"__stat": "200", "__ts": str(TS), "__protVer": "1.0", "__stMsg": "x", "__supProtMajVer": "1"}
    pairs = [("__stat", "200"), ("__protVer", "1.0"), (name, values[name]), (name, values[name])]
    with pytest.raises(ProtocolError, match=f"repeats the {name} property"):
        check_response(pairs, None)


def test_missing_stat_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as info:
        check_response({"__protVer": "1.0", "__ts": str(TS)}, None)
    assert not isinstance(info.value, ServiceError)
    assert "__stat" in str(info.value)


@pytest.mark.parametrize("content_type", ["application/json", "", "text/plain", "application/octet-stream; x=1"])
def test_unexpected_content_type_is_a_protocol_error(content_type: str) -> None:
    with pytest.raises(ProtocolError):
        check_response({**OK, "__ts": str(TS)}, content_type)


@pytest.mark.parametrize(
    ("status", "message"),
    [(400, "bad header"), (408, "timeout"), (500, "internal error"), (503, "unavailable"), (401, "")],
)
def test_rpc_status_errors_keep_status_and_message(status: int, message: str) -> None:
    with pytest.raises(RpcStatusError) as info:
        check_response({"__stat": str(status), "__protVer": "1.0", "__stMsg": message}, None)
    assert info.value.status == status
    assert info.value.text == message


def test_rpc_status_error_without_message() -> None:
    with pytest.raises(RpcStatusError) as info:
        check_response({"__stat": "500", "__protVer": "1.0"}, None)
    assert info.value.status == 500
    assert info.value.text == ""


def test_status_505_is_unsupported_version() -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        check_response({"__stat": "505", "__protVer": "1.0", "__supProtMajVer": "2"}, None)
    assert "2" in str(info.value)


@pytest.mark.parametrize("version", ["2.0", "0.9", "10.0", "2"])
def test_protocol_major_other_than_1_is_unsupported(version: str) -> None:
    with pytest.raises(UnsupportedVersionError):
        check_response({"__stat": "200", "__protVer": version}, None)


@pytest.mark.parametrize("version", ["1.0", "1.5", "1", "01.0"])
def test_protocol_major_1_is_accepted(version: str) -> None:
    assert check_response({"__stat": "200", "__protVer": version, "__ts": str(TS)}, None) == TS


@pytest.mark.parametrize(
    "props",
    [
        {"__stat": "", "__protVer": "1.0"},
        {"__stat": "abc", "__protVer": "1.0"},
        {"__stat": "+200", "__protVer": "1.0"},
        {"__stat": " 200", "__protVer": "1.0"},
        {"__stat": "200 ", "__protVer": "1.0"},
        {"__stat": "2000", "__protVer": "1.0"},
        {"__stat": "\uff12\uff10\uff10", "__protVer": "1.0"},  # fullwidth digits
        {"__stat": "200", "__protVer": ""},
        {"__stat": "200", "__protVer": "x.0"},
        {"__stat": "200", "__protVer": "v1"},
        {"__stat": "200", "__protVer": "\u0661.0"},
        {"__stat": "200", "__protVer": "9" * 5000 + ".0"},  # int() alone would raise ValueError here
        {"__stat": "200", "__protVer": "1.0", "__ts": ""},
        {"__stat": "200", "__protVer": "1.0", "__ts": "garbage"},
        {"__stat": "200", "__protVer": "1.0", "__ts": "1:2:a:b"},
    ],
)
def test_malformed_headers_are_protocol_errors(props: dict[str, str]) -> None:
    with pytest.raises(ProtocolError):
        check_response(props, None)


# ---------------------------------------------------------------------------------------------------------
# expiry_seconds


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        (0.1, 1),
        (1.0, 1),
        (1.5, 2),
        (0, 1),
        (0.0001, 1),
        (2.0, 2),
        (2.000001, 3),
        (10, 10),
        (10.0, 10),
        (-3, 1),
    ],
)
def test_expiry_seconds_rounds_up_to_at_least_one(timeout: float, seconds: int) -> None:
    result = expiry_seconds(timeout)
    assert result == seconds
    assert type(result) is int


@FAST
@given(st.floats(min_value=0, max_value=10**9, allow_nan=False))
def test_expiry_seconds_property(timeout: float) -> None:
    result = expiry_seconds(timeout)
    assert result >= 1
    assert result >= timeout
    assert result == max(1, math.ceil(timeout))
    assert result - timeout < 1 or result == 1


# ---------------------------------------------------------------------------------------------------------
# properties


@FAST
@given(st.none() | hlcs)
def test_response_properties_round_trip(version: HybridLogicalClock | None) -> None:
    assert check_response(response_properties(version), CONTENT_TYPE) == version


_names = st.sampled_from(["__stat", "__protVer", "__ts", "__stMsg", "__supProtMajVer", "other"])
_values = st.sampled_from(
    [
        "200",
        "204",
        "500",
        "505",
        "1.0",
        "2.0",
        "1",
        "",
        str(TS),
        "9" * 5000,
        "9" * 5000 + ".0",
        "\u0661",
        "\uff12\uff10\uff10",
    ]
) | st.text(max_size=12)


@FUZZ
@given(
    st.lists(st.tuples(_names, _values), max_size=6),
    st.none() | st.sampled_from([CONTENT_TYPE, ""]) | st.text(max_size=10),
)
@example([("__stat", "200"), ("__protVer", "9" * 5000)], None)
def test_check_response_raises_only_protocol_or_rpc_errors(
    props: list[tuple[str, str]], content_type: str | None
) -> None:
    try:
        ts = check_response(props, content_type)
    except RpcStatusError as exc:
        stat = dict(props)["__stat"]
        assert exc.status == int(stat) and exc.status not in (200, 204, 505)
        return
    except ProtocolError:
        return
    # accepted: really a 200/204 of major version 1 with the right content type, and the right __ts
    d = dict(props)
    assert content_type in (None, CONTENT_TYPE)
    assert d["__stat"] in ("200", "204")
    assert "__protVer" not in d or int(d["__protVer"].split(".")[0]) == 1
    assert ts == (H.parse(d["__ts"]) if "__ts" in d else None)


_names = st.sampled_from(["__stat", "__protVer", "__ts", "__stMsg", "__supProtMajVer", "other"])
_values = st.sampled_from(["200", "204", "404", "1.0", "2.0", "1.5", "", "x", "1696374425000:1:StateStore", "12:0:n"])


@FAST
@given(
    st.lists(st.tuples(_names, _values), min_size=3, max_size=3),
    st.sampled_from([None, "application/octet-stream", "text/plain"]),
)
@example([("__stat", "200"), ("__protVer", "1.0"), ("__ts", "1696374425000:1:StateStore")], None)
@example([("__stat", "404"), ("__protVer", "1.0"), ("__ts", "1696374425000:1:StateStore")], None)
@example([("other", "200"), ("__protVer", "1.0"), ("__ts", "1696374425000:1:StateStore")], None)
@example([("__stat", "200"), ("__protVer", "2.0"), ("__ts", "1696374425000:1:StateStore")], None)
@example([("__stat", "200"), ("__protVer", "1.0"), ("__ts", "1:2")], "application/octet-stream")
@example([("__stat", "200"), ("__protVer", "1.0"), ("__ts", "1:2:n")], "text/plain")
def test_a_received_responses_headers_check_as_the_general_way(
    pairs: list[tuple[str, str]], content_type: str | None
) -> None:
    """A received message's three properties (a tuple: the quick test for the usual response) give what the same
    pairs in a list give (the one pass over the names), errors included."""

    def outcome(props: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> object:
        try:
            return check_response(props, content_type)
        except StateStoreError as exc:  # ProtocolError and RpcStatusError among them
            return (type(exc), str(exc))

    assert outcome(tuple(pairs)) == outcome(list(pairs))
