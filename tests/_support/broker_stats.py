"""What a private mosquitto says about messages it dropped: its ``$SYS`` counter and its log.

mosquitto drops a QoS 1 message for a session whose queue is full (``max_queued_messages``, default 1,000 beyond
20 in flight) without telling either end; ``$SYS/broker/publish/messages/dropped`` counts them (published every
``sys_interval`` seconds, retained) and the log says "Outgoing messages are being dropped for client ...".
"""

from __future__ import annotations

import asyncio
import uuid

from sskv_mapping._transport.base import InboundMessage
from sskv_mapping._transport.factory import new_connection
from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.emulator.broker import MosquittoBroker

DROPPED_TOPIC = "$SYS/broker/publish/messages/dropped"
UPTIME_TOPIC = "$SYS/broker/uptime"
#: the extra config line for a test broker whose $SYS counters are fresh within a second (no queue limit changed)
FAST_SYS = "sys_interval 1"


async def dropped_messages(broker: MosquittoBroker, *, timeout: float = 15.0) -> int:
    """The broker's dropped-message counter, as of a ``$SYS`` update made after this call began.

    mosquitto publishes the counter (retained) only when it changed, in its periodic ``$SYS`` update, after the
    uptime (which changes every update). So: subscribe to both, wait for the retained uptime and two updates; by
    the second, the update before it has published the counter if it had changed: the last value seen is current."""
    dropped: list[int] = []
    uptimes = 0
    tick = asyncio.Event()

    def on_message(message: InboundMessage) -> None:
        nonlocal uptimes
        if message.topic == DROPPED_TOPIC:
            dropped.append(int(message.payload.decode()))
        elif message.topic == UPTIME_TOPIC:
            uptimes += 1
            tick.set()

    settings = ConnectionSettings(broker.host, broker.port, client_id=f"sys-reader-{uuid.uuid4().hex[:8]}")
    conn = new_connection(settings, on_message)
    await conn.connect()
    try:
        await conn.subscribe([DROPPED_TOPIC, UPTIME_TOPIC], qos=0)
        async with asyncio.timeout(timeout):
            while uptimes < 3:  # the retained one, then two updates
                tick.clear()
                await tick.wait()
    finally:
        await conn.close()
    return dropped[-1] if dropped else 0


def log_reports_drops(broker: MosquittoBroker) -> bool:
    """Whether the broker's log says it dropped outgoing messages for some client."""
    return "being dropped" in broker.read_log()
