"""Request path benchmark: raw MQTT floor vs the client + emulator, latency and throughput.

Run:  python benchmarks/bench_rpc.py [--rounds 5] [--requests 2000] [--ops 20000]
      python benchmarks/bench_rpc.py --loops            # only (h): asyncio's loop vs uvloop
      python benchmarks/bench_rpc.py --inspector [--baseline DIR] [--set]   # only (f), inspector off / idle / page open
      python benchmarks/bench_rpc.py --throughput       # only (i): the client, the raw requester, redis.asyncio

Everything runs on this machine, on loopback, against one private mosquitto started here:

(a) raw floor: a minimal MQTT 5 request/response through mosquitto, both ends written directly on asyncio
    sockets (benchmarks/_rawmqtt.py), the responder echoing;
(b) ``AsyncStateStoreClient.get`` through mosquitto and the emulator process;
(c) throughput of ``get`` with 64 requests in flight on one client;
(d) the same two numbers for redis.asyncio against a local redis-server, when both are installed;
(e) the client alone: ``get`` against a zero-cost responder (benchmarks/_zero_responder.py, raw asyncio in a
    process of its own, one fixed reply) on a second mosquitto, latency and 64-in-flight throughput;
(f) the emulator alone: GET requests from a raw requester (benchmarks/_rawmqtt.py) to the emulator process,
    latency and 64-in-flight throughput;
(g) a read of an existing key through ``AsyncStateStoreDict.get`` and ``AsyncStateStoreCache.get`` with no local
    cache (every read a round trip), against the client's ``get`` (g0) taken in turn with them, call by call;
(h) the event loop: (a), (b) and (c) again on asyncio's own loop and on uvloop (what ``uvicorn[standard]`` runs
    ASGI apps on), each on a loop of its own in a thread, a fresh client each, in alternating order within each
    round; the ratio is uvloop's against asyncio's in the same rounds (uvloop row absent when it is not installed);
(i) same-run throughput with 64 requests in flight, in turn within each round: the client against the zero-cost
    responder, the raw requester (benchmarks/_rawmqtt.py) against it, and redis.asyncio (hiredis's parser where
    installed) against a private redis-server; with the CPU each process spent per GET (this process's own clock for
    the requester, /proc for mosquitto, the responder and redis-server).

With ``--inspector`` only (f) runs, against emulator processes started three ways, each on its own mosquitto, in
turn within each round: without ``--inspect`` (off), with ``--inspect`` and no page (idle), and with a page open
(benchmarks/_inspector_page.py: the live feed connected and ``/api/state`` fetched every 250 ms, as the page does);
``--baseline DIR`` adds an emulator run from another checkout (e.g. ``git worktree add /tmp/main main``), to compare
"off" with the code before the inspector. Besides latency and throughput it reports each emulator's CPU time per
request served (from /proc): on a shared machine the wall-clock figures move with the neighbours, the CPU cost less.
``--set`` makes (f)'s requests ``SET bench <16 bytes>`` instead of ``GET bench``: the cost of a write, which the
emulator also remembers for a copy of the request (its de-duplication window).

Each figure is the median over ``--rounds`` rounds (each round's own median for latencies); ratios are
against (a) measured in the same run. This is a script, not a test: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rawmqtt import RawMqtt, user_properties
from _shared import IN_FLIGHT, in_flight_throughput, machine, start_emulator

from sskv_mapping.cache import AsyncStateStoreCache
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker, free_port
from sskv_mapping.mapping import AsyncStateStoreDict


async def raw_floor(host: str, port: int, n: int) -> float:
    echo = RawMqtt(host, port, "bench-echo")
    await echo.connect()
    await echo.subscribe("bench/req")
    echo.on_publish = lambda t, p, props: echo.publish(props[0x08], p, corr=props[0x09])
    req = RawMqtt(host, port, "bench-req")
    await req.connect()
    await req.subscribe("bench/resp")
    waiting: dict[bytes, asyncio.Future[bytes]] = {}
    req.on_publish = lambda t, p, props: waiting.pop(props[0x09]).set_result(p)
    loop = asyncio.get_running_loop()
    lat = []
    for i in range(n + n // 10):
        corr = i.to_bytes(16, "big")
        fut = loop.create_future()
        waiting[corr] = fut
        t0 = time.perf_counter()
        req.publish(b"bench/req", b"*2\r\n$3\r\nGET\r\n$5\r\nbench\r\n", b"bench/resp", corr)
        await fut
        lat.append(time.perf_counter() - t0)
    await req.close()
    await echo.close()
    return statistics.median(lat[n // 10 :])


REQUEST_TOPIC = b"statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"


async def raw_connection(host: str, port: int) -> tuple[RawMqtt, dict[bytes, asyncio.Future[bytes]], bytes, bytes]:
    """The hand-written requester's connection, subscribed to its response topic: (the connection, the futures it
    resolves by correlation data, the response topic, the user properties of a request: ``__ts`` of now...)."""
    client_id = "bench-raw-requester"
    response_topic = f"clients/{client_id}/services/statestore/_any_/command/invoke/response".encode()
    req = RawMqtt(host, port, client_id)
    await req.connect()
    await req.subscribe(response_topic.decode())
    waiting: dict[bytes, asyncio.Future[bytes]] = {}
    req.on_publish = lambda t, p, props: waiting.pop(props[0x09]).set_result(p)
    wall = time.time_ns() // 1_000_000
    user = user_properties([("__ts", f"{wall:015d}:00000:{client_id}"), ("__srcId", client_id), ("__protVer", "1.0")])
    return req, waiting, response_topic, user


async def raw_requester(host: str, port: int, n: int, ops: int, *, write: bool = False) -> tuple[float, float]:
    """(f): GET requests written by hand, sent to the emulator: (median latency, throughput with 64 in flight).
    ``write``: SET requests instead (each with its own correlation data, so none is a copy of another)."""
    req, waiting, response_topic, user = await raw_connection(host, port)
    payload = b"*2\r\n$3\r\nGET\r\n$5\r\nbench\r\n"
    if write:
        payload = b"*3\r\n$3\r\nSET\r\n$5\r\nbench\r\n$16\r\n" + b"x" * 16 + b"\r\n"
    loop = asyncio.get_running_loop()
    counter = 0
    prefix = os.urandom(8)  # correlation data unique across rounds: a request is never a copy of an earlier one

    async def one() -> bytes:
        nonlocal counter
        counter += 1
        corr = prefix + counter.to_bytes(8, "big")
        fut = loop.create_future()
        waiting[corr] = fut
        req.publish(REQUEST_TOPIC, payload, response_topic, corr, user)
        return await fut

    lat = []
    for _ in range(n + n // 10):
        t0 = time.perf_counter()
        reply = await one()
        lat.append(time.perf_counter() - t0)
    assert reply.startswith(b"+OK\r\n" if write else b"$16\r\n"), reply
    tput = await in_flight_throughput(one, ops)
    await req.close()
    return statistics.median(lat[n // 10 :]), tput


def start_zero_responder(host: str, port: int) -> subprocess.Popen[str]:
    script = Path(__file__).resolve().parent / "_zero_responder.py"
    proc = subprocess.Popen([sys.executable, str(script), host, str(port)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the zero-cost responder did not start")
    return proc


async def client_latency(client: AsyncStateStoreClient, n: int) -> float:
    lat = []
    for _ in range(n + n // 10):
        t0 = time.perf_counter()
        await client.get("bench")
        lat.append(time.perf_counter() - t0)
    return statistics.median(lat[n // 10 :])


async def interleaved_latency(reads: dict[str, Any], n: int) -> dict[str, float]:
    """Median latency of each ``await read()``, the reads taken in turn one call each, ``n`` times round.

    Interleaved call by call, so that each ratio compares calls made under the same conditions: measured as blocks
    one after the other (the dict's right after the zero-cost responder's throughput burst), the faces read 1.25x
    and 1.29x the client's ``get`` while the instruction counts gave 1.04x; taken in turn, 0.95x-1.05x."""
    lat: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(n + n // 10):
        for name, read in reads.items():
            t0 = time.perf_counter()
            await read()
            lat[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v[n // 10 :]) for name, v in lat.items()}


async def client_throughput(client: AsyncStateStoreClient, ops: int) -> float:
    return await in_flight_throughput(lambda: client.get("bench"), ops)


def loop_factories() -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """asyncio's own loop, and uvloop's where it is installed."""
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.SelectorEventLoop}
    try:
        import uvloop
    except ImportError:
        return factories
    factories["uvloop"] = uvloop.new_event_loop
    return factories


def on_loop(
    factory: Callable[[], asyncio.AbstractEventLoop], host: str, port: int, n: int, ops: int
) -> tuple[float, float, float]:
    """(a), (b) and (c) on a loop of ``factory``'s, run in the calling thread (a worker: the caller's loop waits)."""

    async def measure() -> tuple[float, float, float]:
        floor = await raw_floor(host, port, n)
        async with AsyncStateStoreClient(host, port) as client:
            return floor, await client_latency(client, n), await client_throughput(client, ops)

    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(measure())


async def loop_rounds(host: str, port: int, args: argparse.Namespace) -> dict[str, list[tuple[float, float, float]]]:
    factories = loop_factories()
    rounds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in factories}
    for r in range(args.rounds):
        order = list(factories) if r % 2 == 0 else list(reversed(factories))
        for name in order:
            rounds[name].append(await asyncio.to_thread(on_loop, factories[name], host, port, args.requests, args.ops))
        print(
            f"  loops round {r + 1}/{args.rounds}: "
            + "; ".join(
                f"{name}: floor {v[-1][0] * 1e3:.3f} ms, get {v[-1][1] * 1e3:.3f} ms, {v[-1][2]:,.0f} ops/s"
                for name, v in rounds.items()
            ),
            flush=True,
        )
    return rounds


def print_loop_rows(rounds: dict[str, list[tuple[float, float, float]]]) -> None:
    base = rounds["asyncio"]
    labels = [
        "(a) raw MQTT 5 round trip",
        "(b) client `get` round trip",
        f"(c) client `get` throughput, {IN_FLIGHT} in flight",
    ]
    for i, label in enumerate(labels):
        unit = (lambda x: f"{x:,.0f} ops/s") if i == 2 else (lambda x: f"{x * 1e3:.3f} ms")
        cells = [f"{unit(statistics.median(r[i] for r in base))} on asyncio"]
        if "uvloop" in rounds:
            uv = rounds["uvloop"]
            ratio = statistics.median(u[i] / a[i] for u, a in zip(uv, base, strict=True))
            cells.append(f"{unit(statistics.median(r[i] for r in uv))} on uvloop ({ratio:.2f}x asyncio's)")
        else:
            cells.append("uvloop not installed")
        print(f"| (h) {label} | {' | '.join(cells)} |")


async def redis_numbers(n: int, ops: int) -> tuple[float, float] | None:
    exe = shutil.which("redis-server")
    try:
        import redis.asyncio as aredis
    except ImportError:
        return None
    if exe is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        r = aredis.Redis(host="127.0.0.1", port=port, max_connections=IN_FLIGHT)
        for _ in range(200):
            try:
                await r.ping()
                break
            except Exception:
                await asyncio.sleep(0.05)
        await r.set("bench", b"x" * 16)
        lat = []
        for _ in range(n + n // 10):
            t0 = time.perf_counter()
            await r.get("bench")
            lat.append(time.perf_counter() - t0)
        tput = await in_flight_throughput(lambda: r.get("bench"), ops)
        await r.aclose()
        return statistics.median(lat[n // 10 :]), tput
    finally:
        proc.terminate()
        proc.wait(5)


def start_page(url: str) -> subprocess.Popen[str]:
    script = Path(__file__).resolve().parent / "_inspector_page.py"
    proc = subprocess.Popen([sys.executable, str(script), url], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the inspector page client did not connect")
    return proc


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): the cost to it, whatever its neighbours do."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def inspector_main(args: argparse.Namespace) -> None:
    """(f) with the inspector off, idle and with a page open (and a baseline tree's emulator), in the same run."""
    modes: list[tuple[str, tuple[str, ...], Path | None]] = []
    if args.baseline is not None:
        modes.append(("baseline (--baseline tree), no inspector", (), args.baseline.resolve()))
    modes.append(("inspector off (no --inspect)", (), None))
    if not args.versus:
        modes += [
            ("--inspect, no page open", ("--inspect", "0"), None),
            ("--inspect, a page open (feed + /api/state every 250 ms)", ("--inspect", "0"), None),
        ]
    brokers = [MosquittoBroker().start() for _ in modes]
    procs: list[subprocess.Popen[str]] = []
    try:
        for (_, extra, tree), broker in zip(modes, brokers, strict=True):
            procs.append(start_emulator(broker.host, broker.port, *extra, tree=tree))
        if not args.versus:
            procs.append(start_page(procs[-1].inspector_url))  # type: ignore[attr-defined]
        for broker in brokers:
            async with AsyncStateStoreClient(broker.host, broker.port) as c:
                await c.set("bench", b"x" * 16)
        lat: list[list[float]] = [[] for _ in modes]
        tput: list[list[float]] = [[] for _ in modes]
        cpu: list[list[float]] = [[] for _ in modes]
        served = args.requests + args.requests // 10 + args.ops // IN_FLIGHT * IN_FLIGHT
        for r in range(args.rounds):
            order = list(range(len(modes)))
            order = order[r % len(order) :] + order[: r % len(order)]  # each mode takes each turn
            for i in order:
                before = cpu_seconds(procs[i].pid)
                e_lat, e_tput = await raw_requester(
                    brokers[i].host, brokers[i].port, args.requests, args.ops, write=args.set
                )
                cpu[i].append((cpu_seconds(procs[i].pid) - before) / served)
                lat[i].append(e_lat)
                tput[i].append(e_tput)
            print(
                f"  round {r + 1}/{args.rounds}: "
                + "; ".join(
                    f"{m[0][:24]} {lat[i][-1] * 1e3:.3f} ms, {tput[i][-1]:,.0f} ops/s, {cpu[i][-1] * 1e6:.1f} us CPU"
                    for i, m in enumerate(modes)
                ),
                flush=True,
            )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        for broker in brokers:
            broker.stop()
    off = 1 if args.baseline is not None else 0
    ml, mt, mc = statistics.median(lat[off]), statistics.median(tput[off]), statistics.median(cpu[off])
    print()
    print(
        f"| (f) emulator, raw requester, median of {args.rounds} rounds | {'SET' if args.set else 'GET'} round trip "
        f"| vs off | {IN_FLIGHT} in flight "
        "| vs off | emulator CPU per request | vs off |"
    )
    print("|---|---|---|---|---|---|---|")
    for i, (name, _, _) in enumerate(modes):
        li, ti, ci = statistics.median(lat[i]), statistics.median(tput[i]), statistics.median(cpu[i])
        print(
            f"| {name} | {li * 1e3:.3f} ms | {li / ml:.2f}x | {ti:,.0f} ops/s | {ti / mt:.2f}x | {ci * 1e6:.1f} us | {ci / mc:.2f}x |"
        )
    if args.versus:
        return
    page_l, page_t = statistics.median(lat[-1]) / ml, statistics.median(tput[-1]) / mt
    page_c = statistics.median(cpu[-1]) / mc
    print()
    print(
        f"target: a page open within 10 % (latency {page_l:.2f}x, throughput {page_t:.2f}x, CPU {page_c:.2f}x): "
        f"{'met' if page_l <= 1.1 and page_t >= 1 / 1.1 and page_c <= 1.1 else 'NOT met'}"
    )


class _Cpu:
    """CPU seconds per request of this process and of some others, over one measured stretch."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.mine = time.process_time()
        self.theirs = [cpu_seconds(pid) for pid in pids]

    def per_request(self, n: int) -> tuple[float, float, float]:
        """This process's CPU per request, the others' together, and the first other's alone (the broker's)."""
        mine = (time.process_time() - self.mine) / n
        each = [(cpu_seconds(pid) - before) / n for pid, before in zip(self.pids, self.theirs, strict=True)]
        return mine, sum(each), each[0]


async def raw_throughput(host: str, port: int, ops: int, others: list[int]) -> tuple[float, float, float, float]:
    """(i): the raw requester's GETs to the zero-cost responder, 64 in flight: (ops/s, own CPU, servers' CPU, the
    broker's CPU)."""
    req, waiting, response_topic, user = await raw_connection(host, port)
    payload = b"*2\r\n$3\r\nGET\r\n$5\r\nbench\r\n"
    loop = asyncio.get_running_loop()
    counter = iter(range(1, 10**9))

    async def worker(n: int) -> None:
        for _ in range(n):
            corr = next(counter).to_bytes(16, "big")
            fut = loop.create_future()
            waiting[corr] = fut
            req.publish(REQUEST_TOPIC, payload, response_topic, corr, user)
            await fut

    await asyncio.gather(*(worker(10) for _ in range(IN_FLIGHT)))
    per_worker = ops // IN_FLIGHT
    cpu = _Cpu(others)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(per_worker) for _ in range(IN_FLIGHT)))
    elapsed = time.perf_counter() - t0
    await req.close()
    n = per_worker * IN_FLIGHT
    return (n / elapsed, *cpu.per_request(n))


async def get_throughput(get: Callable[[], Any], ops: int, others: list[int]) -> tuple[float, float, float, float]:
    """(i): ``await get()`` 64 at a time: (ops/s, this process's CPU per GET, the servers' CPU per GET, the first
    server's (the broker's) alone)."""
    per_worker = ops // IN_FLIGHT

    async def worker(n: int) -> None:
        for _ in range(n):
            await get()

    await asyncio.gather(*(worker(10) for _ in range(IN_FLIGHT)))
    cpu = _Cpu(others)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(per_worker) for _ in range(IN_FLIGHT)))
    elapsed = time.perf_counter() - t0
    n = per_worker * IN_FLIGHT
    return (n / elapsed, *cpu.per_request(n))


