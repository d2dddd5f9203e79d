"""bench_dict (iv): the dict's two listing modes at growing namespace sizes, against ``client.set`` in the same run.

For each size ``n`` and each mode (``scan``, ``index``), on a namespace filled with ``n`` keys:

* new key: ``await d.set(new_key, v)`` against ``await client.set(raw_key, v)`` of the same client, interleaved,
  ``samples`` of each; medians and their ratio (targets: scan <= 1.1x, index <= 3x);
* popitem: ``await d.popitem()`` against ``await d.pop(known_key)``, interleaved (target: <= 2x);
* full listing: ``await d.keys()`` on a dict freshly opened by another client (cold: SCAN pages, or the index
  shards in use read and watched), and again warm; the SCAN's page count.

Not a test: shared machines are noisy, only same-run ratios mean much.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.mapping import AsyncStateStoreDict

MODES = ("scan", "index")


async def _fill(client: AsyncStateStoreClient, mode: str, n: int) -> str:
    namespace = f"bl{uuid.uuid4().hex[:8]}"
    d: AsyncStateStoreDict[int] = AsyncStateStoreDict(
        client,
        namespace=namespace,
        local_cache_size=0,
        listing=mode,  # type: ignore[arg-type]
    )
    async with d:
        for start in range(0, n, 5_000):
            await d.update({f"k{i}": i for i in range(start, min(n, start + 5_000))})
    return namespace


async def _median_pair(a: Any, b: Any, samples: int) -> tuple[float, float]:
    ta: list[float] = []
    tb: list[float] = []
    for i in range(samples):
        t0 = time.perf_counter()
        await a(i)
        t1 = time.perf_counter()
        await b(i)
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    return statistics.median(ta), statistics.median(tb)


async def measure(host: str, port: int, sizes: list[int], samples: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    client = AsyncStateStoreClient(host, port, timeout=60)
    other = AsyncStateStoreClient(host, port, timeout=60)
    await client.connect()
    await other.connect()
    try:
        for n in sizes:
            for mode in MODES:
                print(f"(iv) {mode}, {n:,} keys: filling...", flush=True)
                namespace = await _fill(client, mode, n)
                d: AsyncStateStoreDict[int] = AsyncStateStoreDict(
                    client,
                    namespace=namespace,
                    listing=mode,  # type: ignore[arg-type]
                )
                async with d:
                    await d.len()  # warm: the mode decided, the index loaded

                    async def new_key(i: int, d: AsyncStateStoreDict[int] = d) -> None:
                        await d.set(f"new{i}", i)

                    async def raw_set(i: int, namespace: str = namespace) -> None:
                        await client.set(f"{namespace}-raw/{i}", b"1")

                    dict_new, raw = await _median_pair(new_key, raw_set, samples)

                    async def popitem(i: int, d: AsyncStateStoreDict[int] = d) -> None:
                        await d.popitem()

                    async def pop_known(i: int, d: AsyncStateStoreDict[int] = d, n: int = n) -> None:
                        # spread over the namespace; popitem rarely took the same key first (then: a miss)
                        await d.pop(f"k{(i * 7919 + n // 2) % n}", None)

                    pops = min(samples, n // 3)
                    popitem_t, pop_t = await _median_pair(popitem, pop_known, pops)
                    fresh: AsyncStateStoreDict[int] = AsyncStateStoreDict(
                        other,
                        namespace=namespace,
                        listing=mode,  # type: ignore[arg-type]
                    )
                    async with fresh:
                        sent = other.requests_sent
                        t0 = time.perf_counter()
                        listed = len(await fresh.keys())
                        cold = time.perf_counter() - t0
                        cold_requests = other.requests_sent - sent
                        t0 = time.perf_counter()
                        await fresh.keys()
                        warm = time.perf_counter() - t0
                    await d.clear()  # the next size starts from a quiet store
                rows.append(
                    {
                        "n": n,
                        "mode": mode,
                        "new": dict_new,
                        "set": raw,
                        "popitem": popitem_t,
                        "pop": pop_t,
                        "listed": listed,
                        "cold": cold,
                        "cold_requests": cold_requests,
                        "warm": warm,
                    }
                )
    finally:
        await other.close()
        await client.close()
    return rows


def report(rows: list[dict[str, Any]], samples: int) -> None:
    print()
    print(
        f"| (iv) listing mode, keys | new key | client.set | ratio | popitem | pop(known) | ratio | "
        f"full listing cold (requests) | warm |   ({samples} samples, medians)"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']}, {r['n']:,} | {r['new'] * 1e3:.2f} ms | {r['set'] * 1e3:.2f} ms | "
            f"{r['new'] / r['set']:.2f}x | {r['popitem'] * 1e3:.2f} ms | {r['pop'] * 1e3:.2f} ms | "
            f"{r['popitem'] / r['pop']:.2f}x | {r['cold'] * 1e3:.0f} ms ({r['cold_requests']}) | "
            f"{r['warm'] * 1e3:.1f} ms |"
        )


def run(host: str, port: int, sizes: list[int], samples: int) -> None:
    report(asyncio.run(measure(host, port, sizes, samples)), samples)
