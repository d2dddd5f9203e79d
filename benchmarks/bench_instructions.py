"""Instructions per operation, counted: a cost measure that the machine's load cannot move.

Run:  python benchmarks/bench_instructions.py [--only NAME ...] [--small 100] [--large 600] [--tool callgrind]
      python benchmarks/bench_instructions.py --list

Each measure runs in a child process of its own (this script with ``--child NAME``) under valgrind's callgrind
(or ``perf stat -e instructions:u`` with ``--tool perf``, where the kernel allows it), twice: once doing the
operation ``--small`` times and once ``--large`` times, after the same set-up and warm-up. The difference of the two
totals divided by ``large - small`` is the cost of one operation: the interpreter's start-up, the imports and the
set-up are the same in both runs and cancel out. Everything runs in one process over the in-process store
(:class:`~sskv_mapping.testing.InProcessStore` on the running loop: the real client, emulator server and core on
the loopback broker, no sockets), so a round trip's figure is the client's work plus the emulator's, with no broker.

The counts are exact for a given interpreter and build and repeat to within a fraction of a percent (hash seeds
are fixed); wall-clock time on a shared machine moves by tens of percent. They are the measure to quote for "did
this change make the path cheaper"; latency over a real broker still needs ``bench_rpc.py``'s same-run ratios.

The ``socket-*`` measures count one process only, the requester's, over real loopback sockets: a private mosquitto
and the zero-cost responder (benchmarks/_zero_responder.py), both started here and run natively, serve the
requests; the child under callgrind is the client, the raw requester (benchmarks/_rawmqtt.py, the floor
``bench_rpc`` uses) or redis.asyncio (with hiredis where installed) against a private redis-server, one request in
flight (``-1``) or 64 (``-64``). They run ``--socket-small`` and ``--socket-large`` requests (200 and 1,200).

Without valgrind (and without ``--tool perf``) the script says so and exits 0 having measured nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

ROOT = Path(os.environ.get("SSKV_BENCH_TREE") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(ROOT))

Op = Callable[[], Awaitable[object]]
_HERE = str(Path(__file__).resolve().parent)

#: name -> what it measures (the order of the table)
MEASURES: dict[str, str] = {
    "client-get": "client `get` of an existing key, round trip over the in-process loopback",
    "client-set": "client `set` of an existing key, round trip over the in-process loopback",
    "dict-hit": "`AsyncStateStoreDict.get`, local cache hit",
    "dict-get-nocache": "`AsyncStateStoreDict.get`, no local cache (a round trip)",
    "dict-miss": "`AsyncStateStoreDict.get` of a key not cached yet (GET + the key's watch)",
    "dict-set-new": "`AsyncStateStoreDict.set` of a new key, SCAN listing",
    "dict-set-kept": "`AsyncStateStoreDict.set` of a key this process read (watched: the write is kept locally)",
    "cache-hit": "`AsyncStateStoreCache.get`, local cache hit",
    "cache-get-nocache": "`AsyncStateStoreCache.get`, no local cache (a round trip)",
    "cache-miss-nocache": "`AsyncStateStoreCache.get` of an absent key, no local cache (a round trip)",
    "core-get": "`EmulatorCore.handle` of a GET (parse, look up, encode the reply)",
    "core-set": "`EmulatorCore.handle` of a SET (parse, HLC merge and tick, store, encode)",
    "server-get": "the emulator server's request path for a GET (properties, core, reply headers, publish)",
    "server-set": "the emulator server's request path for a SET",
    "emulator-get": "the emulator's whole CPU for a GET as served over MQTT: the PUBLISH read from its socket "
    "(split, decoded), served, the reply encoded and written, the reply's PUBACK read",
    "emulator-set": "the emulator's whole CPU for a SET as served over MQTT (as emulator-get)",
}
#: the client-process-only measures over real sockets: socket-<requester>-<verb>-<in flight> -> what it measures
SOCKET_MEASURES: dict[str, str] = {
    f"socket-{who}-{verb}-{n}": f"{what} {verb.upper()}, {n} in flight, the requester's process only, over real sockets"
    for who, what in (
        ("client", "`AsyncStateStoreClient`"),
        ("raw", "the raw requester (benchmarks/_rawmqtt.py)"),
        ("redis", "redis.asyncio against redis-server"),
    )
    for verb in ("get", "set")
    for n in (1, 64)
}
MEASURES.update(SOCKET_MEASURES)
SOCKET_IN_FLIGHT = 64

WARM_UP = 50
#: the client id of every measure's client (see _setup)
BENCH_CLIENT_ID = "sskv-bench-client"
#: the operations of this child's run (emulator-* build their requests beforehand)
_RUN_OPS = [0]


async def _setup(name: str, stack: AsyncExitStack) -> Op:
    """Build what ``name`` needs on a fresh in-process store and return the operation to repeat."""
    from sskv_mapping._protocol.hlc import HybridLogicalClock, system_clock_ms
    from sskv_mapping._protocol.mqtt_publish import InboundMessage
    from sskv_mapping.cache import AsyncStateStoreCache
    from sskv_mapping.mapping import AsyncStateStoreDict
    from sskv_mapping.testing import InProcessStore

    store = await stack.enter_async_context(InProcessStore())
    # a fixed client id: the loopback's topic-filter order (and so the count) depends on it; random, the counts
    # moved by +-15k instructions from one run to the next
    client = await stack.enter_async_context(store.async_client(client_id=BENCH_CLIENT_ID))
    await client.set("bench", b"x" * 16)

    if name == "client-get":
        return lambda: client.get("bench")
    if name == "client-set":
        return lambda: client.set("bench", b"y" * 16)
    if name.startswith("dict-"):
        size = 0 if name == "dict-get-nocache" else 10_000
        # max_staleness=None: no revalidator, whose background re-reads follow the wall clock (valgrind's slowness
        # and the machine's load), not the operation
        d: AsyncStateStoreDict[str] = AsyncStateStoreDict(
            client, namespace="bench-dict", local_cache_size=size, max_staleness=None
        )
        stack.push_async_callback(d.close)
        await d.set("k", "v" * 16)
        if name in ("dict-hit", "dict-get-nocache"):
            return lambda: d.get("k")
        if name == "dict-set-kept":
            await d.get("k")  # read: watched, so each write is kept in the local cache
            return lambda: d.set("k", "w" * 16)
        counter = iter(range(10**9))
        if name == "dict-miss":
            return lambda: d.get(f"absent-{next(counter)}")
        return lambda: d.set(f"new-{next(counter)}", "v" * 16)
    if name.startswith("cache-"):
        size = 0 if name.endswith("nocache") else 10_000
        c: AsyncStateStoreCache[str] = AsyncStateStoreCache(
            client, namespace="bench-cache", default_ttl=None, local_cache_size=size, max_staleness=None
        )
        stack.push_async_callback(c.close)
        await c.set("k", "v" * 16)
        if name == "cache-miss-nocache":
            return lambda: c.get("absent")
        return lambda: c.get("k")

    from sskv_mapping._protocol import headers
    from sskv_mapping._protocol.commands import Get, Set

    if name.startswith("emulator-"):
        return _emulator_op(Get(b"bench").encode() if name == "emulator-get" else Set(b"bench", b"z" * 16).encode())

    get_payload = Get(b"bench").encode()
    set_payload = Set(b"bench", b"z" * 16, None, None).encode()

    # one request timestamp for the whole run (an older one is merged without effect): what the requester does to
    # make a fresh one is not the emulator's work
    props = {headers.TIMESTAMP: str(HybridLogicalClock(system_clock_ms(), 0, "bench-requester"))}

    if name in ("core-get", "core-set"):
        core = store.core
        payload = get_payload if name == "core-get" else set_payload

        async def core_op() -> object:
            return core.handle("bench-requester", payload, props)

        return core_op

    server = store.server
    payload = get_payload if name == "server-get" else set_payload

    user_properties = tuple(props.items())
    # fresh correlation data per request, as a client's: with the same each time, every SET after the first was a
    # copy of it (answered from the de-duplication window, the store untouched) and server-set measured that path
    sequence = iter(range(10**9))

    async def server_op() -> object:
        message = InboundMessage(
            topic="statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke",
            payload=payload,
            qos=1,
            correlation_data=next(sequence).to_bytes(16, "big"),
            response_topic="clients/bench-requester/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response",
            user_properties=user_properties,
            content_type=None,
        )
        server._handle_request(message)
        return None

    return server_op


class _SocketSide:
    """What the emulator's connection writes to: the asyncio transport's methods it calls, writes discarded."""

    def write(self, data: bytes) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return False


def _emulator_op(payload: bytes) -> Op:
    """An emulator server on a real ``StreamConnection`` whose socket is :class:`_SocketSide`: each operation feeds
    it what the broker would deliver (the previous reply's PUBACK and a client's request PUBLISH, in one read), so
    the count is everything the emulator process does for a request except the kernel's read and write."""
    from sskv_mapping._protocol import headers
    from sskv_mapping._protocol import mqtt_packets as packets
    from sskv_mapping._protocol.commands import Set
    from sskv_mapping._protocol.hlc import HybridLogicalClock, system_clock_ms
    from sskv_mapping._protocol.mqtt_publish import mqtt_str, publish_properties
    from sskv_mapping._protocol.topics import REQUEST_TOPIC, response_topic
    from sskv_mapping._transport.settings import ConnectionSettings
    from sskv_mapping._transport.stream import StreamConnection
    from sskv_mapping.emulator.core import EmulatorCore
    from sskv_mapping.emulator.server import EmulatorServer

    loop = asyncio.get_running_loop()
    settings = ConnectionSettings("127.0.0.1", 1883, client_id="sskv-emulator")
    server = EmulatorServer(settings, EmulatorCore())
    conn = StreamConnection(settings, server._on_message)
    conn.connection_made(_SocketSide())  # type: ignore[arg-type]
    conn._output.loop = loop  # connected as connect() leaves it, without a broker
    conn._closed = loop.create_future()
    server._conn = conn
    requester = "bench-requester"
    topic, reply_to = mqtt_str(REQUEST_TOPIC), response_topic(requester)
    start = system_clock_ms()

    def request(body: bytes, n: int) -> bytes:
        # what a client sends: its next __ts and fresh correlation data each time, its own properties in its order
        props = publish_properties(
            n.to_bytes(16, "big"),
            reply_to,
            headers.request_properties(requester, HybridLogicalClock(start, n, requester)),
            None,
            10,
        )
        return packets.publish_packet(topic, body, 1, n % 65_535 + 1, props)

    conn.data_received(request(Set(b"bench", b"x" * 16).encode(), 0))
    # built beforehand: making the requests is the client's work, not the emulator's; each read carries the
    # previous reply's PUBACK (the emulator's reply ids count from 1) and the next request
    reads = iter([packets.puback_packet(n % 65_535) + request(payload, n) for n in range(1, WARM_UP + _RUN_OPS[0] + 1)])

    async def op() -> object:
        conn.data_received(next(reads))
        return None

    return op