async def throughput_table(args: argparse.Namespace) -> None:
    """(i): the client, the raw requester and redis.asyncio, 64 in flight, in turn within each round."""
    exe = shutil.which("redis-server")
    try:
        import redis.asyncio as aredis
    except ImportError:
        aredis = None
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(MosquittoBroker())
        zero = start_zero_responder(broker.host, broker.port)
        stack.callback(zero.wait, 10)
        stack.callback(zero.kill)
        mqtt_pids = [broker.pid, zero.pid]
        assert None not in mqtt_pids
        rows: dict[str, list[tuple[float, float, float, float]]] = {"client": [], "raw": []}
        redis_pid: int | None = None
        r = None
        if exe is None or aredis is None:
            why = "redis-server (`apt-get install redis-server`)" if exe is None else "`pip install 'redis[hiredis]'`"
            print(f"(i) redis.asyncio not measured: needs {why}")
        else:
            port = free_port()
            proc = subprocess.Popen(
                [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            stack.callback(proc.wait, 10)
            stack.callback(proc.terminate)
            redis_pid = proc.pid
            rows["redis"] = []
            r = aredis.Redis(host="127.0.0.1", port=port, max_connections=IN_FLIGHT)
            for _ in range(200):
                try:
                    await r.ping()
                    break
                except Exception:
                    await asyncio.sleep(0.05)
            await r.set("bench", b"x" * 16)
        async with AsyncStateStoreClient(broker.host, broker.port) as client:
            for n in range(args.rounds):
                order = list(rows)
                order = order[n % len(order) :] + order[: n % len(order)]
                for name in order:
                    if name == "client":
                        rows[name].append(await get_throughput(lambda: client.get("bench"), args.ops, mqtt_pids))  # type: ignore[arg-type]
                    elif name == "raw":
                        rows[name].append(await raw_throughput(broker.host, broker.port, args.ops, mqtt_pids))  # type: ignore[arg-type]
                    else:
                        assert r is not None and redis_pid is not None
                        rows[name].append(await get_throughput(lambda: r.get("bench"), args.ops, [redis_pid]))
                print(
                    f"  (i) round {n + 1}/{args.rounds}: "
                    + "; ".join(f"{k} {v[-1][0]:,.0f} GET/s, {v[-1][1] * 1e6:.0f} us CPU" for k, v in rows.items()),
                    flush=True,
                )
        if r is not None:
            await r.aclose()
    med = {k: tuple(statistics.median(x[i] for x in v) for i in range(4)) for k, v in rows.items()}
    labels = {
        "client": "`AsyncStateStoreClient.get`, zero-cost responder",
        "raw": "raw requester (benchmarks/_rawmqtt.py), zero-cost responder",
        "redis": "redis.asyncio + hiredis `get`, redis-server",
    }
    print()
    print(
        f"| (i) {IN_FLIGHT} in flight, median of {args.rounds} rounds | GET/s | vs redis.asyncio | requester CPU per GET "
        "| vs raw | server side CPU per GET (mosquitto + responder, or redis-server) | of which mosquitto |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (tput, mine, theirs, mosq) in med.items():
        vs_redis = f"{tput / med['redis'][0]:.2f}x" if "redis" in med else ""
        print(
            f"| {labels[name]} | {tput:,.0f} | {vs_redis} | {mine * 1e6:.1f} us | {mine / med['raw'][1]:.2f}x "
            f"| {theirs * 1e6:.1f} us | {'' if name == 'redis' else f'{mosq * 1e6:.1f} us'} |"
        )
    if "redis" in med:
        ratio = med["client"][0] / med["redis"][0]
        # what the CPU figures allow, whatever the neighbours took: each process is one thread (at most one core) and
        # together they share the machine's cores; the client's ceiling counts no responder at all
        cores = os.cpu_count() or 1
        mine, mosq = med["client"][1], med["client"][3]
        ours = min(1 / mine, 1 / mosq, cores / (mine + mosq))
        theirs = min(1 / med["redis"][1], 1 / med["redis"][2], cores / (med["redis"][1] + med["redis"][2]))
        print(
            f"\nceilings from the CPU per GET on {cores} cores: the client with mosquitto and a responder that costs "
            f"nothing {ours:,.0f} GET/s, redis.asyncio with redis-server {theirs:,.0f}: {ours / theirs:.2f}x"
        )
        print(
            f"\ntarget: client throughput >= 1.5x redis.asyncio's: {ratio:.2f}x, {'met' if ratio >= 1.5 else 'NOT met'}"
        )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000, help="sequential requests per latency round")
    ap.add_argument("--ops", type=int, default=20000, help="requests per throughput round")
    ap.add_argument("--inspector", action="store_true", help="only (f): inspector off, idle, and with a page open")
    ap.add_argument("--baseline", type=Path, help="with --inspector: also an emulator run from this source tree")
    ap.add_argument("--set", action="store_true", help="with --inspector: (f) sends SET requests instead of GET")
    ap.add_argument(
        "--versus",
        type=Path,
        metavar="DIR",
        help="only (f): this tree's emulator against DIR's (e.g. a worktree of main), in turn within each round",
    )
    ap.add_argument("--loops", action="store_true", help="only (h): asyncio's loop vs uvloop")
    ap.add_argument("--throughput", action="store_true", help="only (i): the client, raw requester and redis.asyncio")
    args = ap.parse_args()
    print(f"machine: {machine()}", flush=True)
    if args.versus:
        args.baseline = args.versus
    if args.inspector or args.versus:
        await inspector_main(args)
        return
    if args.throughput:
        await throughput_table(args)
        return
    if args.loops:
        with MosquittoBroker() as broker:
            emulator = start_emulator(broker.host, broker.port)
            try:
                rounds = await loop_rounds(broker.host, broker.port, args)
            finally:
                emulator.terminate()
                emulator.wait(10)
        print()
        print(f"| measure (median of {args.rounds} rounds) | asyncio's loop | uvloop |")
        print("|---|---|---|")
        print_loop_rows(rounds)
        return
    with MosquittoBroker() as broker, MosquittoBroker() as zero_broker:
        emulator = start_emulator(broker.host, broker.port)
        zero = start_zero_responder(zero_broker.host, zero_broker.port)
        try:
            async with (
                AsyncStateStoreClient(broker.host, broker.port) as client,
                AsyncStateStoreClient(zero_broker.host, zero_broker.port) as alone,
            ):
                await client.set("bench", b"x" * 16)
                bench_dict = AsyncStateStoreDict(client, namespace="bench-dict", local_cache_size=0)
                bench_cache = AsyncStateStoreCache(client, namespace="bench-cache", default_ttl=None)
                await bench_dict.set("k", "v" * 16)
                await bench_cache.set("k", "v" * 16)
                assert await bench_dict.get("k") == await bench_cache.get("k") == "v" * 16
                floor, lat, tput, zlat, ztput, elat, etput, dlat, clat, glat = [], [], [], [], [], [], [], [], [], []
                for r in range(args.rounds):
                    floor.append(await raw_floor(broker.host, broker.port, args.requests))
                    lat.append(await client_latency(client, args.requests))
                    tput.append(await client_throughput(client, args.ops))
                    zlat.append(await client_latency(alone, args.requests))
                    ztput.append(await client_throughput(alone, args.ops))
                    turns = await interleaved_latency(
                        {
                            "client": lambda: client.get("bench"),
                            "dict": lambda: bench_dict.get("k"),
                            "cache": lambda: bench_cache.get("k"),
                        },
                        args.requests,
                    )
                    glat.append(turns["client"])
                    dlat.append(turns["dict"])
                    clat.append(turns["cache"])
                    e_lat, e_tput = await raw_requester(broker.host, broker.port, args.requests, args.ops)
                    elat.append(e_lat)
                    etput.append(e_tput)
                    print(
                        f"  round {r + 1}/{args.rounds}: floor {floor[-1] * 1e3:.3f} ms, "
                        f"get {lat[-1] * 1e3:.3f} ms, {tput[-1]:,.0f} ops/s; dict get {dlat[-1] * 1e3:.3f} ms, "
                        f"cache get {clat[-1] * 1e3:.3f} ms; "
                        f"zero-cost responder {zlat[-1] * 1e3:.3f} ms, {ztput[-1]:,.0f} ops/s; "
                        f"raw requester to emulator {elat[-1] * 1e3:.3f} ms, {etput[-1]:,.0f} ops/s",
                        flush=True,
                    )
            loops = await loop_rounds(broker.host, broker.port, args)
        finally:
            emulator.terminate()
            emulator.wait(10)
            zero.kill()
            zero.wait(10)
    redis_rounds = []
    for _ in range(args.rounds):
        numbers = await redis_numbers(args.requests, args.ops)
        if numbers is None:
            break
        redis_rounds.append(numbers)
    a, b, c = statistics.median(floor), statistics.median(lat), statistics.median(tput)
    print()
    print(f"| measure (median of {args.rounds} rounds) | value | ratio |")
    print("|---|---|---|")
    print(f"| (a) raw MQTT 5 round trip through mosquitto | {a * 1e3:.3f} ms | 1.00x |")
    print(f"| (b) client `get` through mosquitto + emulator | {b * 1e3:.3f} ms | {b / a:.2f}x (a) |")
    print(f"| (c) client `get` throughput, {IN_FLIGHT} in flight | {c:,.0f} ops/s | |")
    z, zt = statistics.median(zlat), statistics.median(ztput)
    e, et = statistics.median(elat), statistics.median(etput)
    print(f"| (e) client `get` against a zero-cost responder | {z * 1e3:.3f} ms | {z / a:.2f}x (a) |")
    print(f"| (e) client `get` throughput against it, {IN_FLIGHT} in flight | {zt:,.0f} ops/s | |")
    print(f"| (f) emulator, raw requester: GET round trip | {e * 1e3:.3f} ms | {e / a:.2f}x (a) |")
    print(f"| (f) emulator throughput, raw requester, {IN_FLIGHT} in flight | {et:,.0f} ops/s | |")
    dr = statistics.median(d / g for d, g in zip(dlat, glat, strict=True))
    cr = statistics.median(c_ / g for c_, g in zip(clat, glat, strict=True))
    print(f"| (g) client `get`, taken in turn with the two below | {statistics.median(glat) * 1e3:.3f} ms | (g0) |")
    print(
        f"| (g) `AsyncStateStoreDict.get`, no local cache | {statistics.median(dlat) * 1e3:.3f} ms | {dr:.2f}x (g0) |"
    )
    print(
        f"| (g) `AsyncStateStoreCache.get`, no local cache | {statistics.median(clat) * 1e3:.3f} ms | {cr:.2f}x (g0) |"
    )
    if redis_rounds:
        rl = statistics.median(x[0] for x in redis_rounds)
        rt = statistics.median(x[1] for x in redis_rounds)
        print(f"| (d) redis.asyncio `get` round trip | {rl * 1e3:.3f} ms | {rl / a:.2f}x (a) |")
        print(f"| (d) redis.asyncio throughput, {IN_FLIGHT} in flight | {rt:,.0f} ops/s | (c) is {c / rt:.2f}x |")
    else:
        print("| (d) redis | not measured (needs redis-server and the redis package) | |")
    print()
    print(f"| the event loop (median of {args.rounds} rounds) | asyncio's loop | uvloop |")
    print("|---|---|---|")
    print_loop_rows(loops)
    print()
    print()
    await throughput_table(args)
    print()
    print(
        f"targets: (b) <= 1.3x (a): {'met' if b <= 1.3 * a else 'NOT met'}; (e) <= 1.2x (a): "
        f"{'met' if z <= 1.2 * a else 'NOT met'}; (c) >= 10,000 ops/s: {'met' if c >= 10_000 else 'NOT met'}; "
        f"(g) <= 1.1x (g0): {'met' if max(dr, cr) <= 1.1 else 'NOT met'}"
    )


if __name__ == "__main__":
    asyncio.run(main())
