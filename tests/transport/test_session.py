"""The sans-IO MQTT session (``_protocol/mqtt_session.py``), with no event loop and no socket.

Properties: packet ids are unique among what is in flight; the broker's Receive Maximum always holds and what
waited for it leaves in call order; every token comes back exactly once (PUBACK, SUBACK or ``lost``); the
broker's Maximum Packet Size refuses exactly the packets over it, naming their true size; our own limit refuses
an inbound packet at its header; reassembly returns the packets however the stream is cut; the keepalive pings
and declares a silent link dead within 1.25 intervals, whatever is written, and never while data arrives.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sskv_mapping._protocol import mqtt_packets as packets
from sskv_mapping._protocol.mqtt_publish import MalformedPacketError, mqtt_str, publish_properties, varint
from sskv_mapping._protocol.mqtt_session import (
    KEEPALIVE_DEAD,
    KEEPALIVE_OK,
    KEEPALIVE_PING,
    Keepalive,
    MqttSession,
)
from sskv_mapping.errors import ValueTooLargeError

FIELD = mqtt_str("a/b")


def _connack(**props: int) -> bytes:
    raw = b""
    if "receive_maximum" in props:
        raw += b"\x21" + props["receive_maximum"].to_bytes(2, "big")
    if "max_packet_size" in props:
        raw += b"\x27" + props["max_packet_size"].to_bytes(4, "big")
    if "keepalive" in props:
        raw += b"\x13" + props["keepalive"].to_bytes(2, "big")
    return b"\x00\x00" + varint(len(raw)) + raw


def _packet_id(packet: bytes) -> int:
    [(first, body)] = packets.PacketSplitter().feed(packet)
    assert first >> 4 == packets.PUBLISH and first & 0x06 == 0x02
    topic_end = 2 + int.from_bytes(body[:2], "big")
    return int.from_bytes(body[topic_end : topic_end + 2], "big")


def _puback(packet_id: int, reason: int = 0) -> bytes:
    return packet_id.to_bytes(2, "big") + (bytes((reason,)) if reason else b"")


# ops: ("pub", qos) publishes a new token, ("ack", i) acknowledges the i-th (mod) packet in flight, ("sub",)
# asks for a SUBACK id, ("suback", i) acknowledges one; ("ack-in-read", i) as "ack" but what it frees is released
# later, at ("release",) (as a read's PUBACKs are, at its end)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("pub"), st.sampled_from([0, 1, 1, 1])),
        st.tuples(st.just("ack"), st.integers(0, 1000)),
        st.tuples(st.just("sub"), st.just(0)),
        st.tuples(st.just("suback"), st.integers(0, 1000)),
        st.tuples(st.just("ack-in-read"), st.integers(0, 1000)),
        st.tuples(st.just("release"), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(quota=st.integers(1, 8), steps=ops)
@example(quota=1, steps=[("pub", 1), ("pub", 1), ("ack-in-read", 0), ("pub", 1), ("release", 0)])
def test_ids_quota_order_and_every_token_back_exactly_once(quota: int, steps: list[tuple[str, int]]) -> None:
    session: MqttSession[int] = MqttSession()
    session.connack(_connack(receive_maximum=quota))
    sent_order: list[int] = []  # QoS 1 tokens in the order their PUBLISH left
    issued: list[int] = []
    returned: list[int] = []
    subs: dict[int, int] = {}  # packet id -> token
    by_id: dict[int, int] = {}  # packet id -> token, PUBLISHes in flight (as the wire says)
    token = 0
    deferred = False  # PUBACKs read whose release has not run yet (a read's are released at its end)

    def release() -> None:
        for packet, released in session.release(lambda t: False):
            rid = _packet_id(packet)
            assert rid not in by_id and rid not in subs
            by_id[rid] = released
            sent_order.append(released)

    for op, arg in steps:
        if op == "pub":
            token += 1
            packet = session.publish(FIELD, b"v", arg, b"\x00", token)
            if arg == 0:
                assert packet is not None  # QoS 0 never waits
                continue
            issued.append(token)
            if packet is not None:
                pid = _packet_id(packet)
                assert pid not in by_id and pid not in subs
                by_id[pid] = token
                sent_order.append(token)
        elif op in ("ack", "ack-in-read") and by_id:
            pid = sorted(by_id)[arg % len(by_id)]
            acked, reason = session.puback(_puback(pid))
            assert (acked, reason) == (by_id.pop(pid), 0)
            assert acked is not None
            returned.append(acked)
            deferred = op == "ack-in-read"  # more of the same read follows before its release
            if not deferred:
                release()
        elif op == "release":
            release()
            deferred = False
        elif op == "sub":
            token += 1
            pid = session.request_id(token)
            assert pid not in by_id and pid not in subs
            subs[pid] = token
            issued.append(token)
        elif op == "suback" and subs:
            pid = sorted(subs)[arg % len(subs)]
            got, codes = session.acknowledged_request(pid.to_bytes(2, "big") + b"\x00\x01")
            assert (got, codes) == (subs.pop(pid), [1])
            assert got is not None
            returned.append(got)
        assert len(session.inflight) <= quota
        assert deferred or not session.queued or len(session.inflight) == quota
    release()
    while by_id:  # everything acknowledged: what was still queued leaves too
        for pid in list(by_id):
            session.puback(_puback(pid))
            returned.append(by_id.pop(pid))
        release()
    assert sent_order == sorted(sent_order)  # what waited for the quota left in call order (a release put off too)
    assert sorted(returned + session.lost()) == sorted(issued)
    assert not session.inflight and not session.queued


def test_an_abandoned_queued_publish_is_dropped_not_sent() -> None:
    session: MqttSession[str] = MqttSession()
    session.connack(_connack(receive_maximum=1))
    first = session.publish(FIELD, b"1", 1, b"\x00", "first")
    assert first is not None
    assert session.publish(FIELD, b"2", 1, b"\x00", "gave up") is None
    assert session.publish(FIELD, b"3", 1, b"\x00", "third") is None
    session.puback(_puback(_packet_id(first)))
    released = session.release(lambda t: t == "gave up")
    assert [t for _, t in released] == ["third"]


@settings(max_examples=200, deadline=None)
@given(
    payload=st.integers(0, 70_000),
    topic=st.text(min_size=1, max_size=200).filter(lambda t: "+" not in t and "#" not in t and "\x00" not in t),
    qos=st.sampled_from([0, 1]),
    correlation=st.none() | st.binary(max_size=40),
    limit=st.integers(20, 70_300),
)
def test_the_brokers_maximum_packet_size_refuses_exactly_what_is_over_it(
    payload: int, topic: str, qos: int, correlation: bytes | None, limit: int
) -> None:
    field = mqtt_str(topic)
    props = publish_properties(correlation, "resp/t", [("k", "v")], None, 10)
    size = len(packets.publish_packet(field, b"p" * payload, qos, 1, props))
    session: MqttSession[None] = MqttSession()
    session.connack(_connack(max_packet_size=limit))
    assert session.max_packet_size == limit
    if size > limit:
        with pytest.raises(ValueTooLargeError) as raised:
            session.publish(field, b"p" * payload, qos, props, None)
        assert (raised.value.size, raised.value.limit) == (size, limit)
        assert not session.inflight and not session.queued  # nothing kept
    else:
        packet = session.publish(field, b"p" * payload, qos, props, None)
        assert packet is not None and len(packet) == size


def test_no_limit_before_connack_or_when_the_broker_states_none() -> None:
    session: MqttSession[None] = MqttSession()
    assert session.max_packet_size is None
    session.connack(_connack())
    assert session.max_packet_size is None
    assert session.publish(FIELD, b"x" * 1_000_000, 1, b"\x00", None) is not None


def test_connect_declares_our_receive_maximum_and_maximum_packet_size() -> None:
    session: MqttSession[None] = MqttSession(keepalive=30, receive_maximum=300, max_inbound_packet_size=70_000)
    [(first, body)] = packets.PacketSplitter().feed(session.connect_packet("me"))
    assert first == 0x10
    # variable header: "MQTT", version 5, flags, keepalive, then the properties
    assert body[:10] == mqtt_str("MQTT") + b"\x05\x02\x00\x1e"
    props, _ = packets._properties(body, 10)
    assert props == {0x21: 300, 0x27: 70_000}


def test_an_inbound_packet_over_our_limit_fails_at_its_header() -> None:
    session: MqttSession[None] = MqttSession(max_inbound_packet_size=1000)
    with pytest.raises(MalformedPacketError, match="over the limit"):
        session.feed(b"\x30\xe8\x07")  # 1,000 bytes announced (1,003 in all): only the header was read
    ok: MqttSession[None] = MqttSession(max_inbound_packet_size=1003)
    assert ok.feed(b"\x30\xe8\x07") == [] and ok.splitter.pending == 3


@settings(max_examples=100, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=3000), min_size=1, max_size=6),
    cuts=st.lists(st.integers(1, 5000), max_size=20),
)
def test_reassembly_however_cut(bodies: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(packets.publish_packet(FIELD, body, 0, 0, b"\x00") for body in bodies)
    session: MqttSession[None] = MqttSession()
    got: list[tuple[int, bytes]] = []
    pos = 0
    for cut in [*cuts, len(wire)]:
        got += session.feed(wire[pos : pos + cut])
        pos += cut
    assert [body[len(FIELD) + 1 :] for _, body in got] == bodies
    assert all(type(body) is bytes for _, body in got)
    assert session.splitter.pending == 0


def test_one_big_packet_over_many_reads_is_kept_in_one_growing_buffer() -> None:
    session: MqttSession[None] = MqttSession()
    wire = packets.publish_packet(FIELD, bytes(range(256)) * 8192, 0, 0, b"\x00")  # 2 MiB
    buffers = set()
    for pos in range(0, len(wire) - 4096, 4096):
        assert session.feed(wire[pos : pos + 4096]) == []
        buffers.add(id(session.splitter._buf))
    [(_, body)] = session.feed(wire[pos + 4096 :])
    assert body[len(FIELD) + 1 :] == bytes(range(256)) * 8192
    assert len(buffers) == 1  # appended in place, never rebuilt


# -- keepalive -------------------------------------------------------------------------------------------------

K = 8


@settings(max_examples=300, deadline=None)
@given(
    # per tick: data read?, data written?
    traffic=st.lists(st.tuples(st.booleans(), st.booleans()), max_size=60),
    silent_from=st.integers(0, 60),
    writes_while_silent=st.booleans(),
)
def test_keepalive_goes_by_what_is_received(
    traffic: list[tuple[bool, bool]], silent_from: int, writes_while_silent: bool
) -> None:
    keepalive = Keepalive(K)
    keepalive.start(0.0, 0, 0)
    step = keepalive.tick_interval
    reads = writes = 0
    now = 0.0
    ping_at: float | None = None
    last_read = 0.0
    for i in range(200):
        now = (i + 1) * step
        read, write = traffic[i] if i < len(traffic) else (True, True)
        if i >= silent_from:
            read, write = False, writes_while_silent
        if read:
            reads += 1
            last_read = now
            if ping_at is not None:
                keepalive.pingresp()  # the link answers: the PINGRESP rides with the data
                ping_at = None
        if write:
            writes += 1
        action = keepalive.tick(now, reads, writes)
        if action == KEEPALIVE_PING:
            assert ping_at is None  # never a second one while one is outstanding
            ping_at = now
            writes += 1
        elif action == KEEPALIVE_DEAD:
            assert ping_at is not None and now - ping_at >= K / 2
            # never while data arrives: nothing was read since the PINGREQ, nor for half an interval
            # (traffic that reads nothing is as silent as the silent tail)
            assert last_read <= ping_at and now - last_read >= K / 2
            # noticed within 1.25 intervals of the last byte read (plus a tick's granularity each way)
            assert now - last_read <= 1.25 * K + 2 * step
            return
        else:
            assert action == KEEPALIVE_OK
    pytest.fail("the silent link was never declared dead")


def test_server_keep_alive_replaces_ours() -> None:
    session: MqttSession[None] = MqttSession(keepalive=60)
    session.connack(_connack(keepalive=4))
    assert (session.keepalive.interval, session.keepalive.tick_interval) == (4, 0.5)


# -- a session that outlives its connection ------------------------------------------------------------------------

# ops of the resumable session: as above, plus ("cut", present) -- the connection drops, the next connection
# adopts the session and the broker's CONNACK says whether it kept it -- and ("giveup", i): the caller of the i-th
# (mod) publish in flight gives up (its token is abandoned: not sent again)
resume_ops = st.lists(
    st.one_of(
        st.tuples(st.just("pub"), st.sampled_from([1, 1, 1, 0])),
        st.tuples(st.just("ack"), st.integers(0, 1000)),
        st.tuples(st.just("cut"), st.sampled_from([1, 1, 0])),
        st.tuples(st.just("giveup"), st.integers(0, 1000)),
    ),
    max_size=120,
)


def _is_dup(packet: bytes) -> bool:
    return bool(packet[0] & 0x08)


@settings(max_examples=300, deadline=None)
@given(quota=st.integers(1, 6), steps=resume_ops)
def test_a_resumed_session_sends_again_what_was_unacknowledged(quota: int, steps: list[tuple[str, int]]) -> None:
    """Across any sequence of cuts: a resumed session sends again exactly the publishes in flight whose caller
    still waits, in the order they first left, with DUP=1 and their packet ids; then what waited for the
    quota. A lost session sends nothing again and returns every token held. Every token comes back exactly once
    (PUBACK, lost, or given up), and packet ids stay unique among what is in flight."""
    session: MqttSession[int] = MqttSession()
    session.connack(_connack(receive_maximum=quota))
    by_id: dict[int, int] = {}  # what the broker has seen leave and not acknowledged: packet id -> token
    order: list[int] = []  # packet ids in the order they (first) left
    issued: list[int] = []
    returned: list[int] = []
    abandoned: set[int] = set()
    token = 0
    for op, arg in steps:
        if op == "pub":
            token += 1
            packet = session.publish(FIELD, b"v", arg, b"\x00", token)
            if arg == 0:
                continue
            issued.append(token)
            if packet is not None:
                assert not _is_dup(packet)
                pid = _packet_id(packet)
                assert pid not in by_id
                by_id[pid] = token
                order.append(pid)
        elif op in ("ack", "ack-in-read") and by_id:
            pid = sorted(by_id)[arg % len(by_id)]
            acked, _ = session.puback(_puback(pid))
            assert acked == by_id.pop(pid)
            order.remove(pid)
            returned.append(acked)
            for packet, released in session.release(lambda t: t in abandoned):
                rid = _packet_id(packet)
                assert rid not in by_id and not _is_dup(packet)
                by_id[rid] = released
                order.append(rid)
        elif op == "giveup" and by_id:
            abandoned.add(by_id[sorted(by_id)[arg % len(by_id)]])
        elif op == "cut":
            assert session.disconnected(lambda t: True) == []  # no SUBACK waits here: nothing to fail now
            successor: MqttSession[int] = MqttSession()
            successor.adopt(session)
            assert not session.inflight and not session.queued  # moved, not copied
            session = successor
            session.connack(_connack(receive_maximum=quota))
            queued_before = [entry[3] for entry in session.queued]
            resend, lost = session.resume(bool(arg), lambda t: t in abandoned)
            if not arg:
                assert resend == []
                assert sorted(lost) == sorted([*by_id.values(), *queued_before])
                returned += lost
                by_id.clear()
                order.clear()
                continue
            assert lost == []
            expected = [pid for pid in order if by_id[pid] not in abandoned]
            again = [p for p in resend if _is_dup(p)]
            assert [_packet_id(p) for p in again] == expected  # same ids, first-sent order
            for pid in order:
                if by_id[pid] in abandoned:
                    returned.append(by_id.pop(pid))  # given up: forgotten, not sent again
            order = list(expected)
            for packet in resend[len(again) :]:  # then what waited for the quota, as new publishes
                rid = _packet_id(packet)
                assert rid not in by_id
                by_id[rid] = session.inflight[rid][0]
                order.append(rid)
        assert set(session.inflight) == set(by_id)
        assert len(set(by_id)) == len(by_id)
    left = session.lost()
    assert sorted(returned + left) == sorted(issued)


def test_a_lost_connection_fails_its_subscribe_waits_but_keeps_its_publishes() -> None:
    session: MqttSession[str] = MqttSession()
    first = session.publish(FIELD, b"1", 1, b"\x00", "request")
    assert first is not None
    sub = session.request_id("subscribe")
    waited = session.publish(FIELD, b"2", 1, b"\x00", "publish() caller")
    assert session.disconnected(lambda t: t != "publish() caller") == ["subscribe", "publish() caller"]
    nxt: MqttSession[str] = MqttSession()
    nxt.adopt(session)
    resend, lost = nxt.resume(True, lambda t: False)
    assert lost == [] and resend == [bytes((first[0] | 0x08,)) + first[1:]]
    assert waited is not None and _packet_id(waited) not in nxt.inflight
    assert nxt.request_id("again") != _packet_id(first) and sub  # a fresh id, never one still in flight


def test_the_connect_packet_pinned() -> None:
    """What a default client sends (CleanStart=0, Session Expiry 3600, Receive Maximum 256, no Maximum Packet
    Size): byte for byte."""
    packet = MqttSession[None]().connect_packet("me", clean_start=False, session_expiry=3600)
    assert packet == bytes.fromhex("101700044d5154540500003c081100000e1021010000026d65")
    clean = MqttSession[None]().connect_packet("me")
    assert clean == bytes.fromhex("101200044d5154540502003c0321010000026d65")
    limited = MqttSession[None](max_inbound_packet_size=4096).connect_packet("me")
    assert limited == bytes.fromhex("101700044d5154540502003c08210100270000100000026d65")


def test_the_disconnect_that_ends_the_session() -> None:
    [(first, body)] = packets.PacketSplitter().feed(packets.DISCONNECT_END_SESSION)
    assert first >> 4 == packets.DISCONNECT_TYPE and body[0] == 0
    props, _ = packets._properties(body, 1)
    assert props == {0x11: 0}