async def _socket_setup(name: str, stack: AsyncExitStack) -> Op:
    """The requester ``name`` names, connected to the servers the parent started (``SSKV_BENCH_MQTT``,
    ``SSKV_BENCH_REDIS``), and one request of its verb."""
    _, who, verb, _ = name.split("-")
    if who == "redis":
        import redis.asyncio as aredis

        r = aredis.Redis(host="127.0.0.1", port=int(os.environ["SSKV_BENCH_REDIS"]), max_connections=SOCKET_IN_FLIGHT)
        stack.push_async_callback(r.aclose)
        await r.set("bench", b"x" * 16)
        if verb == "get":
            return lambda: r.get("bench")
        return lambda: r.set("bench", b"y" * 16)
    host, port = os.environ["SSKV_BENCH_MQTT"].rsplit(":", 1)
    if who == "client":
        from sskv_mapping.client import AsyncStateStoreClient

        client = await stack.enter_async_context(AsyncStateStoreClient(host, int(port), client_id=BENCH_CLIENT_ID))
        if verb == "get":
            return lambda: client.get("bench")
        return lambda: client.set("bench", b"y" * 16)
    sys.path.insert(0, _HERE)
    from _rawmqtt import RawMqtt, user_properties

    client_id = "bench-raw-requester"
    response_topic = f"clients/{client_id}/services/statestore/_any_/command/invoke/response".encode()
    req = RawMqtt(host, int(port), client_id)
    await req.connect()
    stack.push_async_callback(req.close)
    await req.subscribe(response_topic.decode())
    waiting: dict[bytes, asyncio.Future[bytes]] = {}
    req.on_publish = lambda t, p, props: waiting.pop(props[0x09]).set_result(p)
    user = user_properties(
        [("__ts", f"{1_700_000_000_000:015d}:00000:{client_id}"), ("__srcId", client_id), ("__protVer", "1.0")]
    )
    payload = b"*2\r\n$3\r\nGET\r\n$5\r\nbench\r\n"
    if verb == "set":
        payload = b"*3\r\n$3\r\nSET\r\n$5\r\nbench\r\n$16\r\n" + b"y" * 16 + b"\r\n"
    loop = asyncio.get_running_loop()
    counter = iter(range(1, 10**9))
    topic = b"statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"

    async def one() -> bytes:
        corr = next(counter).to_bytes(16, "big")
        fut = loop.create_future()
        waiting[corr] = fut
        req.publish(topic, payload, response_topic, corr, user)
        return await fut

    return one


