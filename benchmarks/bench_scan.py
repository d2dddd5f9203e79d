"""A full SCAN listing on the emulator: pages and time at 1,000 / 10,000 / 100,000 keys, with the emulator's
default page size and with small pages.

Run:  python benchmarks/bench_scan.py [--sizes 1000,10000,100000] [--page-sizes 100,10] [--repeats 5]

A private mosquitto and, for each page size, an emulator process (``--scan-page-size``) are started here
(loopback only). Each emulator holds three namespaces, one per size, all at once (so every listing runs in a
store larger than what it lists), and each is listed with ``client.scan(escape_glob(ns) + b"*")``:

* pages, wall time (median of ``--repeats`` listings), keys/s and time per page;
* per page against a ``client.get`` round trip measured in the same run (the machines are shared and noisy):
  a page costs a round trip plus its keys;
* the same namespace listed with a glob that is not a prefix (``ns/*7``): the matcher looks at every key of the
  namespace; pages come back with fewer keys (some empty), the count of examined keys bounds each page;
* the emulator core alone (in this process, no broker, no client): the service side's cost of a page at each
  size -- flat from 1k to 100k keys if a page costs what it examines, not the store.

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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _shared import machine, start_emulator

from sskv_mapping import escape_glob
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker


async def fill(client: AsyncStateStoreClient, ns: str, n: int) -> None:
    chunk = 1_000
    for start in range(0, n, chunk):
        await asyncio.gather(*(client.set(f"{ns}{i:07d}", b"v") for i in range(start, min(n, start + chunk))))


async def list_once(client: AsyncStateStoreClient, pattern: bytes) -> tuple[float, int, int]:
    pages = keys = 0
    t0 = time.perf_counter()
    async for page in client.scan_pages(pattern, timeout=600):
        pages += 1
        keys += len(page)
    return time.perf_counter() - t0, pages, keys


async def measure(host: str, port: int, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    rows = []
    async with AsyncStateStoreClient(host, port, timeout=60) as client:
        spaces = {n: f"bench-scan-{n}-{uuid.uuid4().hex[:6]}/" for n in sizes}
        for n, ns in spaces.items():
            await fill(client, ns, n)
        await client.set("probe", b"v")
        for n, ns in spaces.items():
            for label, pattern in (("prefix*", escape_glob(ns) + b"*"), ("prefix*7", escape_glob(ns) + b"*7")):
                times, pages, keys = [], 0, 0
                for _ in range(repeats if n < 100_000 else max(3, repeats // 2)):
                    t, pages, keys = await list_once(client, pattern)
                    times.append(t)
                gets = []
                for _ in range(200):
                    t0 = time.perf_counter()
                    await client.get("probe")
                    gets.append(time.perf_counter() - t0)
                median = statistics.median(times)
                get = statistics.median(gets)
                expected = n if label == "prefix*" else n // 10
                assert keys == expected, (label, n, keys)
                rows.append(
                    {
                        "n": n,
                        "pattern": label,
                        "pages": pages,
                        "keys": keys,
                        "median_s": median,
                        "keys_per_s": keys / median if median else 0.0,
                        "per_page_ms": median / pages * 1000,
                        "get_ms": get * 1000,
                    }
                )
                print(
                    f"  {n:>7,} keys {label:<9} {pages:>6,} pages  {median * 1000:>9.1f} ms  "
                    f"{keys / median:>10,.0f} keys/s  {median / pages * 1000:6.2f} ms/page  "
                    f"(get {get * 1000:.2f} ms: page/get {median / pages / get:.1f}x)",
                    flush=True,
                )
    return rows


def measure_core(sizes: list[int], page_size: int, repeats: int) -> None:
    """The emulator core alone: a whole listing through ``EmulatorCore.handle``, per page."""
    from sskv_mapping._protocol.commands import Scan
    from sskv_mapping._protocol.resp3 import encode_request
    from sskv_mapping.emulator.core import EmulatorCore

    core = EmulatorCore(scan_page_size=page_size)
    ts = {"__ts": f"{time.time_ns() // 1_000_000}:0:bench"}
    spaces = {n: f"core-{n}/".encode() for n in sizes}
    for n, ns in spaces.items():
        for i in range(n):
            core.handle("bench", encode_request(b"SET", ns + b"%07d" % i, b"v"), ts)
    for n, ns in spaces.items():
        times, pages = [], 0
        for _ in range(repeats):
            token, pages = None, 0
            t0 = time.perf_counter()
            while True:
                cmd = Scan(escape_glob(ns) + b"*", token)
                token = cmd.decode(core.handle("bench", cmd.encode(), ts).payload).token
                pages += 1
                if token is None:
                    break
            times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        print(
            f"  core alone, page size {page_size:>3}: {n:>7,} keys  {pages:>6,} pages  {median * 1000:>8.1f} ms  "
            f"{median / pages * 1e6:7.1f} us/page",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="namespace sizes, comma-separated")
    parser.add_argument("--page-sizes", default="100,10", help="emulator --scan-page-size values (100: default)")
    parser.add_argument("--repeats", type=int, default=5, help="listings per row (median; halved at 100k)")
    parser.add_argument("--core-only", action="store_true", help="measure the emulator core alone, no broker")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"machine: {machine()}", flush=True)
    for page_size in (int(p) for p in args.page_sizes.split(",")):
        measure_core(sizes, page_size, args.repeats)
    if args.core_only:
        return 0
    with MosquittoBroker() as broker:
        for page_size in (int(p) for p in args.page_sizes.split(",")):
            print(f"emulator --scan-page-size {page_size}:", flush=True)
            emulator = start_emulator(broker.host, broker.port, "--scan-page-size", str(page_size))
            try:
                asyncio.run(measure(broker.host, broker.port, sizes, args.repeats))
            finally:
                emulator.terminate()
                emulator.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
