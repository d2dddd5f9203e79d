"""What K8S-SAT re-authentication costs on the request path.

Run:  python benchmarks/bench_sat.py [--rounds 5] [--requests 2000] [--ops 20000]

One private mosquitto and the emulator process; the client reaches them through the test suite's K8S-SAT
front (``tests/security/_sat_front.py``: it relays every packet, answers AUTH itself and closes the connection
at the presented token's expiry). In the same round, alternating:

(a) ``get`` through the front with an hour-long token: no re-authentication during the round;
(b) the same with 1.5-second tokens rewritten in the file every 0.5 s: a re-authentication about every 0.5 s;
(c) ``get`` straight to mosquitto, no SAT, no front: the front's own relay cost, for context.

Median latency of sequential ``get`` and throughput with 64 in flight; each figure the median over rounds,
(b)/(a) the same-run ratio. A script, not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _shared import IN_FLIGHT, in_flight_throughput, start_emulator  # noqa: E402
from security._sat_front import SatFront, make_jwt  # noqa: E402

from sskv_mapping import AsyncStateStoreClient, ConnectionSettings  # noqa: E402
from sskv_mapping.emulator.broker import MosquittoBroker  # noqa: E402


def write_token(path: Path, lifetime: float) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(make_jwt(lifetime))
    os.replace(tmp, path)


async def kubelet(path: Path, lifetime: float) -> None:
    while True:
        await asyncio.sleep(lifetime / 3)
        write_token(path, lifetime)


async def measure(client: AsyncStateStoreClient, requests: int, ops: int) -> tuple[float, float]:
    await client.set("bench-sat", b"x" * 64)
    lat = []
    for _ in range(requests):
        t0 = time.perf_counter()
        await client.get("bench-sat")
        lat.append(time.perf_counter() - t0)
    return statistics.median(lat[requests // 10 :]), await in_flight_throughput(lambda: client.get("bench-sat"), ops)


async def arm(broker: MosquittoBroker, lifetime: float | None, requests: int, ops: int) -> tuple[float, float, int]:
    """(median latency, throughput, re-authentications) for one arm; ``lifetime`` None: no SAT, no front."""
    if lifetime is None:
        async with AsyncStateStoreClient(broker.host, broker.port, timeout=10) as client:
            lat, tput = await measure(client, requests, ops)
        return lat, tput, 0
    with tempfile.TemporaryDirectory() as tmp:
        token = Path(tmp) / "token"
        write_token(token, lifetime)
        async with SatFront(broker.port, upstream_host=broker.host) as front:
            settings = ConnectionSettings(broker.host, front.port, sat_token_file=str(token))
            rotating = asyncio.ensure_future(kubelet(token, lifetime)) if lifetime < 60 else None
            try:
                async with AsyncStateStoreClient(settings=settings, timeout=10) as client:
                    lat, tput = await measure(client, requests, ops)
                    if client.reconnects or front.closed_at_expiry or front.accepted != 1:
                        raise RuntimeError(f"the client reconnected ({client.reconnects}) during the measurement")
            finally:
                if rotating is not None:
                    rotating.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await rotating
            return lat, tput, front.auths_accepted


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--ops", type=int, default=20000)
    args = ap.parse_args()
    arms = {"(a) SAT, no re-auth": 3600.0, "(b) SAT, re-auth every 0.5 s": 1.5, "(c) no SAT, no front": None}
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in arms}
    with MosquittoBroker() as broker:
        emulator = start_emulator(broker.host, broker.port)
        try:
            for r in range(args.rounds):
                order = list(arms.items())
                for name, lifetime in order if r % 2 == 0 else order[::-1]:  # no arm always runs first
                    results[name].append(await arm(broker, lifetime, args.requests, args.ops))
                    lat, tput, auths = results[name][-1]
                    print(f"round {r + 1} {name}: {lat * 1e3:.3f} ms, {tput:,.0f} ops/s, {auths} re-authentications")
        finally:
            emulator.terminate()
            emulator.wait(5)
    print()
    med = {
        name: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for name, v in results.items()
    }
    for name, (lat, tput) in med.items():
        print(f"{name:32} get {lat * 1e3:.3f} ms median, {tput:,.0f} ops/s at {IN_FLIGHT} in flight")
    (a_lat, a_tput), (b_lat, b_tput) = med["(a) SAT, no re-auth"], med["(b) SAT, re-auth every 0.5 s"]
    print(f"(b)/(a): latency x{b_lat / a_lat:.3f}, throughput x{b_tput / a_tput:.3f}")


if __name__ == "__main__":
    asyncio.run(main())
