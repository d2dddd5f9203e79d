"""Revalidation cost: the background re-reads that keep a local cache within ``max_staleness``.

Run:  python benchmarks/bench_revalidate.py [--entries 10000] [--max-staleness 30] [--window 60]

A dict with a local cache of ``--entries`` entries (all cached, all watched) on a private mosquitto and the
emulator process, left idle: every entry must be confirmed at least every ``max_staleness`` seconds, so the
namespace store re-reads those about to age out (32 at a time, one task). Reported over ``--window`` seconds once
the first entries came due: re-reads per second, this process's CPU seconds per second (time.process_time), and
whether any entry stopped being served (a hit turned miss: the revalidation fell behind).

This is a script, not a test: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import time

from _shared import start_emulator

from sskv_mapping import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--max-staleness", type=float, default=30.0)
    ap.add_argument("--window", type=float, default=60.0)
    args = ap.parse_args()
    print(f"machine: {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            async with AsyncStateStoreClient(broker.host, broker.port) as client:
                d: AsyncStateStoreDict[int] = AsyncStateStoreDict(
                    client, namespace="reval", local_cache_size=args.entries, max_staleness=args.max_staleness
                )
                await d.open()
                keys = [f"k{i}" for i in range(args.entries)]
                await d.update({k: i for i, k in enumerate(keys)})
                for k in keys:
                    await d.get(k)
                store, cache = d._store, d.local_cache
                assert cache is not None
                hit = d._core.hit
                cached = sum(hit(k) is not None for k in keys)
                print(f"{cached:,} of {args.entries:,} entries cached; waiting for the first to come due...")
                while store.watches.revalidations == 0:  # noqa: ASYNC110 - a counter, no event to wait on
                    await asyncio.sleep(0.5)
                start, cpu0, n0, misses0 = (
                    time.monotonic(),
                    time.process_time(),
                    store.watches.revalidations,
                    cache.stale_misses,
                )
                lowest = cached
                while time.monotonic() - start < args.window:
                    await asyncio.sleep(1.0)
                    lowest = min(lowest, sum(hit(k) is not None for k in keys))
                elapsed = time.monotonic() - start
                rate = (store.watches.revalidations - n0) / elapsed
                cpu = (time.process_time() - cpu0) / elapsed
                print()
                print(f"| revalidation, {args.entries:,} entries, max_staleness {args.max_staleness:g} s | value |")
                print("|---|---|")
                print(f"| background re-reads per second ({elapsed:.0f} s window) | {rate:,.0f} |")
                print(f"| re-reads per entry per max_staleness | {rate * args.max_staleness / args.entries:.2f} |")
                print(f"| this process's CPU, seconds per second | {cpu:.3f} |")
                print(f"| fewest entries served at a 1 s sample (of {cached:,}) | {lowest:,} |")
                print(f"| stale misses in the window | {cache.stale_misses - misses0} |")
                await d.close()
        finally:
            emulator.terminate()
            emulator.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
