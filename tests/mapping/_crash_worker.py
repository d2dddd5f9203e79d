"""A writer that dies between two steps of a dict insert (not a test module).

Run as ``python tests/mapping/_crash_worker.py HOST PORT NAMESPACE STEP N MODE``: it opens the namespace as a dict
and inserts ``k0``, ``k1``, ... (``MODE`` ``seq``: one after the other; ``batch``: all at once, so that inserts
into one shard ride in one rewrite), and SIGKILLs itself right after the ``N``-th completed request of kind
``STEP``: ``lock`` (a shard lock's SET NEX granted: nothing written yet), ``shard`` (an index shard written:
the data not yet) or ``data`` (a data key written: the shard lock still kept). Prints ``done`` if it got
through without dying (the test fails on that).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from sskv_mapping._keys import store_key
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.mapping import AsyncStateStoreDict


async def main(host: str, port: int, namespace: str, step: str, nth: int, mode: str) -> None:
    client = AsyncStateStoreClient(host, port, timeout=10)
    await client.connect()
    ns = namespace.encode()
    seen = 0
    original = client.set

    def kind(key: bytes) -> str:
        if key.startswith(ns + b"#index-lock/"):
            return "lock"
        if key.startswith(ns + b"#index/"):
            return "shard"
        return "data" if key.startswith(ns + b"/") else "other"

    async def set_then_maybe_die(key: Any, value: Any, **kwargs: Any) -> Any:
        nonlocal seen
        result = await original(key, value, **kwargs)
        if result.applied and kind(store_key(key)) == step:
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return result

    client.set = set_then_maybe_die  # type: ignore[method-assign]  # a spy in its place
    d: AsyncStateStoreDict[int] = AsyncStateStoreDict(client, namespace=namespace, local_cache_size=0, listing="index")
    await d.open()
    if mode == "seq":
        for i in range(12):
            await d.set(f"k{i}", i)
    else:
        await asyncio.gather(*(d.set(f"k{i}", i) for i in range(12)))
    print("done", flush=True)
    await d.close()
    await client.close()


if __name__ == "__main__":
    host, port, namespace, step, nth, mode = sys.argv[1:7]
    asyncio.run(main(host, int(port), namespace, step, int(nth), mode))