async def _socket_child(name: str, ops: int) -> None:
    in_flight = int(name.rsplit("-", 1)[1])
    async with AsyncExitStack() as stack:
        op = await _socket_setup(name, stack)

        async def run(n: int) -> None:
            left = [n]

            async def worker() -> None:
                while left[0] > 0:
                    left[0] -= 1
                    await op()

            await asyncio.gather(*(worker() for _ in range(min(in_flight, n))))

        await run(WARM_UP * in_flight)
        gc.collect()
        gc.freeze()
        await run(ops)
        await asyncio.sleep(0)


async def _child(name: str, ops: int) -> None:
    if name in SOCKET_MEASURES:
        await _socket_child(name, ops)
        return
    _RUN_OPS[0] = ops
    async with AsyncExitStack() as stack:
        op = await _setup(name, stack)
        for _ in range(WARM_UP):
            await op()
        # what the set-up and warm-up allocated is moved out of the collector's view: a collection's cost then
        # depends on what the operations themselves keep, not on how many ran before, and the 600-op minus
        # 100-op difference stays the same from one run size to another
        gc.collect()
        gc.freeze()
        for _ in range(ops):
            await op()
        await asyncio.sleep(0)  # let the last replies' bookkeeping run in both runs alike


#: the servers the socket measures' children talk to (set by _socket_servers)
_SERVERS: dict[str, str] = {}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT), **_SERVERS}


