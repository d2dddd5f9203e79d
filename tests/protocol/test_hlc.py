"""Hybrid logical clocks (docs/design/protocol.md §5): text form, order, the SDK clock rules, the 60 s drift limit."""

from __future__ import annotations

import threading

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sskv_mapping._protocol.hlc import MAX_DRIFT_MS, HlcClock, HybridLogicalClock
from sskv_mapping.errors import ClockDriftError, ProtocolError
from tests._support.clocks import ManualClock

from ._strategies import FAST, FUZZ, U64_MAX, garbage, hlcs, node_ids

H = HybridLogicalClock
NOW = 1_696_374_425_000
_MAX = 2**64 - 1


# ---------------------------------------------------------------------------------------------------------
# text form


@pytest.mark.parametrize(
    "raw",
    [
        "001696374425000:00001:StateStore",
        "1696374425000:1:StateStore",
        b"001696374425000:00001:StateStore",
        bytearray(b"1696374425000:1:StateStore"),
        memoryview(b"1696374425000:1:StateStore"),
    ],
    ids=["padded", "unpadded", "bytes", "bytearray", "memoryview"],
)
def test_parse_accepts_padded_unpadded_and_bytes(raw: str | bytes) -> None:
    assert H.parse(raw) == H(1696374425000, 1, "StateStore")


def test_parse_keeps_a_non_ascii_node_id() -> None:
    assert H.parse("5:6:nœud-é".encode()) == H(5, 6, "nœud-é")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (H(1696374425000, 1, "StateStore"), "001696374425000:00001:StateStore"),
        (H(0, 0, "n"), "000000000000000:00000:n"),
        (H(7, 42, "client-1"), "000000000000007:00042:client-1"),
        # widths are minimums: larger numbers are written in full, never truncated
        (H(12_345_678_901_234_567, 1_234_567, "n"), "12345678901234567:1234567:n"),
        (H(U64_MAX, U64_MAX, "n"), f"{U64_MAX}:{U64_MAX}:n"),
    ],
)
def test_format_pads_to_015_and_05(value: HybridLogicalClock, text: str) -> None:
    assert str(value) == text
    assert value.encode() == text
    assert H.parse(text) == value


def test_a_leading_plus_parses_as_in_the_sdks_and_never_comes_back() -> None:
    # the Rust and Go SDKs' integer parsing accepts one leading '+'; we format zero-padded digits only
    assert H.parse("+1:0:n") == H(1, 0, "n") == H.parse("1:+0:n")
    assert str(H.parse("+1696374425000:+1:n")) == "001696374425000:00001:n"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "1:2",
        "1:2:node:extra",  # a node id with ':' makes four parts
        "1:2:a:b",
        "-1:0:n",
        "1:-1:n",
        "++1:0:n",
        "+:0:n",
        "+-1:0:n",
        " 1:0:n",
        "1 :0:n",
        "1: 0:n",
        "a:0:n",
        "1.5:0:n",
        "1e3:0:n",
        "0x10:0:n",
        "1_000:0:n",
        ":0:n",
        "1::n",
        "::",
        "\u0661:0:n",  # ARABIC-INDIC DIGIT ONE
        "\uff11:0:n",  # FULLWIDTH DIGIT ONE
        "1:²:n",  # SUPERSCRIPT TWO
        f"{2**64}:0:n",  # beyond unsigned 64-bit
        f"0:{2**64}:n",
        "9" * 5000 + ":0:n",  # int() would raise ValueError past 4300 digits
        "0:" + "9" * 5000 + ":n",
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ProtocolError):
        H.parse(text)
    with pytest.raises(ProtocolError):
        H.parse(text.encode())


def test_parse_rejects_bytes_that_are_not_utf8() -> None:
    with pytest.raises(ProtocolError):
        H.parse(b"1:2:\xff")


@pytest.mark.parametrize(
    ("wall", "counter", "node"),
    [(0, 0, "a:b"), (-1, 0, "n"), (0, -1, "n"), (2**64, 0, "n"), (0, 2**64, "n")],
)
def test_constructor_rejects_invalid_fields(wall: int, counter: int, node: str) -> None:
    with pytest.raises(ValueError):
        H(wall, counter, node)


# ---------------------------------------------------------------------------------------------------------
# order: wall, then counter, then node id byte-wise


def test_wall_time_orders_first() -> None:
    assert H(2, 0, "a") > H(1, 99_999, "zzz")
    assert H(1, 99_999, "zzz") < H(2, 0, "a")


