"""K8S-SAT re-authentication timing and token reading (``_transport/sat.py``, ``sat.read_sat_token``), without a
broker: the pure rules on an injected clock. Over real sockets: ``tests/security/test_sat_reauth.py``."""

from __future__ import annotations

import base64
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping import BrokerConnectError, ConfigurationError, ConnectionSettings
from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_publish import MalformedPacketError
from sskv_mapping._transport.sat import RefreshPlan, SatSession, jwt_times, margin, read_sat_token

T0 = 1_800_000_000.0


def jwt(claims: object, *, header: object = None) -> bytes:
    def seg(obj: object) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=")

    return seg(header or {"alg": "none"}) + b"." + seg(claims) + b"."


def token(lifetime: float, issued: float = T0, **extra: object) -> bytes:
    return jwt({"iat": issued, "exp": issued + lifetime, **extra})


@pytest.mark.parametrize(
    ("lifetime", "expected"),
    [(3600, 60.0), (600, 60.0), (30, 3.0), (4, 1.0), (1, 0.5), (0, 0.0)],
    ids=["an hour", "ten minutes (the Kubernetes minimum)", "30 s", "4 s", "1 s", "none"],
)
def test_the_margin_scales_with_the_lifetime(lifetime: float, expected: float) -> None:
    assert margin(lifetime) == pytest.approx(expected)


def test_jwt_times_reads_iat_and_exp_without_a_signature_check() -> None:
    assert jwt_times(token(3600)) == (T0, T0 + 3600)
    assert jwt_times(jwt({"exp": 5})) == (None, 5.0)
    assert jwt_times(jwt({"exp": 5}) + b"not-a-real-signature") == (None, 5.0)


@pytest.mark.parametrize(
    "raw",
    [
        b"sat-token-one",
        b"a.b",
        b"a..c",
        b"a.!!!!.c",
        jwt({"iat": T0}),  # no exp
        jwt({"exp": True}),
        jwt({"exp": "soon"}),
        jwt([1, 2, 3]),
        b"x." + base64.urlsafe_b64encode(b'{"exp": NaN}') + b".y",
        b"x." + base64.urlsafe_b64encode(b"\xff\xfe") + b".y",
        b"x." + base64.urlsafe_b64encode(b"[" * 100_000) + b".y",
    ],
)
def test_what_is_not_a_jwt_with_an_exp_gives_none(raw: bytes) -> None:
    assert jwt_times(raw) is None


@given(st.binary(max_size=200) | st.builds(lambda a, b: a + b"." + b + b".", st.binary(), st.binary()))
def test_jwt_times_never_raises(raw: bytes) -> None:
    result = jwt_times(raw)
    assert result is None or math.isfinite(result[1])


def test_a_file_is_read_every_poll_and_once_at_the_margin() -> None:
    plan = RefreshPlan(token(3600), T0, poll=5.0)
    assert plan.refresh_at == T0 + 3600 - 60
    assert plan.delay(T0) == 5.0
    assert plan.delay(T0 + 3538) == pytest.approx(2.0)  # the poll lands on the margin's start
    assert plan.delay(T0 + 3545) == 5.0  # past it: polling goes on until a newer token or exp


def test_a_provider_is_asked_at_the_margin_then_every_poll() -> None:
    plan = RefreshPlan(token(3600), T0, poll=5.0, cheap=False)
    assert plan.delay(T0) == pytest.approx(3540.0)
    assert plan.delay(T0 + 3541) == 5.0


def test_a_short_lived_token_is_polled_eight_times_per_lifetime() -> None:
    plan = RefreshPlan(token(4), T0, poll=5.0)
    assert plan.poll == 0.5
    assert plan.refresh_at == T0 + 3
    assert RefreshPlan(token(0.01), T0, poll=5.0).poll == 0.05  # a floor: no busy loop


