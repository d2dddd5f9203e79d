"""The emulator's outbox on a scripted connection (fast unit tests; tests/boundary/test_boundary_limits.py has the same
behaviour over mosquitto and the emulator process): replies are never dropped within the bound, a reply that cannot
be sent is answered ``-ERR``, a fan-out keeps its order and goes out a chunk at a time."""

from __future__ import annotations

import asyncio
from typing import Any

from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.limits import WRITE_BOUND
from sskv_mapping._protocol.mqtt_publish import OutgoingMessage
from sskv_mapping._protocol.resp3 import encode_error
from sskv_mapping._protocol.topics import notification_topic
from sskv_mapping.emulator import outbox as outbox_module
from sskv_mapping.emulator.core import Notification
from sskv_mapping.emulator.outbox import Outbox
from sskv_mapping.errors import OverloadedError, ResponseTooLargeError, WriteBufferFullError
from tests._support.waiting import eventually


class ScriptedConnection:
    """``publish_nowait`` refuses payloads over ``room`` bytes (``WriteBufferFullError``) while ``full``; ``publish``
    waits until ``full`` is cleared. Everything sent is recorded, in order."""

    max_packet_size: int | None = None

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []
        self.full = False
        self.room = 100
        self.opened = asyncio.Event()

    def publish_nowait(self, message: OutgoingMessage, **kw: Any) -> None:
        if self.full and len(message.payload) > self.room:
            raise WriteBufferFullError("no room")
        self.sent.append((message.topic, message.payload, message.correlation_data))

    async def publish(self, message: OutgoingMessage, **kw: Any) -> None:
        while self.full:
            await self.opened.wait()
            self.opened.clear()
        self.sent.append((message.topic, message.payload, message.correlation_data))

    def make_room(self) -> None:
        self.full = False
        self.opened.set()


def _outbox(conn: ScriptedConnection) -> tuple[Outbox, dict[str, int]]:
    stats: dict[str, int] = {"notifications": 0}
    return Outbox(lambda: conn, stats, set()), stats  # type: ignore[arg-type, return-value]  # a scripted fake


def _notes(n: int, key: bytes = b"k") -> list[Notification]:
    version = HybridLogicalClock(1_700_000_000_000, 0, "StateStore")
    return [Notification(f"watcher-{i}", key, b"payload", version) for i in range(n)]


async def test_replies_without_room_wait_for_it_in_order_and_none_is_dropped() -> None:
    conn = ScriptedConnection()
    box, stats = _outbox(conn)
    conn.full = True
    for i in range(6):
        box.publish("resp", b"v" * 1000 + bytes([i]), b"c%d" % i, [], None)
    assert conn.sent == [] and box.waiting == 6 and stats["waited"] == 6
    conn.make_room()
    await eventually(lambda: len(conn.sent) == 6)
    assert [corr for _, _, corr in conn.sent] == [b"c%d" % i for i in range(6)]
    assert box.waiting == 0


async def test_past_the_bound_a_reply_is_answered_overloaded_at_once(monkeypatch: Any) -> None:
    monkeypatch.setattr(outbox_module, "_WAITING_BYTES_MAX", 2500)
    conn = ScriptedConnection()
    box, stats = _outbox(conn)
    conn.full = True
    for i in range(3):
        box.publish("resp", b"v" * 1000, b"c%d" % i, [], None)
    assert conn.sent == [("resp", encode_error(OverloadedError.TEXT), b"c2")]  # the third: no room to wait in
    assert stats["overloaded"] == 1
    conn.make_room()
    await eventually(lambda: len(conn.sent) == 3)


def test_a_reply_over_the_write_bound_is_answered_too_large() -> None:
    conn = ScriptedConnection()
    box, stats = _outbox(conn)
    box.publish("resp", b"x" * (WRITE_BOUND + 1), b"c", [], None)
    assert conn.sent == [("resp", encode_error(ResponseTooLargeError.TEXT), b"c")]
    assert stats["too_large"] == 1


async def test_a_fan_out_goes_out_in_order_a_chunk_at_a_time_and_a_reply_need_not_wait_for_all_of_it() -> None:
    conn = ScriptedConnection()
    box, _ = _outbox(conn)
    notes = _notes(2500)
    box.notify(notes)
    assert len(conn.sent) == outbox_module._FANOUT_CHUNK  # the first chunk at once, the rest drained later
    box.publish("resp", b"+OK\r\n", b"other", [], None)  # another client's reply: out now
    assert conn.sent[-1] == ("resp", b"+OK\r\n", b"other")
    await eventually(lambda: len(conn.sent) == 2501)
    topics = [topic for topic, _, corr in conn.sent if corr is None]
    assert topics == [notification_topic(n.client_id, n.key) for n in notes]


async def test_notifications_keep_their_order_behind_what_waits_and_replies_wait_past_the_backpressure_mark(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(outbox_module, "_BACKPRESSURE_NOTES", 1500)
    conn = ScriptedConnection()
    box, _ = _outbox(conn)
    first, second = _notes(3000, b"a"), _notes(10, b"b")
    box.notify(first)
    box.notify(second)  # behind the 2,000 of the first still waiting
    box.publish("resp", b"+OK\r\n", b"writer", [], None)  # 2,010 wait: this reply waits behind them
    assert (("resp", b"+OK\r\n", b"writer")) not in conn.sent
    await eventually(lambda: len(conn.sent) == 3011)
    assert conn.sent[-1] == ("resp", b"+OK\r\n", b"writer")
    topics = [topic for topic, _, corr in conn.sent if corr is None]
    assert topics == [notification_topic(n.client_id, n.key) for n in first + second]


async def test_past_the_notification_bound_they_are_dropped_and_counted(monkeypatch: Any) -> None:
    monkeypatch.setattr(outbox_module, "_WAITING_NOTES_MAX", 3000)
    conn = ScriptedConnection()
    box, stats = _outbox(conn)
    box.notify(_notes(2500))  # 1,500 wait
    box.notify(_notes(2000, b"b"))  # would make 3,500: dropped whole
    assert stats["notifications_dropped"] == 2000
    await eventually(lambda: len(conn.sent) == 2500)