def test_counter_orders_second() -> None:
    assert H(1, 2, "a") > H(1, 1, "z")
    assert H(1, 1, "z") <= H(1, 2, "a")


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [("B", "a"), ("a", "ab"), ("", "a"), ("z", "é"), ("Z", "z"), ("\x00", "\x01")],
)
def test_node_id_orders_last_byte_wise(smaller: str, larger: str) -> None:
    assert smaller.encode() < larger.encode()  # the premise: this is byte order
    assert H(1, 1, smaller) < H(1, 1, larger)
    assert H(1, 1, larger) > H(1, 1, smaller)
    assert H(1, 1, larger) >= H(1, 1, smaller)
    assert not H(1, 1, larger) <= H(1, 1, smaller)


def test_equal_values_compare_equal_and_hash_equal() -> None:
    a, b = H.parse("1:2:n"), H.parse("000000000000001:00002:n")
    assert a == b and hash(a) == hash(b)
    assert a <= b and a >= b and not a < b and not a > b


@pytest.mark.parametrize("other", [5, "1:2:n", None])
def test_comparison_with_other_types_is_a_type_error(other: object) -> None:
    with pytest.raises(TypeError):
        _ = H(1, 2, "n") < other
    assert H(1, 2, "n") != other


@FAST
@given(hlcs, hlcs)
def test_order_is_wall_then_counter_then_node_bytes(a: HybridLogicalClock, b: HybridLogicalClock) -> None:
    ka = (a.wall_ms, a.counter, a.node_id.encode())
    kb = (b.wall_ms, b.counter, b.node_id.encode())
    assert (a < b) == (ka < kb)
    assert (a <= b) == (ka <= kb)
    assert (a > b) == (ka > kb)
    assert (a >= b) == (ka >= kb)
    assert (a == b) == (ka == kb)


@FAST
@given(st.lists(hlcs, max_size=8))
def test_sorting_agrees_with_text_order_of_padded_timestamps(values: list[HybridLogicalClock]) -> None:
    # with walls and counters inside the padded widths, the fixed-width text sorts the same way
    small = [H(v.wall_ms % 10**15, v.counter % 10**5, v.node_id) for v in values]
    assert [str(v) for v in sorted(small)] == sorted((str(v) for v in small), key=lambda s: (s[:21], s[22:].encode()))


# ---------------------------------------------------------------------------------------------------------
# properties: text round trip, and parsing never crashes


@FAST
@given(hlcs)
def test_str_parse_round_trip(value: HybridLogicalClock) -> None:
    assert H.parse(str(value)) == value
    assert H.parse(str(value).encode()) == value


@FAST
@given(st.integers(0, U64_MAX), st.integers(0, U64_MAX), node_ids)
def test_unpadded_text_parses_to_the_same_value(wall: int, counter: int, node: str) -> None:
    assert H.parse(f"{wall}:{counter}:{node}") == H(wall, counter, node)


@FUZZ
@given(st.text(alphabet=st.sampled_from("0123456789:-+ aZ٣\x00é"), max_size=30) | st.text(max_size=30))
@example("1:2:n")
@example("::")
def test_parse_str_raises_only_protocol_error(text: str) -> None:
    try:
        value = H.parse(text)
    except ProtocolError:
        return
    # never a wrong value: the text really was wall:counter:node with plain decimal numbers
    wall, counter, node = text.split(":")
    assert (value.wall_ms, value.counter, value.node_id) == (int(wall), int(counter), node)
    assert wall.isascii() and counter.isascii()


@FUZZ
@given(garbage | st.text(alphabet="0123456789:", max_size=30).map(str.encode))
def test_parse_bytes_raises_only_protocol_error(data: bytes) -> None:
    try:
        value = H.parse(data)
    except ProtocolError:
        return
    assert H.parse(str(value)) == value
    assert data.decode().split(":")[2] == value.node_id


# ---------------------------------------------------------------------------------------------------------
# ticked: the value to send


DRIFT = ClockDriftError  # an expected outcome in the tables below


