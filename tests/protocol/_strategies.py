"""Shared hypothesis strategies and helpers for the protocol tests (not a test module)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.hlc import HybridLogicalClock

#: The whole protocol suite must stay well under 20 s, so example counts are modest; for a deep run set
#: e.g. ``SSKV_HYPOTHESIS_SCALE=50``. No deadline, so a loaded CI box cannot flake it.
_SCALE = float(os.environ.get("SSKV_HYPOTHESIS_SCALE", "1"))
_QUIET = [HealthCheck.too_slow]
FAST = settings(max_examples=max(1, int(50 * _SCALE)), deadline=None, suppress_health_check=_QUIET)
FUZZ = settings(max_examples=max(1, int(150 * _SCALE)), deadline=None, suppress_health_check=_QUIET)

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1

keys = st.binary(min_size=1, max_size=48)
values = st.binary(max_size=64)
#: Bytes a binary-safe codec most likely gets wrong.
nasty_bytes = st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"\x00", b"\xff", b"$", b"*", b"-1"]), max_size=6).map(
    b"".join
)
keys_or_nasty = keys | nasty_bytes.filter(bool)
values_or_nasty = values | nasty_bytes

#: Text that may travel in a simple string or an error line (no CR/LF).
line_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=40)

node_ids = st.text(max_size=20).filter(lambda s: ":" not in s)
hlcs = st.builds(
    HybridLogicalClock,
    wall_ms=st.integers(0, U64_MAX) | st.integers(0, 10**13),
    counter=st.integers(0, U64_MAX) | st.integers(0, 10**5),
    node_id=node_ids,
)

#: Pieces of RESP, so that fuzzing reaches deep into the parser instead of failing on the first byte.
_TOKENS = [
    b"*",
    b"$",
    b":",
    b"+",
    b"-",
    b"\r\n",
    b"\r",
    b"\n",
    b"0",
    b"1",
    b"2",
    b"3",
    b"-1",
    b"9" * 19,
    b"ERR ",
    b"OK",
    b"SET",
    b"GET",
    b"NOTIFY",
    b"DELETE",
    b"VALUE",
    b"\x00",
    b"\xff",
    " ٣".encode(),
]
resp_soup = st.lists(st.sampled_from(_TOKENS) | st.binary(max_size=3), max_size=24).map(b"".join)
garbage = st.binary(max_size=64) | resp_soup


def encode_reply(value: resp3.Reply) -> bytes:
    """A reference encoder for every reply shape (resp3 only encodes arrays of bulk strings)."""
    if value is None or isinstance(value, bytes):
        return resp3.encode_bulk(value)
    if isinstance(value, bool):  # pragma: no cover - the strategies never produce bools
        raise TypeError(value)
    if isinstance(value, int):
        return resp3.encode_integer(value)
    if isinstance(value, resp3.SimpleString):
        return resp3.encode_simple(value.text)
    if isinstance(value, resp3.ErrorReply):
        return resp3.encode_error(value.text)
    assert isinstance(value, list)
    return b"*%d\r\n" % len(value) + b"".join(encode_reply(v) for v in value)


scalar_replies = st.one_of(
    st.none(),
    values_or_nasty,
    st.integers(I64_MIN, I64_MAX),
    st.integers(-2, 2),
    line_text.map(resp3.SimpleString),
    line_text.map(resp3.ErrorReply),
)
#: Any reply value, nested at most a few levels (the parser allows 8).
replies = st.recursive(scalar_replies, lambda inner: st.lists(inner, max_size=4), max_leaves=8)


@st.composite
def mutated(draw: st.DrawFn, payloads: st.SearchStrategy[bytes]) -> bytes:
    """A valid payload with one byte flipped, inserted or deleted, or cut short."""
    data = bytearray(draw(payloads))
    how = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
    if how == "insert" or not data:
        i = draw(st.integers(0, len(data)))
        data[i:i] = draw(st.binary(min_size=1, max_size=3))
    elif how == "flip":
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    elif how == "delete":
        i = draw(st.integers(0, len(data) - 1))
        del data[i]
    else:
        data = data[: draw(st.integers(0, len(data) - 1))]
    return bytes(data)
