"""The stored index's format on its own (``_index_format``, pure): round trips of shards and the used-shards key,
canonical bytes, typed errors for what does not decode, and a shard function
pinned to values, since every process and every release must put a key in the same shard."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping._namespace.key_index import IndexEntry
from sskv_mapping.errors import ProtocolError
from sskv_mapping.mapping import _index
from sskv_mapping.mapping._index_format import (
    decode_shard,
    decode_used,
    encode_shard,
    encode_used,
    shard_of,
)

#: store keys are valid UTF-8, so a listed key is any text without lone surrogates
keys = st.text(st.characters(codec="utf-8"), max_size=30)
ms = st.integers(min_value=0, max_value=2**63 - 1)
entries = st.builds(IndexEntry, ms, st.none() | ms)
shards = st.dictionaries(keys, entries, max_size=20)


@given(shards)
def test_a_shard_round_trips(shard: dict[str, IndexEntry]) -> None:
    assert decode_shard(encode_shard(shard)) == shard


@given(shards, st.randoms())
def test_a_shard_encodes_canonically_whatever_the_order(shard: dict[str, IndexEntry], rnd: random.Random) -> None:
    items = list(shard.items())
    rnd.shuffle(items)
    raw = encode_shard(shard)
    assert encode_shard(dict(items)) == raw
    assert encode_shard(decode_shard(raw)) == raw


def test_a_shard_is_the_documented_json() -> None:
    raw = encode_shard({"b": IndexEntry(5, 9), "a": IndexEntry(7), "ключ": IndexEntry(1)})
    assert raw == '{"a":7,"b":[5,9],"ключ":1}'.encode()
    assert decode_shard(b'{"x": 1, "y": [2, 3]}') == {"x": IndexEntry(1), "y": IndexEntry(2, 3)}


@pytest.mark.parametrize("raw", [None, b""])
def test_an_absent_or_empty_shard_has_no_entries(raw: bytes | None) -> None:
    assert decode_shard(raw) == {}
    assert decode_used(raw) == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"k": true}', "not added_ms or"),
        (b'{"k": 1.5}', "not added_ms or"),
        (b'{"k": "1"}', "not added_ms or"),
        (b'{"k": [1]}', "not added_ms or"),
        (b'{"k": [1, 2, 3]}', "not added_ms or"),
        (b'{"k": [1, false]}', "not added_ms or"),
        (b'{"k": null}', "not added_ms or"),
    ],
)
def test_a_shard_that_does_not_decode_is_a_protocol_error(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_shard(raw)


@given(st.sets(st.integers(min_value=0, max_value=0xFFFF)))
def test_the_used_shards_round_trip_sorted(numbers: set[int]) -> None:
    used = {str(i): IndexEntry(0) for i in numbers}
    raw = encode_used(used)
    assert json.loads(raw) == sorted(numbers)
    assert decode_used(raw) == used


@pytest.mark.parametrize("raw", [b"nope", b'{"1": 1}', b"[1, true]", b'[1, "2"]', b"[1.0]"])
def test_a_used_shards_key_that_does_not_decode_is_a_protocol_error(raw: bytes) -> None:
    with pytest.raises(ProtocolError, match="used-shards key"):
        decode_used(raw)


@given(keys, st.integers(min_value=1, max_value=0xFFFF))
def test_a_key_has_one_shard_in_range(key: str, count: int) -> None:
    assert 0 <= shard_of(key, count) < count
    assert shard_of(key, count) == shard_of(key, count)


@pytest.mark.parametrize(
    ("key", "of_1024", "of_65535"),
    [("", 692, 44076), ("a", 559, 31943), ("user:00000001", 1021, 22395), ("ключ", 32, 5132)],
)
def test_the_shard_function_is_pinned(key: str, of_1024: int, of_65535: int) -> None:
    # stored namespaces depend on it: a change here moves keys out of the shards that list them
    assert (shard_of(key, 1024), shard_of(key, 65535)) == (of_1024, of_65535)


def test_the_index_lists_with_this_format_not_a_copy() -> None:
    assert vars(_index)["IndexEntry"] is IndexEntry
    assert vars(_index)["_decode"] is decode_shard and vars(_index)["shard_of"] is shard_of