@pytest.mark.parametrize(
    ("value", "now", "max_drift", "expected"),
    [
        pytest.param(H(NOW - 5, 7, "me"), NOW, None, H(NOW, 0, "me"), id="wall-moved-on-resets-the-counter"),
        pytest.param(H(NOW, 7, "me"), NOW, None, H(NOW, 8, "me"), id="same-ms-increments-the-counter"),
        pytest.param(H(NOW, 7, "me"), NOW - 1000, None, H(NOW, 8, "me"), id="wall-went-back-keeps-the-wall"),
        pytest.param(H(NOW + 60_000, 3, "me"), NOW, None, H(NOW + 60_000, 4, "me"), id="exactly-max-drift"),
        pytest.param(H(NOW + 60_001, 3, "me"), NOW, None, DRIFT, id="one-ms-beyond-max-drift"),
        pytest.param(H(NOW + 10, 0, "me"), NOW, 10, H(NOW + 10, 1, "me"), id="custom-drift-allowed"),
        pytest.param(H(NOW + 11, 0, "me"), NOW, 10, DRIFT, id="custom-drift-exceeded"),
        # a counter overflow is a clock error, not a ValueError
        pytest.param(H(NOW, U64_MAX, "me"), NOW, None, DRIFT, id="counter-overflow"),
    ],
)
def test_ticked(value: HybridLogicalClock, now: int, max_drift: int | None, expected: object) -> None:
    drift = {} if max_drift is None else {"max_drift_ms": max_drift}
    if expected is DRIFT:
        with pytest.raises(ClockDriftError):
            value.ticked(now, **drift)
    else:
        assert value.ticked(now, **drift) == expected


@FAST
@given(hlcs, st.integers(0, 2**63))
def test_ticked_is_strictly_newer_or_a_drift_error(value: HybridLogicalClock, now: int) -> None:
    try:
        nxt = value.ticked(now)
    except ClockDriftError:
        assert value.wall_ms - now > MAX_DRIFT_MS or value.counter == U64_MAX
        return
    assert nxt > value
    assert nxt.node_id == value.node_id
    assert nxt.wall_ms - now <= MAX_DRIFT_MS
    assert nxt == (
        H(now, 0, value.node_id) if now > value.wall_ms else H(value.wall_ms, value.counter + 1, value.node_id)
    )


# ---------------------------------------------------------------------------------------------------------
# merged: receiving a __ts


def test_merge_with_our_own_node_id_changes_nothing() -> None:
    ours = H(NOW - 10, 3, "me")
    assert ours.merged(H(NOW + 5, 9, "me"), NOW) is ours
    # not even a drift check: it is our own value coming back
    assert ours.merged(H(NOW + 10**9, 9, "me"), NOW) is ours


@pytest.mark.parametrize(
    ("ours", "theirs", "now", "expected"),
    [
        pytest.param(H(NOW - 10, 3, "me"), H(NOW - 5, 9, "svc"), NOW, H(NOW, 0, "me"), id="now-past-both-walls"),
        # equal walls: the larger counter plus one
        pytest.param(H(NOW, 3, "me"), H(NOW, 7, "svc"), NOW, H(NOW, 8, "me"), id="equal-walls-theirs-larger"),
        pytest.param(H(NOW, 9, "me"), H(NOW, 7, "svc"), NOW, H(NOW, 10, "me"), id="equal-walls-ours-larger"),
        pytest.param(H(NOW, 9, "me"), H(NOW, 9, "svc"), NOW - 100, H(NOW, 10, "me"), id="equal-walls-and-counters"),
        # our wall larger: our counter plus one (also when now equals our wall: "now > both" does not hold)
        pytest.param(H(NOW, 3, "me"), H(NOW - 50, 90, "svc"), NOW - 100, H(NOW, 4, "me"), id="our-wall-larger"),
        pytest.param(H(NOW, 3, "me"), H(NOW - 50, 90, "svc"), NOW, H(NOW, 4, "me"), id="our-wall-larger-now-equal"),
        # their wall larger: their wall and counter plus one (also when now equals their wall)
        pytest.param(H(NOW - 50, 3, "me"), H(NOW, 90, "svc"), NOW - 100, H(NOW, 91, "me"), id="their-wall-larger"),
        pytest.param(H(NOW - 50, 3, "me"), H(NOW, 90, "svc"), NOW, H(NOW, 91, "me"), id="their-wall-larger-now-equal"),
        pytest.param(H(0, 0, "me"), H(NOW, 1, "svc"), NOW, H(NOW, 2, "me"), id="keeps-our-node-id"),
        pytest.param(H(NOW, 0, "me"), H(NOW + 60_000, 4, "svc"), NOW, H(NOW + 60_000, 5, "me"), id="exactly-max-drift"),
        pytest.param(H(NOW, 0, "me"), H(NOW + 60_001, 4, "svc"), NOW, DRIFT, id="one-ms-beyond-max-drift"),
        # a response __ts with the largest counter parses fine; merging it must not crash with ValueError
        pytest.param(H(NOW - 5, 0, "me"), H.parse(f"{NOW}:{U64_MAX}:svc"), NOW - 10, DRIFT, id="counter-overflow"),
    ],
)
def test_merged(ours: HybridLogicalClock, theirs: HybridLogicalClock, now: int, expected: object) -> None:
    if expected is DRIFT:
        with pytest.raises(ClockDriftError):
            ours.merged(theirs, now)
    else:
        assert ours.merged(theirs, now) == expected