def _redis_ready() -> str | None:
    """Why the redis rows cannot be measured here (with the install command), or ``None`` when they can."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (`apt-get install redis-server`): the redis rows are skipped"
    try:
        import redis.asyncio  # noqa: F401
    except ImportError:
        return "the redis package is not installed (`pip install 'redis[hiredis]'`): the redis rows are skipped"
    return None


def _socket_servers(stack: contextlib.ExitStack, redis: bool) -> None:
    """A private mosquitto with the zero-cost responder on it, and (``redis``) a private redis-server, for the
    socket measures; their addresses go to the children through the environment."""
    from sskv_mapping.emulator.broker import MosquittoBroker, free_port

    broker = stack.enter_context(MosquittoBroker())
    script = Path(__file__).resolve().parent / "_zero_responder.py"
    zero = subprocess.Popen(
        [sys.executable, str(script), broker.host, str(broker.port)], stdout=subprocess.PIPE, text=True, env=_env()
    )
    stack.callback(zero.wait, 10)
    stack.callback(zero.kill)
    assert zero.stdout is not None
    if zero.stdout.readline().strip() != "ready":
        raise RuntimeError("the zero-cost responder did not start")
    _SERVERS["SSKV_BENCH_MQTT"] = f"{broker.host}:{broker.port}"
    if not redis:
        return
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stack.callback(server.wait, 10)
    stack.callback(server.terminate)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.05)
    _SERVERS["SSKV_BENCH_REDIS"] = str(port)


def _count_callgrind(name: str, ops: int, workdir: Path) -> int:
    out = workdir / f"{name}-{ops}.callgrind"
    cmd = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--child",
        name,
        "--ops",
        str(ops),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} ({ops} ops) failed under callgrind:\n{proc.stderr[-2000:]}")
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def _count_perf(name: str, ops: int, workdir: Path) -> int:
    cmd = ["perf", "stat", "-x,", "-e", "instructions:u", sys.executable, __file__, "--child", name]
    proc = subprocess.run([*cmd, "--ops", str(ops)], capture_output=True, text=True, env=_env(), check=False)
    for line in proc.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions") and fields[0].isdigit():
            return int(fields[0])
    raise RuntimeError(f"perf stat gave no instruction count for {name}:\n{proc.stderr[-2000:]}")


#: the system calls ``--tool syscalls`` counts, by what they are to an event loop
_SYSCALLS = {
    "turns": ("epoll_wait", "epoll_pwait", "epoll_pwait2"),
    "reads": ("recvfrom", "recvmsg", "read"),
    "writes": ("sendto", "sendmsg", "write", "writev"),
}


def _count_syscalls(name: str, ops: int, workdir: Path) -> dict[str, int]:
    """The child's event-loop turns (``epoll_wait`` calls), reads and writes, counted by ``strace -c``; a file read
    at start-up counts in both runs alike and cancels out."""
    out = workdir / f"{name}-{ops}.strace"
    calls = ",".join(c for group in _SYSCALLS.values() for c in group)
    cmd = ["strace", "-f", "-c", "-U", "calls,name", "-e", f"trace={calls}", "-o", str(out)]
    proc = subprocess.run(
        [*cmd, sys.executable, __file__, "--child", name, "--ops", str(ops)],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} ({ops} ops) failed under strace:\n{proc.stderr[-2000:]}")
    seen: dict[str, int] = {}
    for line in out.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit():
            seen[fields[1]] = int(fields[0])
    return {group: sum(seen.get(c, 0) for c in names) for group, names in _SYSCALLS.items()}


def _perf_works() -> bool:
    if shutil.which("perf") is None:
        return False
    proc = subprocess.run(
        ["perf", "stat", "-x,", "-e", "instructions:u", "true"], capture_output=True, text=True, check=False
    )
    return proc.returncode == 0 and re.search(r"^\d+,", proc.stderr, re.MULTILINE) is not None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="measures: " + ", ".join(MEASURES))
    ap.add_argument("--only", nargs="+", choices=list(MEASURES), metavar="NAME", help="measure only these")
    ap.add_argument("--socket", action="store_true", help="only the socket-* measures (the requester's process)")
    ap.add_argument("--small", type=int, default=100, help="operations in the shorter run (default 100)")
    ap.add_argument("--large", type=int, default=600, help="operations in the longer run (default 600)")
    ap.add_argument("--socket-small", type=int, default=200, help="socket-* requests in the shorter run (200)")
    ap.add_argument("--socket-large", type=int, default=1200, help="socket-* requests in the longer run (1,200)")
    ap.add_argument(
        "--tool",
        choices=["callgrind", "perf", "syscalls"],
        default="callgrind",
        help="how to count instructions (syscalls: the event loop's turns, reads and writes per op, by strace)",
    )
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio", help="the children's event loop")
    ap.add_argument("--list", action="store_true", help="list the measures and exit")
    ap.add_argument("--child", choices=list(MEASURES), help=argparse.SUPPRESS)
    ap.add_argument("--ops", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if os.environ.get("SSKV_BENCH_LOOP") == "uvloop":
            import uvloop

            uvloop.run(_child(args.child, args.ops))
        else:
            asyncio.run(_child(args.child, args.ops))
        return 0
    if args.list:
        for name, what in MEASURES.items():
            print(f"{name:20} {what}")
        return 0
    if args.large <= args.small or args.socket_large <= args.socket_small:
        ap.error("--large must be more than --small")
    if args.tool == "callgrind" and shutil.which("valgrind") is None:
        print("valgrind is not installed (e.g. `apt-get install valgrind`): nothing measured.")
        return 0
    if args.tool == "perf" and not _perf_works():
        print(
            "`perf stat -e instructions:u` does not work here (no perf, or no counters in this VM): nothing measured."
        )
        return 0
    if args.tool == "syscalls" and shutil.which("strace") is None:
        print("strace is not installed (e.g. `apt-get install strace`): nothing measured.")
        return 0
    os.environ["SSKV_BENCH_LOOP"] = args.loop
    if args.tool == "syscalls":
        return _syscall_table(args)
    count = _count_callgrind if args.tool == "callgrind" else _count_perf
    names = args.only or (list(SOCKET_MEASURES) if args.socket else list(MEASURES))
    sockets = [name for name in names if name in SOCKET_MEASURES]
    no_redis = _redis_ready() if any("-redis-" in name for name in sockets) else None
    if no_redis is not None:
        print(no_redis)
        names = [name for name in names if "-redis-" not in name]
    print(
        f"python {platform.python_version()} on {platform.machine()} ({args.loop}); {args.tool}; per op = (I({args.large}) - ",
        end="",
    )
    print(f"I({args.small})) / {args.large - args.small}", end="")
    if sockets:
        print(
            f"; socket-*: (I({args.socket_large}) - I({args.socket_small})) / {args.socket_large - args.socket_small}"
        )
    print(flush=True)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="sskv-instr-") as tmp, contextlib.ExitStack() as servers:
        if sockets:
            _socket_servers(servers, redis=no_redis is None and any("-redis-" in name for name in names))
        for name in names:
            small, large = (
                (args.socket_small, args.socket_large) if name in SOCKET_MEASURES else (args.small, args.large)
            )
            results[name] = (count(name, large, Path(tmp)) - count(name, small, Path(tmp))) / (large - small)
            print(f"  {name}: {results[name]:,.0f} instructions per op", flush=True)
    print()
    plain = {name: v for name, v in results.items() if name not in SOCKET_MEASURES}
    if plain:
        print("| measure | instructions per op | ratio |")
        print("|---|---:|---|")
        base = plain.get("client-get")
        for name, per_op in plain.items():
            ratio = ""
            if base and name.startswith(("dict-", "cache-")) and not name.endswith("hit"):
                ratio = f"{per_op / base:.2f}x client `get`"
            if name.endswith("-hit") and base:
                ratio = f"{base / per_op:.0f}x cheaper than client `get`"
            print(f"| {name}: {MEASURES[name]} | {per_op:,.0f} | {ratio} |")
    if any(name in SOCKET_MEASURES for name in results):
        print_socket_table(results)
    return 0


def _syscall_table(args: argparse.Namespace) -> int:
    """``--tool syscalls``: the socket measures' event-loop turns, reads and writes per request."""
    names = [n for n in (args.only or list(SOCKET_MEASURES)) if n in SOCKET_MEASURES]
    no_redis = _redis_ready()
    if no_redis is not None:
        print(no_redis)
        names = [name for name in names if "-redis-" not in name]
    small, large = args.socket_small, args.socket_large
    print(
        f"python {platform.python_version()} ({args.loop}); strace -c; per request = (N({large}) - N({small})) ", end=""
    )
    print(f"/ {large - small}", flush=True)
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sskv-sys-") as tmp, contextlib.ExitStack() as servers:
        _socket_servers(servers, redis=any("-redis-" in name for name in names))
        for name in names:
            big, few = _count_syscalls(name, large, Path(tmp)), _count_syscalls(name, small, Path(tmp))
            rows[name] = {k: (big[k] - few[k]) / (large - small) for k in _SYSCALLS}
            print(f"  {name}: " + ", ".join(f"{v:.2f} {k}" for k, v in rows[name].items()), flush=True)
    print()
    print("| the requester's process, per request | loop turns | reads | writes |")
    print("|---|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['turns']:.2f} | {row['reads']:.2f} | {row['writes']:.2f} |")
    return 0


def print_socket_table(results: dict[str, float]) -> None:
    """The requester's instructions per request, each against the raw requester's in the same run."""
    print()
    print("| the requester's process, per request | one in flight | vs raw | 64 in flight | vs raw |")
    print("|---|---:|---:|---:|---:|")
    for verb in ("get", "set"):
        for who, label in (("client", "`AsyncStateStoreClient`"), ("raw", "raw requester"), ("redis", "redis.asyncio")):
            cells = []
            for n in (1, 64):
                value = results.get(f"socket-{who}-{verb}-{n}")
                raw = results.get(f"socket-raw-{verb}-{n}")
                cells.append("" if value is None else f"{value:,.0f}")
                cells.append("" if value is None or not raw else f"{value / raw:.2f}x")
            if any(cells):
                print(f"| {label} {verb.upper()} | {' | '.join(cells)} |")


if __name__ == "__main__":
    sys.exit(main())
