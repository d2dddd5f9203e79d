"""A zero-cost state store: answers a SET with OK and any other request with the same GET hit, written directly
on asyncio streams (benchmarks/_rawmqtt.py). Run as its own process by bench_rpc.py, so that the client is measured
without the emulator's work: ``python benchmarks/_zero_responder.py HOST PORT``.

It prints ``ready`` once subscribed, then serves until killed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rawmqtt import RawMqtt, user_properties

REQUEST_TOPIC = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"
VALUE = b"x" * 16
REPLY = b"$16\r\n" + VALUE + b"\r\n"
SET_REPLY = b"+OK\r\n"
# what the service puts on a GET hit: status, protocol version, the key's version
USER = user_properties([("__stat", "200"), ("__protVer", "1.0"), ("__ts", "001700000000000:00001:StateStore")])


async def main(host: str, port: int) -> None:
    # no keepalive: it sends no PINGREQ, and between bench_instructions' runs it may be idle for minutes
    responder = RawMqtt(host, port, "bench-zero-responder", keepalive=0)
    await responder.connect()
    responder.on_publish = lambda t, p, props: responder.publish(
        props[0x08], SET_REPLY if p[8:11] == b"SET" else REPLY, corr=props[0x09], user=USER
    )
    await responder.subscribe(REQUEST_TOPIC)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