@pytest.mark.parametrize("their_wall", [0, 1, NOW - 10**9, NOW - 60_001])
def test_merge_with_a_timestamp_in_the_past_never_fails(their_wall: int) -> None:
    assert H(NOW - 1, 0, "me").merged(H(their_wall, U64_MAX - 1, "svc"), NOW) == H(NOW, 0, "me")
    assert H(NOW + 5, 0, "me").merged(H(their_wall, 3, "svc"), NOW) == H(NOW + 5, 1, "me")


def _reference_merge(ours: HybridLogicalClock, other: HybridLogicalClock, now: int) -> HybridLogicalClock:
    """docs/design/protocol.md §5, transcribed."""
    if other.node_id == ours.node_id:
        return ours
    if now > ours.wall_ms and now > other.wall_ms:
        return H(now, 0, ours.node_id)
    if ours.wall_ms == other.wall_ms:
        return H(ours.wall_ms, max(ours.counter, other.counter) + 1, ours.node_id)
    if ours.wall_ms > other.wall_ms:
        return H(ours.wall_ms, ours.counter + 1, ours.node_id)
    return H(other.wall_ms, other.counter + 1, ours.node_id)


_walls = st.integers(NOW - 100_000, NOW + 100_000)
_near = st.builds(H, wall_ms=_walls, counter=st.integers(0, 1000), node_id=st.sampled_from(["me", "svc", "other"]))


@FAST
@given(_near, _near, _walls)
def test_merged_follows_protocol_md(ours: HybridLogicalClock, other: HybridLogicalClock, now: int) -> None:
    expected = _reference_merge(ours, other, now)
    if other.node_id != ours.node_id and expected.wall_ms - now > MAX_DRIFT_MS:
        with pytest.raises(ClockDriftError):
            ours.merged(other, now)
        return
    result = ours.merged(other, now)
    assert result == expected
    if other.node_id != ours.node_id:
        # the HLC guarantee: newer than both what we had and what we received
        assert (result.wall_ms, result.counter) > (ours.wall_ms, ours.counter)
        assert (result.wall_ms, result.counter) > (other.wall_ms, other.counter)


# ---------------------------------------------------------------------------------------------------------
# HlcClock: the running clock, with an injected wall clock


def test_hlc_clock_uses_the_injected_wall_clock() -> None:
    wall = ManualClock(NOW)
    clock = HlcClock("me", now_ms=wall)
    assert clock.node_id == "me"
    assert clock.now_ms() == NOW
    assert clock.current == H(0, 0, "me")
    assert clock.tick() == H(NOW, 0, "me")
    assert clock.tick() == H(NOW, 1, "me")
    wall.now += 1
    assert clock.tick() == H(NOW + 1, 0, "me")
    assert clock.current == H(NOW + 1, 0, "me")


def test_hlc_clock_update_merges_and_is_remembered() -> None:
    wall = ManualClock(NOW)
    clock = HlcClock("me", now_ms=wall)
    clock.tick()
    assert clock.update(H(NOW + 30, 4, "svc")) == H(NOW + 30, 5, "me")
    assert clock.tick() == H(NOW + 30, 6, "me")
    assert clock.update(H(NOW + 10**6, 0, "me")) == H(NOW + 30, 6, "me")  # our own node id: unchanged


def test_hlc_clock_tick_drift_error_leaves_the_clock_unchanged() -> None:
    wall = ManualClock(NOW)
    clock = HlcClock("me", now_ms=wall)
    clock.update(H(NOW + 60_000, 0, "svc"))  # exactly the maximum: allowed
    before = clock.current
    assert before == H(NOW + 60_000, 1, "me")
    wall.now -= 1  # now the clock would be 60,001 ms ahead
    with pytest.raises(ClockDriftError):
        clock.tick()
    assert clock.current == before
    wall.now += 1
    assert clock.tick() == H(NOW + 60_000, 2, "me")


def test_hlc_clock_update_drift_error_leaves_the_clock_unchanged() -> None:
    clock = HlcClock("me", now_ms=ManualClock(NOW))
    before = clock.tick()
    with pytest.raises(ClockDriftError):
        clock.update(H(NOW + 60_001, 0, "svc"))
    assert clock.current == before


