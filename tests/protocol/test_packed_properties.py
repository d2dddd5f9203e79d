"""PackedUserProperties (user properties encoded once) and reply_properties (a reply's properties in fewer steps)
give the very bytes publish_properties gives for the same values."""

from __future__ import annotations

import pytest

from sskv_mapping._protocol.mqtt_publish import PackedUserProperties, publish_properties, reply_properties
from sskv_mapping.errors import ConfigurationError

PAIRS = [("__stat", "200"), ("__protVer", "1.0"), ("__ts", "001700000000123:00002:StateStore")]


def test_packed_pairs_are_a_tuple_of_the_pairs() -> None:
    packed = PackedUserProperties(PAIRS)
    assert packed == tuple(PAIRS)
    assert list(packed) == PAIRS


@pytest.mark.parametrize("pairs", [[], [("a", "")], PAIRS, [("é", "ü" * 300)] * 3])
@pytest.mark.parametrize("content_type", [None, "application/octet-stream"])
@pytest.mark.parametrize("correlation", [b"", b"c" * 16, b"x" * 300])
def test_the_same_bytes_as_publish_properties(
    pairs: list[tuple[str, str]], content_type: str | None, correlation: bytes
) -> None:
    packed = PackedUserProperties(pairs)
    expected = publish_properties(correlation, None, pairs, content_type, None)
    assert publish_properties(correlation, None, packed, content_type, None) == expected
    assert reply_properties(correlation, content_type, packed) == expected
    # and with the other properties a request has
    assert publish_properties(correlation, "r/t", packed, content_type, 10) == publish_properties(
        correlation, "r/t", pairs, content_type, 10
    )


def test_correlation_data_over_65535_bytes_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        reply_properties(b"x" * 65_536, None, PackedUserProperties(PAIRS))
    with pytest.raises(ConfigurationError):
        publish_properties(b"x" * 65_536, None, PAIRS, None, None)
