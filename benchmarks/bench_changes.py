"""What ``d.changes()`` costs at 1,000 / 10,000 / 100,000 keys, on mosquitto + the emulator process, SCAN mode.

Run:  python benchmarks/bench_changes.py [--sizes 1000,10000,100000] [--repeats 5] [--changes 50]

A private mosquitto and an emulator process (its default SCAN page size) are started here (loopback only). For each
size a namespace is filled, a dict opened on it in SCAN mode, and one stream started on it:

* start: what ``stream.start()`` takes (a listing, then a watch and a read of every key: 2 requests per key);
* one SCAN pass: what the feed does every ``scan_interval`` (1 s by default) to find keys other processes add,
  median of ``--repeats``, and the share of that interval it takes;
* per change: from another client's SET to the decoded change in the stream, median of ``--changes``, against a
  GET round trip measured in the same run (the machines are shared and noisy).

This is a script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _shared import machine, start_emulator
from bench_scan import fill

from sskv_mapping import AsyncStateStoreDict
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.emulator.scan import DEFAULT_SCAN_PAGE_SIZE
from sskv_mapping.mapping._changes import DEFAULT_SCAN_INTERVAL
from sskv_mapping.mapping._listing import NamespaceListing


async def measure(host: str, port: int, n: int, repeats: int, changes: int) -> dict[str, float]:
    ns = f"bench-changes-{n}-{uuid.uuid4().hex[:6]}"
    async with (
        AsyncStateStoreClient(host, port, timeout=120) as writer,
        AsyncStateStoreClient(host, port, timeout=120) as reader,
    ):
        await fill(writer, f"{ns}/", n)
        async with AsyncStateStoreDict(reader, namespace=ns, listing="scan") as d:
            stream = d.changes(maxsize=10 * changes)
            t0 = time.perf_counter()
            await stream.start()
            start = time.perf_counter() - t0
            index = d._store.index
            assert isinstance(index, NamespaceListing)
            scans = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                await index.listing(refresh=True)
                scans.append(time.perf_counter() - t0)
            gets, lags = [], []
            for i in range(changes):
                t0 = time.perf_counter()
                await writer.get(f"{ns}/{i:07d}")
                gets.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await writer.set(f"{ns}/{i:07d}", b'"changed"')
                change = await stream.next(timeout=30)
                lags.append(time.perf_counter() - t0)
                assert change.key == f"{i:07d}" and change.value == "changed"
            await stream.aclose()
    scan = statistics.median(scans)
    return {
        "keys": n,
        "start_s": start,
        "scan_ms": scan * 1000,
        "scan_share": scan / DEFAULT_SCAN_INTERVAL,
        "change_ms": statistics.median(lags) * 1000,
        "get_ms": statistics.median(gets) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--changes", type=int, default=50)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(machine())
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port, "--scan-page-size", str(DEFAULT_SCAN_PAGE_SIZE))
        try:
            rows = [asyncio.run(measure(broker.host, broker.port, n, args.repeats, args.changes)) for n in sizes]
        finally:
            emulator.kill()
            emulator.wait(10)
    print(
        f"\n| keys | start (watch + read each) | one SCAN pass | share of a {DEFAULT_SCAN_INTERVAL:g} s interval "
        "| SET -> change | GET round trip | change / GET |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['keys']:,} | {r['start_s']:.2f} s | {r['scan_ms']:.1f} ms | {r['scan_share']:.1%} "
            f"| {r['change_ms']:.2f} ms | {r['get_ms']:.2f} ms | {r['change_ms'] / r['get_ms']:.2f}x |"
        )


if __name__ == "__main__":
    main()
