"""The AUTH packet codec (MQTT 5 §3.15, ``_protocol/mqtt_packets.py``): what K8S-SAT re-authentication sends
and receives. Every AUTH the encoder writes decodes to its values; any other bytes decode or raise
``MalformedPacketError``, nothing else."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_publish import MalformedPacketError, mqtt_str

from ._strategies import FAST, FUZZ

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@FAST
@given(
    reason=st.sampled_from([0x00, 0x18, 0x19, 0x87]),
    method=st.none() | _text,
    data=st.none() | st.binary(max_size=300),
    text=st.none() | _text,
)
def test_every_encoded_auth_decodes_to_its_values(
    reason: int, method: str | None, data: bytes | None, text: str | None
) -> None:
    if data is not None and method is None:
        with pytest.raises(MalformedPacketError, match="needs an Authentication Method"):
            packets.auth_packet(reason, data=data, reason_string=text)
        return
    wire = packets.auth_packet(reason, method=method, data=data, reason_string=text)
    [(first, body)] = packets.PacketSplitter().feed(wire)
    assert first >> 4 == packets.AUTH
    assert packets.decode_auth(first, body) == packets.Auth(reason, method, data, text)


def test_the_re_authentication_a_k8s_sat_client_sends() -> None:
    wire = packets.auth_packet(packets.AUTH_REAUTHENTICATE, method="K8S-SAT", data=b"tok")
    assert wire == b"\xf0\x12\x19\x10\x15" + mqtt_str("K8S-SAT") + b"\x16\x00\x03tok"
    assert packets.reason_name(0x19) == "Re-authenticate"


def test_a_bare_success_is_two_bytes_and_short_forms_decode() -> None:
    assert packets.auth_packet(packets.AUTH_SUCCESS) == b"\xf0\x00"
    assert packets.decode_auth(0xF0, b"") == packets.Auth(0x00)
    assert packets.decode_auth(0xF0, b"\x87") == packets.Auth(0x87)  # reason only: the receiver judges it


@pytest.mark.parametrize(
    ("first", "body", "match"),
    [
        (0xF1, b"", "not an AUTH"),  # reserved flags set
        (0xF0, b"\x00\x02\x01\x00", "not allowed in AUTH"),  # Payload Format Indicator
        (0xF0, b"\x00\x00\xff", "after the AUTH properties"),
        (0xF0, b"\x00\x05\x15\x00\x09K8", "past the properties"),
    ],
)
def test_malformed_auth_is_refused(first: int, body: bytes, match: str) -> None:
    with pytest.raises(MalformedPacketError, match=match):
        packets.decode_auth(first, body)


@FUZZ
@given(first=st.sampled_from([0xF0, 0xF0, 0xF2]), body=st.binary(max_size=80))
def test_any_bytes_decode_or_raise_malformed_packet_only(first: int, body: bytes) -> None:
    with contextlib.suppress(MalformedPacketError):
        auth = packets.decode_auth(first, body)
        assert isinstance(auth.reason, int)


@FUZZ
@given(
    wire=st.builds(lambda m, d: packets.auth_packet(0x19, method=m, data=d), _text, st.binary(max_size=40)).flatmap(
        lambda w: st.tuples(st.just(w), st.integers(0, len(w) - 1), st.integers(0, 255))
    )
)
def test_mutated_auth_decodes_or_raises_malformed_packet_only(wire: tuple[bytes, int, int]) -> None:
    packet, at, byte = wire
    mutated = packet[:at] + bytes((byte,)) + packet[at + 1 :]
    with contextlib.suppress(MalformedPacketError):
        for first, body in packets.PacketSplitter().feed(mutated):
            packets.decode_auth(first, body)