def test_a_token_that_is_not_a_jwt_is_followed_by_file_change_only() -> None:
    plan = RefreshPlan(b"opaque", T0, poll=5.0)
    assert (plan.expires, plan.refresh_at) == (None, None)
    assert plan.delay(T0 + 10**6) == 5.0
    assert not plan.stale(T0 + 10**6)
    assert plan.choose(b"opaque", T0) is None
    assert plan.choose(b"opaque-two", T0) == b"opaque-two"


def test_what_the_source_holds_is_sent_only_if_it_is_newer() -> None:
    presented = token(3600)
    plan = RefreshPlan(presented, T0, poll=5.0)
    assert plan.choose(presented, T0 + 3550) is None  # never re-send the token about to expire
    assert plan.choose(token(3600, issued=T0 - 10), T0 + 1) is None  # expires earlier
    assert plan.choose(token(10, issued=T0 - 20), T0) is None  # expired already
    newer = token(3600, issued=T0 + 2880)
    assert plan.choose(newer, T0 + 2881) == newer
    assert plan.choose(b"opaque", T0) == b"opaque"  # not a JWT: the broker judges it
    plan.presented(newer, T0 + 2881)
    assert plan.refresh_at == T0 + 2880 + 3600 - 60
    assert plan.choose(newer, T0 + 2882) is None


def test_a_token_left_unrotated_is_reported_once() -> None:
    plan = RefreshPlan(token(3600), T0, poll=5.0)
    assert not plan.stale(T0 + 3539)
    assert plan.stale(T0 + 3540)
    assert not plan.stale(T0 + 3545)


def test_an_iat_from_the_future_counts_the_lifetime_from_now() -> None:
    plan = RefreshPlan(token(3600, issued=T0 + 30), T0, poll=5.0)  # the issuer's clock is ahead of ours
    assert plan.refresh_at == T0 + 30 + 3600 - 60  # lifetime 3630 s from now: the cap applies


def test_read_sat_token_from_a_provider() -> None:
    settings = ConnectionSettings(sat_token_provider=lambda: " tok\n")
    assert read_sat_token(settings) == b"tok"
    assert read_sat_token(settings.replace(sat_token_provider=lambda: bytearray(b"raw"))) == b"raw"
    assert read_sat_token(ConnectionSettings()) is None


def test_a_failing_provider_is_a_broker_connect_error_without_the_token() -> None:
    def broken() -> str:
        raise RuntimeError("secret-token-text")

    with pytest.raises(BrokerConnectError, match="provider failed") as info:
        read_sat_token(ConnectionSettings(sat_token_provider=broken))
    assert "secret-token-text" not in str(info.value)
    with pytest.raises(BrokerConnectError, match="returned int"):
        read_sat_token(ConnectionSettings(sat_token_provider=lambda: 42))  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize(
    "changes",
    [
        {"sat_token_provider": lambda: "t", "sat_token_file": "/tmp/token"},
        {"sat_token_provider": "not callable"},
        {"sat_poll_interval": 0},
        {"sat_poll_interval": math.nan},
        {"sat_poll_interval": True},
    ],
    ids=["both sources", "not callable", "zero poll", "nan poll", "bool poll"],
)
def test_bad_sat_settings_are_configuration_errors(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match="sat_"):
        ConnectionSettings(**changes)  # type: ignore[arg-type]


async def _never(token: bytes, timeout: float) -> None:
    raise AssertionError("not called")


def test_an_auth_nobody_asked_for_or_another_packet_is_malformed() -> None:
    session = SatSession(ConnectionSettings(), _never)
    with pytest.raises(MalformedPacketError, match="no re-authentication under way"):
        session.received(0xF0, b"")
    with pytest.raises(MalformedPacketError, match="unexpected packet type 1"):
        session.received(0x10, b"")
    with pytest.raises(MalformedPacketError, match="not allowed in AUTH"):
        session.received(0xF0, bytes([packets.AUTH_SUCCESS, 2, 0x01, 0]))
