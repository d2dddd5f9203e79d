"""What each toxic of the fault proxy costs a caller, and how long the client takes to recover once it is removed.

A private mosquitto and the emulator process (StateStoreServer); one AsyncStateStoreClient behind a FaultProxy.
For each toxic, ROUNDS times: the steady GET latency (median of 200), then GETs back to back for SECONDS with the
toxic on the client's link (each call's latency and failures), then the time from its removal until three GETs in
a row are back within 4x the steady median. Prints medians over the rounds.

    python benchmarks/bench_toxics.py [--rounds 3] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.testing import FaultProxy, StateStoreServer

KEEPALIVE = 3
TOXICS: list[tuple[str, list[tuple[str, str, dict[str, float]]]]] = [
    ("latency 50±40 ms each way", [("latency", s, {"latency": 50, "jitter": 40}) for s in ("upstream", "downstream")]),
    ("bandwidth 64 KB/s each way", [("bandwidth", s, {"rate": 64}) for s in ("upstream", "downstream")]),
    (
        "slicer 1-9 B segments, 0.5 ms apart",
        [("slicer", s, {"average_size": 5, "size_variation": 4, "delay": 500}) for s in ("upstream", "downstream")],
    ),
    ("reset_peer every 0.3-1.1 s (flapping)", [("reset_peer", "downstream", {"timeout": 700, "jitter": 400})]),
    ("timeout 0 (stall, half-open)", [("timeout", s, {"timeout": 0}) for s in ("upstream", "downstream")]),
    ("limit_data 6,000 B per connection", [("limit_data", s, {"bytes": 6000}) for s in ("upstream", "downstream")]),
    ("slow_close 500 ms + a cut", [("slow_close", s, {"delay": 500}) for s in ("upstream", "downstream")]),
]


async def _get(client: AsyncStateStoreClient, key: str) -> float:
    start = time.perf_counter()
    await client.get(key, timeout=60)
    return time.perf_counter() - start


async def _round(
    proxy: FaultProxy,
    client: AsyncStateStoreClient,
    key: str,
    toxics: list[tuple[str, str, dict[str, float]]],
    seconds: float,
) -> dict[str, Any]:
    steady = statistics.median([await _get(client, key) for _ in range(200)])
    for n, (type_, stream, attributes) in enumerate(toxics):
        proxy.add_toxic(type_, stream=stream, name=f"t{n}", **attributes)
    if toxics[0][0] == "slow_close":
        proxy.cut(0.1)
    latencies: list[float] = []
    failed = 0
    end = time.monotonic() + seconds

    async def load() -> None:
        nonlocal failed
        while time.monotonic() < end:
            try:
                latencies.append(await _get(client, key))
            except Exception:
                failed += 1

    calls = asyncio.ensure_future(load())
    await asyncio.sleep(seconds)
    proxy.reset()  # on time, whatever the calls are doing (a stalled one is still waiting)
    removed = time.perf_counter()
    await calls
    streak = 0
    gave_up = time.perf_counter() + 30
    while streak < 3:
        try:
            streak = streak + 1 if await _get(client, key) <= max(4 * steady, 0.002) else 0
        except Exception as exc:  # the client stopped for good: no recovery to measure
            if time.perf_counter() > gave_up:
                return {
                    "steady": steady,
                    "median": float("nan"),
                    "max": float("nan"),
                    "calls": len(latencies),
                    "failed": failed,
                    "recovery": float("inf"),
                    "error": type(exc).__name__,
                }
            streak = 0
            await asyncio.sleep(0.1)
    recovery = time.perf_counter() - removed
    return {
        "steady": steady,
        "median": statistics.median(latencies) if latencies else float("nan"),
        "max": max(latencies, default=float("nan")),
        "calls": len(latencies),
        "failed": failed,
        "recovery": recovery,
    }


async def main(rounds: int, seconds: float, only: str | None = None) -> None:
    with StateStoreServer() as server, FaultProxy((server.host, server.port)) as proxy:
        print(f"{rounds} rounds of {seconds:.0f} s per toxic, on the client's link; medians over the rounds")
        print("| toxic | steady GET | GET under the toxic (median / max) | calls | failed | reconnects | recovery |")
        print("|---|---|---|---|---|---|---|")
        for name, toxics in TOXICS:  # a client of its own per toxic: one that stopped spoils no other row
            if only is not None and not name.startswith(only):
                continue
            url = f"{proxy.url}?keepalive={KEEPALIVE}"
            async with AsyncStateStoreClient.from_url(url, timeout=60) as client:
                key = f"bench-toxic-{uuid.uuid4().hex[:8]}"
                await client.set(key, b"x" * 100)
                results = []
                for _ in range(rounds):
                    results.append(await _round(proxy, client, key, toxics, seconds))
                    if "error" in results[-1]:
                        break

                def med(field: str, results: list[dict[str, Any]] = results) -> float:
                    return statistics.median(r[field] for r in results)

                errors = sorted({r["error"] for r in results if "error" in r})
                recovery = f"{med('recovery') * 1000:.0f} ms" if not errors else f"never: {', '.join(errors)}"
                print(
                    f"| {name} | {med('steady') * 1000:.2f} ms | {med('median') * 1000:.1f} / {med('max') * 1000:.0f} ms "
                    f"| {med('calls'):.0f} | {med('failed'):.0f} | {client.reconnects / len(results):.1f} "
                    f"| {recovery} |",
                    flush=True,
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only", help="the toxics whose row starts with this (e.g. limit_data)")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.seconds, args.only))
