"""A broker on its default settings vs the tuned one: dict writes through mosquitto + the emulator.

Run:  python benchmarks/bench_untuned_broker.py [--rounds 5] [--writes 200] [--new-keys 50] [--no-quickack] [--listing index]

Two private mosquittos on loopback, each with its own emulator process: one as the test suite tunes it
(``set_tcp_nodelay true``) and one on its default settings, as an install runs it
(``MosquittoBroker(default_settings=True)``: Nagle on the broker's side). Per round, on each, interleaved: ``d[k] = v`` on an existing key (one SET round trip) and
``d[new] = v`` on a new key (the data and the namespace index entry), timed one by one on a blocking
``StateStoreDict``; a plain ``AsyncStateStoreClient.set`` round trip too. Each figure is the median over the
rounds of each round's median; the untuned/tuned ratio is from the same run.

``--no-quickack`` turns TCP_QUICKACK off in this process and in both emulators (what the code did before):
the figures then show what an untuned broker costs without it.

This is a script, not a test: the machine is shared and noisy; only same-run ratios mean much.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from _shared import start_emulator

from sskv_mapping._transport import stream
from sskv_mapping.client import AsyncStateStoreClient, StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.mapping import StateStoreDict

_NO_QUICKACK = (
    "import sys, sskv_mapping._transport.stream as s; s._TCP_QUICKACK = None; "
    "from sskv_mapping.emulator.process import main; sys.exit(main(sys.argv[1:]))"
)


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def dict_round(d: StateStoreDict[Any], writes: int, new_keys: int) -> tuple[float, float]:
    d["existing"] = 0
    existing: list[float] = []
    for i in range(writes):
        t0 = time.perf_counter()
        d["existing"] = i
        existing.append(time.perf_counter() - t0)
    fresh: list[float] = []
    for _ in range(new_keys):
        key = f"n{uuid.uuid4().hex[:12]}"
        t0 = time.perf_counter()
        d[key] = 1
        fresh.append(time.perf_counter() - t0)
    return ms(existing), ms(fresh)


async def set_round(host: str, port: int, writes: int) -> float:
    async with AsyncStateStoreClient(host, port) as client:
        samples: list[float] = []
        for i in range(writes):
            t0 = time.perf_counter()
            await client.set("bench-untuned", str(i).encode())
            samples.append(time.perf_counter() - t0)
    return ms(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--writes", type=int, default=200, help="existing-key writes (and client.set) per round")
    ap.add_argument("--new-keys", type=int, default=50, help="new dict keys per round")
    ap.add_argument("--no-quickack", action="store_true", help="TCP_QUICKACK off (the code before it)")
    ap.add_argument("--listing", choices=("auto", "scan", "index"), default="auto", help="the dicts' listing mode")
    args = ap.parse_args()
    quickack = not args.no_quickack
    if not quickack:
        stream._TCP_QUICKACK = None
    brokers = {"tuned": MosquittoBroker(), "untuned": MosquittoBroker(default_settings=True)}
    emulators: list[subprocess.Popen[str]] = []
    clients: list[StateStoreClient] = []
    results: dict[str, dict[str, list[float]]] = {name: {"set": [], "existing": [], "new": []} for name in brokers}
    try:
        dicts: dict[str, StateStoreDict[Any]] = {}
        for name, broker in brokers.items():
            broker.start()
            emulators.append(
                start_emulator(
                    broker.host, broker.port, head=None if quickack else [sys.executable, "-c", _NO_QUICKACK]
                )
            )
            client = StateStoreClient(broker.host, broker.port)
            client.connect()
            clients.append(client)
            dicts[name] = StateStoreDict(client, namespace=f"bench{uuid.uuid4().hex[:8]}", listing=args.listing)
        for r in range(args.rounds):
            line = []
            for name, broker in brokers.items():
                set_ms = asyncio.run(set_round(broker.host, broker.port, args.writes))
                existing, fresh = dict_round(dicts[name], args.writes, args.new_keys)
                results[name]["set"].append(set_ms)
                results[name]["existing"].append(existing)
                results[name]["new"].append(fresh)
                line.append(f"{name}: set {set_ms:.3f} ms, existing key {existing:.3f} ms, new key {fresh:.3f} ms")
            print(f"  round {r + 1}/{args.rounds}: " + "; ".join(line), flush=True)
        for d in dicts.values():
            d.close()
    finally:
        for client in clients:
            client.close()
        for proc in emulators:
            proc.terminate()
            proc.wait(10)
        for broker in brokers.values():
            broker.stop()
    print(
        f"\nTCP_QUICKACK {'on' if quickack else 'off'}, listing={args.listing}; median of {args.rounds} rounds (each a median)\n"
    )
    print("| measure | tuned broker | untuned broker | untuned / tuned |")
    print("|---|---|---|---|")
    for what, label in (
        ("set", "client `set`"),
        ("existing", "`d[k] = v`, existing key"),
        ("new", "`d[k] = v`, new key"),
    ):
        tuned = statistics.median(results["tuned"][what])
        untuned = statistics.median(results["untuned"][what])
        print(f"| {label} | {tuned:.3f} ms | {untuned:.3f} ms | {untuned / tuned:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
