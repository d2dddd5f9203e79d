"""What OpenTelemetry costs (docs/observability.md): the request path and a local-cache hit, three ways.

Run:  python benchmarks/bench_otel.py --baseline DIR [--rounds 7] [--requests 3000] [--hits 200000]

``DIR`` holds the library before the hook (e.g. ``git archive <commit> sskv_mapping | tar -x -C DIR``); each
variant runs in a process of its own (OpenTelemetry's providers are per process), in turn within each round:

* ``base``: the library from ``DIR``, no hook at all;
* ``no provider``: this tree, ``opentelemetry-api`` installed, no provider configured (the hook's test only);
* ``provider``: this tree with the SDK's tracer provider (a span processor handing every span to an exporter
  that drops it) and meter provider (a reader that is never collected): a span and a histogram record per
  request, the trace context on the wire.

Measured in each: (1) ``AsyncStateStoreClient.get``, one request at a time, its CPU time per request in the client's process, against a zero-cost responder
(benchmarks/_zero_responder.py) on a private mosquitto: the client's own cost, without the emulator's; (2) a
local-cache hit, ``d[key]`` on a sync ``StateStoreDict`` with a warm cache, over the emulator process (the
reading thread's CPU time). CPU time, not wall time: on a machine shared by many (load 10+ on 2 cores) wall
times move by the neighbours far more than by what is measured. Figures
are medians over rounds; ratios are against ``base`` in the same round. A script, not a test: the machine is
shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VARIANTS = ("base", "no provider", "provider")


def _provider() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(Drop()))
    trace.set_tracer_provider(tp)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


async def _get_latency(host: str, port: int, n: int) -> float:
    from sskv_mapping.client import AsyncStateStoreClient

    async with AsyncStateStoreClient(host, port) as client:
        for _ in range(200):  # warm up
            await client.get("k")
        start = time.process_time()  # CPU time of this process (the client): the machine's load moves it less
        for _ in range(n):
            await client.get("k")
        return (time.process_time() - start) / n


def _hit_cost(host: str, port: int, hits: int) -> float:
    from sskv_mapping import StateStoreDict

    keys = [f"k{i}" for i in range(1000)]
    with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace="bench-otel") as d:
        d.update(dict.fromkeys(keys, 1))
        for key in keys:
            d[key]  # warm: every read below is a hit
        cache = d.local_cache
        assert cache is not None
        misses = cache.misses
        per = max(1, hits // len(keys))
        start = time.thread_time()  # this thread's CPU time: a hit runs in the caller's thread alone
        for _ in range(per):
            for key in keys:
                d[key]
        seconds = (time.thread_time() - start) / (per * len(keys))
        assert cache.misses == misses, "a read missed the cache: not the hit path"
        return seconds


def child(args: argparse.Namespace) -> None:
    if args.variant == "provider":
        _provider()
    get = asyncio.run(_get_latency(args.host, args.zero_port, args.requests))
    if args.get_only:
        return
    hit = _hit_cost(args.host, args.port, args.hits)
    import sskv_mapping

    print(json.dumps({"get": get, "hit": hit, "from": sskv_mapping.__file__}))


def _run_variant(variant: str, baseline: Path, args: argparse.Namespace, zero_port: int, port: int) -> dict[str, float]:
    env = dict(os.environ)
    tree = baseline if variant == "base" else ROOT
    env["PYTHONPATH"] = str(tree)
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        variant,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--zero-port",
        str(zero_port),
        "--requests",
        str(args.requests),
        "--hits",
        str(args.hits),
    ]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd="/", check=False)
    if out.returncode != 0:
        raise SystemExit(f"{variant}: {out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    where = Path(result.pop("from")).resolve()
    if not where.is_relative_to(tree.resolve()):  # the variant must run the tree it names
        raise SystemExit(f"{variant} ran the library from {where}, not from {tree}")
    return {k: float(v) for k, v in result.items()}


def _instructions(variant: str, baseline: Path, zero_port: int, n: int) -> int:
    tree = baseline if variant == "base" else ROOT
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    out_file = Path(f"/tmp/bench-otel-callgrind.{os.getpid()}")
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out_file}",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        variant,
        "--zero-port",
        str(zero_port),
        "--requests",
        str(n),
        "--get-only",
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, cwd="/", check=False)
    if done.returncode != 0:
        raise SystemExit(f"{variant}: {done.stderr[-2000:]}")
    total = next(line for line in done.stderr.splitlines() if "Collected :" in line)
    out_file.unlink(missing_ok=True)
    return int(total.split(":")[-1].strip())


def callgrind(args: argparse.Namespace, zero_port: int) -> None:
    """Instructions per GET: (I(n + requests) - I(n)) / requests, the start-up and imports cancelling out. The
    count still moves a little from run to run (the event loop polls as often as the replies' timing makes it):
    ``--repeat`` runs each variant that many times, in turn, and reports the median."""
    small = 200
    per: dict[str, list[float]] = {v: [] for v in args.variants}
    for _ in range(args.repeat):
        for variant in args.variants:
            low = _instructions(variant, args.baseline, zero_port, small)
            high = _instructions(variant, args.baseline, zero_port, small + args.requests)
            per[variant].append((high - low) / args.requests)
            print(f"{variant}: {per[variant][-1]:,.0f} instructions per GET", flush=True)
    base = statistics.median(per["base"]) if per.get("base") else None
    print(f"\n| variant | instructions per GET ({args.requests} GETs, valgrind, median of {args.repeat}) | vs base |")
    print("|---|---|---|")
    for variant, counts in per.items():
        mid = statistics.median(counts)
        ratio = f"{mid / base:.3f}" if base else "-"
        print(f"| {variant} | {mid:,.0f} | {ratio} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="a directory holding the library before the hook")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--hits", type=int, default=200_000)
    ap.add_argument("--child", dest="variant", choices=VARIANTS)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int)
    ap.add_argument("--zero-port", type=int)
    ap.add_argument("--get-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--callgrind", action="store_true", help="instructions per GET under valgrind (deterministic) instead"
    )
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS), help="(--callgrind) which")
    ap.add_argument("--repeat", type=int, default=1, help="(--callgrind) runs of each variant, in turn")
    args = ap.parse_args()
    if args.variant:
        child(args)
        return
    if args.baseline is None or not (args.baseline / "sskv_mapping").is_dir():
        raise SystemExit("--baseline DIR must hold the library before the hook (DIR/sskv_mapping)")
    from sskv_mapping.emulator.broker import MosquittoBroker

    with MosquittoBroker() as zero_broker, MosquittoBroker() as broker:
        zero = subprocess.Popen(
            [sys.executable, str(HERE / "_zero_responder.py"), zero_broker.host, str(zero_broker.port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        emulator = subprocess.Popen(
            [sys.executable, "-m", "sskv_mapping.emulator", "--host", broker.host, "--port", str(broker.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            assert zero.stdout is not None and emulator.stdout is not None
            assert zero.stdout.readline().strip() == "ready"
            while "serving state store on" not in emulator.stdout.readline():
                pass
            if args.callgrind:
                callgrind(args, zero_broker.port)
                return
            samples: dict[str, dict[str, list[float]]] = {v: {"get": [], "hit": []} for v in VARIANTS}
            for r in range(args.rounds):
                order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
                for variant in order:
                    got = _run_variant(variant, args.baseline, args, zero_broker.port, broker.port)
                    for what, value in got.items():
                        samples[variant][what].append(value)
                print(f"round {r + 1}/{args.rounds} done", flush=True)
        finally:
            zero.kill()
            emulator.kill()
            zero.wait()
            emulator.wait()
    print(f"\n| variant | GET, CPU us per request (median of {args.rounds}) | vs base | dict hit, CPU ns | vs base |")
    print("|---|---|---|---|---|")
    for variant in VARIANTS:
        get = statistics.median(samples[variant]["get"]) * 1e6
        hit = statistics.median(samples[variant]["hit"]) * 1e9
        ratios_get = [a / b for a, b in zip(samples[variant]["get"], samples["base"]["get"], strict=True)]
        ratios_hit = [a / b for a, b in zip(samples[variant]["hit"], samples["base"]["hit"], strict=True)]
        print(
            f"| {variant} | {get:.1f} | {statistics.median(ratios_get):.3f} | {hit:.0f} | "
            f"{statistics.median(ratios_hit):.3f} |"
        )


if __name__ == "__main__":
    main()
