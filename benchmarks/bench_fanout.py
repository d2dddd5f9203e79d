"""Notification fan-out in the emulator: the cost of one write of a key with 1, 100 and 10,000 watchers.

Run:  python benchmarks/bench_fanout.py [--rounds 5] [--writes 50] [--watchers 1,100,10000] [--tree DIR]

One private mosquitto and one emulator process. N watchers of one key are registered by a raw MQTT requester
(benchmarks/_rawmqtt.py) with N distinct ``__srcId`` (the emulator trusts it, docs/emulator.md), so the
notifications go to topics nobody subscribes to: mosquitto drops each at once and what is measured is the
emulator's own work per write (building and queueing N notifications) and the broker's taking them. A library
client then writes the key ``--writes`` times, each write once the previous one's fan-out is done: when a library
watcher registered after the others (so notified last of each change) hears of it (a SET is answered before its
notifications go out). Meanwhile another client reads another key in a loop: its worst GET latency is how long a fan-out
holds everyone else up. Reported per write: the wall time (median over rounds of each
round's mean) and the emulator's CPU time (from /proc), and the ratio to the 1-watcher figure of the same run.
``--tree DIR`` runs the emulator from another checkout (e.g. ``git worktree add /tmp/main main``), for before/after.
This is a script, not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rawmqtt import RawMqtt, user_properties
from _shared import start_emulator

from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping._protocol.topics import REQUEST_TOPIC
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import EMULATOR_QUEUE_SETTINGS, MosquittoBroker


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def register(host: str, port: int, key: bytes, ids: list[str]) -> None:
    """KEYNOTIFY ``key`` for each id in ``ids`` (one raw connection, ``__srcId`` set per request)."""
    raw = RawMqtt(host, port, f"fanout-reg-{uuid.uuid4().hex[:8]}")
    await raw.connect()
    response = f"clients/{raw.client_id}/resp"
    await raw.subscribe(response)
    left = len(ids)
    done = asyncio.get_running_loop().create_future()

    def answered(topic: bytes, payload: bytes, props: dict[int, bytes]) -> None:
        nonlocal left
        assert payload == b"+OK\r\n", payload
        left -= 1
        if left == 0 and not done.done():
            done.set_result(None)

    raw.on_publish = answered
    body = encode_request(b"KEYNOTIFY", key)
    ts = f"{int(time.time() * 1000)}:0:reg"
    for n, client_id in enumerate(ids):
        user = user_properties([("__srcId", client_id), ("__ts", ts), ("__protVer", "1.0")])
        raw.publish(REQUEST_TOPIC.encode(), body, response.encode(), n.to_bytes(8, "big"), user)
        if n % 500 == 499:
            await raw.writer.drain()
    await asyncio.wait_for(done, 120)
    raw.writer.close()


async def one_round(
    host: str, port: int, pid: int, broker_pid: int, watchers: int, writes: int, key_bytes: int
) -> tuple[float, float, float, float]:
    """Per write: wall time, the emulator's and the broker's CPU time; and the worst GET latency of another client
    meanwhile."""
    key = (f"fanout-{uuid.uuid4().hex[:8]}-".encode() + b"k" * key_bytes)[: max(key_bytes, 16)]
    await register(host, port, key, [f"watcher-{i:05d}-{uuid.uuid4().hex[:6]}" for i in range(watchers)])
    async with (
        AsyncStateStoreClient(host, port, timeout=60) as client,
        AsyncStateStoreClient(host, port, timeout=60) as reader,
    ):
        watch = await reader.watch(key).start()  # the last registration: its notification is the last of each
        await client.set(key, b"warm-up")
        while (await watch.next(120)).value != b"warm-up":
            pass
        other = f"other-{uuid.uuid4().hex[:8]}"
        await reader.set(other, b"x")
        worst = 0.0
        writing = True

        async def read_meanwhile() -> None:
            nonlocal worst
            while writing:
                t = time.perf_counter()
                await reader.get(other)
                worst = max(worst, time.perf_counter() - t)

        cpu0, bcpu0, t0 = cpu_seconds(pid), cpu_seconds(broker_pid), time.perf_counter()
        task = asyncio.create_task(read_meanwhile())
        for i in range(writes):
            await client.set(key, b"value-%d" % i)
            # this write's fan-out is done when the last watcher (registered after the others) hears of it
            while (await watch.next(120)).value != b"value-%d" % i:
                pass
        wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
        bcpu = cpu_seconds(broker_pid) - bcpu0
        writing = False
        await task
        await watch.aclose()
    return wall / writes, cpu / writes, bcpu / writes, worst


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writes", type=int, default=50)
    parser.add_argument("--watchers", default="1,100,10000")
    parser.add_argument("--key-bytes", type=int, default=16, help="the watched key's length")
    parser.add_argument("--tree", type=Path, default=None, help="run the emulator from this checkout")
    args = parser.parse_args()
    counts = [int(n) for n in args.watchers.split(",")]
    with MosquittoBroker(extra_config=list(EMULATOR_QUEUE_SETTINGS)) as broker:  # as --with-broker
        proc = start_emulator(broker.host, broker.port, tree=args.tree)
        broker_pid = broker.pid
        assert broker_pid is not None
        try:
            results: dict[int, tuple[list[float], ...]] = {n: ([], [], [], []) for n in counts}
            for _ in range(args.rounds):
                for n in counts:
                    measured = await one_round(
                        broker.host, broker.port, proc.pid, broker_pid, n, args.writes, args.key_bytes
                    )
                    for into, value in zip(results[n], measured, strict=True):
                        into.append(value)
        finally:
            proc.terminate()
            proc.wait(5)
    base_wall = statistics.median(results[counts[0]][0])
    base_cpu = statistics.median(results[counts[0]][1])
    print(f"emulator from {args.tree or 'this checkout'}; {args.rounds} rounds of {args.writes} writes")
    print(
        f"{'watchers':>9} {'wall/write':>12} {'ratio':>7} {'emu CPU/write':>14} {'ratio':>7} {'CPU/notification':>17}"
    )
    for n in counts:
        wall, cpu, bcpu, worst = (statistics.median(r) for r in results[n])
        print(
            f"{n:>9,} {wall * 1e3:>10.3f}ms {wall / base_wall:>6.1f}x {cpu * 1e3:>12.3f}ms {cpu / base_cpu if base_cpu else float('nan'):>6.1f}x "
            f"{cpu / n * 1e6:>14.2f}us {bcpu * 1e3:>15.3f}ms {worst * 1e3:>14.1f}ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
