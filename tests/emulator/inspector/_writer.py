"""Another process that writes through the library, for the browser tests: ``python _writer.py HOST PORT``.

It builds a realistic state (a dict with a stored index, a cache, a held leased lock with a fenced write, a watch),
prints ``ready``, then runs commands from stdin, one a line, printing ``ok`` after each:
``set KEY VALUE`` (a plain client SET) and ``quit`` (or end of input): release the lock, close, exit 0.
"""

from __future__ import annotations

import asyncio
import sys

from sskv_mapping import AsyncStateStoreCache, AsyncStateStoreDict
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.lock import AsyncLeasedLock


async def main(host: str, port: int) -> None:
    async with AsyncStateStoreClient(host, port) as client:
        orders: AsyncStateStoreDict[object] = AsyncStateStoreDict(client, namespace="orders", listing="index")
        for n, (item, qty) in enumerate([("espresso beans", 2), ("grinder", 1), ("filters", 10)], start=1001):
            await orders.set(str(n), {"item": item, "qty": qty, "status": "paid"})
        web: AsyncStateStoreCache[object] = AsyncStateStoreCache(client, namespace="web")
        await web.set("session:alice", {"user": "alice", "roles": ["admin"]}, ttl=300)
        await web.set("page:/home", "<h1>Welcome</h1>", ttl=60)
        await web.set("config", {"theme": "dark"}, ttl=None)
        lock = AsyncLeasedLock(client, "orders-lock", lease=60)
        await lock.acquire()
        await lock.set("orders-total", b"142.50")
        await client.set("device/thermostat-7", bytes([0x07, 0x00, 0xDC, 0x01, 0xFF]))
        await client.set("config/feature-flags", b'{"new-checkout": true, "beta-search": false}')
        async with client.watch("config/feature-flags"):
            print("ready", flush=True)
            loop = asyncio.get_running_loop()
            while True:
                line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
                if not line or line == "quit":
                    break
                verb, key, value = line.split(" ", 2)
                assert verb == "set", line
                await client.set(key, value.encode())
                print("ok", flush=True)
        await lock.release()
        await web.close()
        await orders.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
