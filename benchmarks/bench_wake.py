"""The wake of a write burst: what a fill of N new keys sends, and what a call costs right after it.

Run:  python benchmarks/bench_wake.py [--sizes 1000,10000,100000] [--writers 64] [--window 1.0] [--fill write|read]

For each size N a private mosquitto and the emulator process are started (loopback only), and one client with a
dict on it (the default 10,000-entry local cache, ``listing="scan"``):

settled: before the fill, a new key (``d[key] = v``) and a ``client.set`` of the same bytes, taken in turn call by
    call for ``--window`` seconds;
fill: ``--writers`` concurrent writers add N new keys (``--fill read``: each writer reads its key back after
    writing it, so the keys are watched and cached, and past the watch limit -- twice the cache -- the idle
    watches are released: background STOPs, and revalidations of the cached entries); the requests the client
    sent per key (``client.requests_sent``), the watches the dict released, the fill's duration;
after: the same new key / ``client.set`` pair for ``--window`` seconds right after the fill returned (the first
    second), and again from 10 s and from 30 s after it; and the requests the client sent beside those windows'
    own (the background work the fill left behind: KEYNOTIFY STOPs of released watches, revalidations), in the
    first window and up to 10 s and 30 s after the fill.

Latencies are medians; the "x settled" ratios compare each window with the settled figures of the same run.
Compare two trees by running this script with ``PYTHONPATH=<tree>`` for each (the emulator follows it).
This is a script, not a test: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _shared import machine, start_emulator

import sskv_mapping
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import AsyncStateStoreDict

VALUE = {"feature": "enabled", "limit": 250, "owners": ["a", "b"]}
LATER = (10.0, 30.0)


async def window(
    client: AsyncStateStoreClient, d: AsyncStateStoreDict[Any], tag: str, seconds: float
) -> dict[str, float]:
    """Median latency of a new dict key and of a ``client.set`` of the same bytes, in turn, for ``seconds``."""
    raw = json.dumps(VALUE, separators=(",", ":")).encode()
    new_key: list[float] = []
    plain: list[float] = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end or len(new_key) < 20:
        t0 = time.perf_counter()
        await d.set(f"{tag}-{i}", VALUE)
        t1 = time.perf_counter()
        await client.set(f"plain-{tag}-{i}", raw)
        new_key.append(t1 - t0)
        plain.append(time.perf_counter() - t1)
        i += 1
    return {"new_key": statistics.median(new_key), "client_set": statistics.median(plain), "n": len(new_key)}


async def measure(n: int, writers: int, seconds: float, fill: str) -> dict[str, Any]:
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            async with AsyncStateStoreClient(broker.host, broker.port, timeout=60) as client:
                d: AsyncStateStoreDict[Any] = AsyncStateStoreDict(
                    client, namespace=f"wake-{uuid.uuid4().hex[:6]}", listing="scan"
                )
                await d.open()
                await window(client, d, "warm", seconds)  # the first calls of a fresh process are dearer
                settled = await window(client, d, "settled", seconds)
                queue: asyncio.Queue[int] = asyncio.Queue()
                for i in range(n):
                    queue.put_nowait(i)

                async def writer() -> None:
                    while not queue.empty():
                        i = queue.get_nowait()
                        await d.set(f"k{i}", VALUE)
                        if fill == "read":
                            await d.get(f"k{i}")

                before = client.requests_sent
                t0 = time.perf_counter()
                await asyncio.gather(*(writer() for _ in range(writers)))
                fill_s = time.perf_counter() - t0
                filled_at = time.monotonic()
                per_key = (client.requests_sent - before) / n
                after_fill = client.requests_sent
                first = await window(client, d, "first", seconds)
                own = 2 * first["n"]  # the windows' own requests: a new key and a client.set per sample
                in_first = client.requests_sent - after_fill - own
                later: list[dict[str, float]] = []
                tails: list[int] = []
                for at in LATER:
                    await asyncio.sleep(max(0.0, filled_at + at - time.monotonic()))
                    tails.append(client.requests_sent - after_fill - own)
                    later.append(await window(client, d, f"later{at:.0f}", seconds))
                    own += 2 * later[-1]["n"]
                released = d._store.watches.released
                await d.close()
        finally:
            emulator.terminate()
            emulator.wait(10)
    return {
        "n": n,
        "fill": fill,
        "fill_s": fill_s,
        "per_key": per_key,
        "released": released,
        "background_first": in_first,
        "background_10s": tails[0],
        "background_30s": tails[1],
        "settled": settled,
        "first": first,
        "later": later[0],
        "later30": later[1],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--writers", type=int, default=64)
    ap.add_argument("--window", type=float, default=1.0, help="seconds of sampling per window (default 1)")
    ap.add_argument("--fill", choices=("write", "read"), default="write", help="read: read each new key back")
    args = ap.parse_args()
    print(f"machine: {machine()}; sskv_mapping from {Path(sskv_mapping.__file__).parent.parent}", flush=True)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        r = asyncio.run(measure(n, args.writers, args.window, args.fill))
        rows.append(r)
        print(json.dumps(r), flush=True)
    print()
    print(
        "| keys | fill | requests per key | watches released | background requests, first s / 10 s / 30 s "
        "| new key: settled; first s, 10 s, 30 s | client.set: settled; first s, 10 s, 30 s |"
    )
    print("|---:|---:|---:|---:|---:|---|---|")

    def cells(r: dict[str, Any], what: str) -> str:
        base = r["settled"][what]
        at = ", ".join(f"{r[w][what] * 1e3:.2f} ({r[w][what] / base:.2f}x)" for w in ("first", "later", "later30"))
        return f"{base * 1e3:.2f} ms; {at}"

    for r in rows:
        print(
            f"| {r['n']:,} | {r['fill']} {r['fill_s']:.1f} s | {r['per_key']:.2f} | {r['released']:,} "
            f"| {r['background_first']:,} / {r['background_10s']:,} / {r['background_30s']:,} "
            f"| {cells(r, 'new_key')} | {cells(r, 'client_set')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