def test_hlc_clock_honours_a_custom_max_drift() -> None:
    clock = HlcClock("me", now_ms=ManualClock(NOW), max_drift_ms=5)
    assert clock.update(H(NOW + 5, 0, "svc")) == H(NOW + 5, 1, "me")
    with pytest.raises(ClockDriftError):
        clock.update(H(NOW + 6, 0, "svc"))


def test_hlc_clock_rejects_a_node_id_with_a_colon() -> None:
    with pytest.raises(ValueError):
        HlcClock("a:b", now_ms=ManualClock(NOW))


def test_hlc_clock_ticks_are_unique_across_threads() -> None:
    clock = HlcClock("me", now_ms=ManualClock(NOW))
    results: list[list[HybridLogicalClock]] = [[] for _ in range(8)]

    def work(out: list[HybridLogicalClock]) -> None:
        for _ in range(300):
            out.append(clock.tick())

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [v for out in results for v in out]
    assert len(set(everything)) == 8 * 300
    assert clock.current == H(NOW, 8 * 300 - 1, "me")
    for out in results:  # each thread saw its own ticks strictly increasing
        assert out == sorted(out) and len(set(out)) == len(out)


@FAST
@given(
    st.lists(
        st.tuples(st.integers(-70_000, 70_000), st.none() | _near),
        max_size=30,
    )
)
def test_hlc_clock_only_moves_forward(steps: list[tuple[int, HybridLogicalClock | None]]) -> None:
    wall = ManualClock(NOW)
    clock = HlcClock("me", now_ms=wall)
    for delta, received in steps:
        wall.now = NOW + delta
        before = clock.current
        try:
            after = clock.tick() if received is None else clock.update(received)
        except ClockDriftError:
            assert clock.current == before
            continue
        assert clock.current == after
        if received is None or received.node_id != "me":
            assert after > before
            assert after.wall_ms - wall.now <= MAX_DRIFT_MS
        else:
            assert after == before


@FAST
@given(
    st.lists(
        st.tuples(
            st.integers(-70_000, 70_000) | st.just(_MAX),
            st.none() | _near | st.builds(H, wall_ms=st.just(NOW), counter=st.just(_MAX), node_id=st.just("svc")),
            st.booleans(),
        ),
        max_size=30,
    ),
    st.sampled_from([MAX_DRIFT_MS, 5, 0, -1]),
)
def test_hlc_clock_steps_as_the_pure_functions(
    steps: list[tuple[int, HybridLogicalClock | None, bool]], max_drift: int
) -> None:
    """The running clock's tick, tick_text, update and merge (arithmetic on ints) give what ``ticked`` and
    ``merged`` give on its value, errors included, and a failed step leaves the clock as it was."""
    wall = ManualClock(NOW)
    clock = HlcClock("me", now_ms=wall, max_drift_ms=max_drift)
    value = H(0, 0, "me")
    for delta, received, as_text in steps:
        wall.now = delta if delta == _MAX else NOW + delta
        try:
            expected: HybridLogicalClock | None = (
                value.ticked(wall.now, max_drift) if received is None else value.merged(received, wall.now, max_drift)
            )
        except ClockDriftError:
            expected = None
        try:
            if received is None:
                got = HybridLogicalClock.parse(clock.tick_text()) if as_text else clock.tick()
            elif as_text:
                clock.merge(received)
                got = clock.current
            else:
                got = clock.update(received)
        except ClockDriftError:
            assert expected is None
            assert clock.current == value
            continue
        assert got == expected
        assert clock.current == expected
        value = expected


@given(st.text(alphabet="0123456789+:-ab\u00e9\u0663\u00b2 ", max_size=30))
@example("1:2:node")
@example("+1:2:node")
@example("1:2:n\u00e9")
@example("\u0663:2:node")
@example("99999999999999999999999:0:n")
@example("18446744073709551616:0:n")
@example("18446744073709551615:18446744073709551615:n")
def test_parse_answers_as_the_checking_way_on_any_text(text: str) -> None:
    """The quick path for the usual form gives what the field-by-field checks give, errors included."""
    from sskv_mapping._protocol import hlc

    def checked(t: str) -> HybridLogicalClock | type[ProtocolError]:
        parts = t.split(":")
        if len(parts) != 3:
            return ProtocolError
        try:
            return HybridLogicalClock(hlc._uint(parts[0], "w", t), hlc._uint(parts[1], "c", t), parts[2])
        except ProtocolError:
            return ProtocolError

    try:
        got: HybridLogicalClock | type[ProtocolError] = HybridLogicalClock.parse(text)
    except ProtocolError:
        got = ProtocolError
    assert got == checked(text)
