"""RequestProperties (a client's request properties encoded once but for what changes per request) gives the very
bytes publish_properties gives for request_properties' pairs, whatever the client id, timestamp, expiry, fencing
token and persistence flag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping._protocol import headers, topics
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.mqtt_publish import publish_properties
from sskv_mapping.errors import ConfigurationError

node_ids = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters=":\x00\ufeff"), max_size=300)
clocks = st.builds(HybridLogicalClock, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), node_ids)


def _reference(
    client_id: str, corr: bytes, stamp: HybridLogicalClock, expiry: int, token: HybridLogicalClock | None, persist: bool
) -> bytes:
    props = headers.request_properties(client_id, stamp, token, persist)
    return publish_properties(corr, topics.response_topic(client_id), props, headers.CONTENT_TYPE, expiry)


@given(
    client_id=node_ids.filter(bool),
    corr=st.binary(min_size=16, max_size=16) | st.binary(max_size=40),  # 16: a client's (the one-join way)
    stamp=clocks,
    expiry=st.integers(0, 0xFFFFFFFF),
    token=st.none() | clocks,
    persist=st.booleans(),
)
def test_the_same_bytes_as_publish_properties(
    client_id: str,
    corr: bytes,
    stamp: HybridLogicalClock,
    expiry: int,
    token: HybridLogicalClock | None,
    persist: bool,
) -> None:
    encoder = headers.RequestProperties(client_id, topics.response_topic(client_id))
    expected = _reference(client_id, corr, stamp, expiry, token, persist)
    assert encoder.encode(corr, str(stamp), expiry, token, persist) == expected
    # again (the expiry's field is kept from one request to the next), and with another expiry
    assert encoder.encode(corr, str(stamp), expiry, token, persist) == expected
    other = (expiry + 1) % 0x100000000
    assert encoder.encode(corr, str(stamp), other, None, False) == _reference(
        client_id, corr, stamp, other, None, False
    )


def test_a_timestamp_past_what_mqtt_can_carry_is_refused_as_publish_properties_refuses_it() -> None:
    encoder = headers.RequestProperties("c", topics.response_topic("c"))
    with pytest.raises(ConfigurationError):
        encoder.encode(bytes(16), "x" * 65_536, 10)
    with pytest.raises(ConfigurationError):
        _reference("c", bytes(16), HybridLogicalClock(1, 1, "x" * 65_536), 10, None, False)
