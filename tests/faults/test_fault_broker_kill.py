"""Scenario a: the broker is SIGKILLed and restarted N times under mixed load from four processes.

Two writer and two reader processes (``_worker.py``: a ``StateStoreDict`` with its notification-kept local
cache on a ``StateStoreClient`` each) run a paced, bounded load while mosquitto is killed with SIGKILL and
started again on the same port, ``SSKV_FAULTS_RESTARTS`` times (default 10) within ``SSKV_FAULTS_SECONDS``
(default 60). The emulator process stays up and reconnects by itself, so the data survives every restart.

What must hold, and how it is measured:

* **zero acknowledged writes lost**: writers own their keys and write 0, 1, 2, ... to each; after the run a
  fresh client reads every key and the store must hold at least the last acknowledged number (and no more
  than the last attempted one). A write that failed with a ``TransportError`` has an unknown outcome: it may
  or may not have been applied, and either is correct;
* **zero stale reads** (defined in ``_worker.py``): a process never returns a number lower than one it
  already knew to be in the store for that key (its own acknowledged write, an earlier read, or a direct
  GET past its cache). Lag is allowed; going back, or a cache stuck on an old value, is not;
* **every client back within 2 s** of the broker's return: from just before ``MosquittoBroker.start()`` (so
  mosquitto's own start-up counts against the client) to each worker's ``CONNECTED`` state change, both
  on the system-wide monotonic clock;
* **no leaks**: each worker counts its threads, asyncio tasks and open fds when set up and when the load
  stops (both connected: equal after N reconnects), and again after closing (tasks and fds back to the
  count before it connected).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from typing import Any

import pytest

from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker

from ._harness import WorkerProcess
from .conftest import FaultRow, env_float, env_int, recovery_text

pytestmark = [pytest.mark.faults, pytest.mark.broker]

KEYS_PER_WRITER = 4
RECOVERY_LIMIT_S = 2.0


def _spawn(role: str, name: str, broker: MosquittoBroker, namespace: str, keys: list[str], seconds: float) -> Any:
    return WorkerProcess(
        name,
        [
            "--role",
            role,
            "--id",
            f"fault-{name}-{uuid.uuid4().hex[:6]}",
            "--port",
            str(broker.port),
            "--namespace",
            namespace,
            "--keys",
            ",".join(keys),
            "--seconds",
            str(seconds),
        ],
    )


def test_broker_sigkill_restarts_under_mixed_load(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: object, fault_report: FaultRow
) -> None:
    restarts = env_int("SSKV_FAULTS_RESTARTS", 10)
    window = env_float("SSKV_FAULTS_SECONDS", 60.0)
    broker = fresh_mosquitto
    namespace = f"faults{uuid.uuid4().hex[:8]}"
    writer_keys = {f"w{i}": [f"w{i}-k{j}" for j in range(KEYS_PER_WRITER)] for i in range(2)}
    all_keys = [k for keys in writer_keys.values() for k in keys]
    hard_deadline = window + 60  # the workers stop by themselves even if the test never says "stop"
    fault_report.scenario = "a. broker SIGKILL+restart"
    fault_report.faults = f"{restarts} broker SIGKILL+restart"

    workers: list[WorkerProcess] = []
    try:
        for name, keys in writer_keys.items():
            workers.append(_spawn("writer", name, broker, namespace, keys, hard_deadline))
        for w in workers:
            w.wait_for(lambda e: e["ev"] == "ready", 60)
        for i in range(2):
            workers.append(_spawn("reader", f"r{i}", broker, namespace, all_keys, hard_deadline))
        for w in workers:
            w.wait_for(lambda e: e["ev"] == "ready", 60)

        cycle = window / restarts
        downtime = min(0.3, cycle / 4)
        begin = time.monotonic()
        recoveries: list[float] = []
        restart_times: list[float] = []
        for i in range(restarts):
            # let the load run (time passing on purpose) until this cycle's fault is due
            time.sleep(max(0.0, begin + (i + 0.5) * cycle - time.monotonic()))
            marks = [w.mark() for w in workers]
            broker.kill()
            time.sleep(downtime)  # the broker stays down for a while on purpose
            t_start = time.monotonic()
            broker.start()
            restart_times.append(t_start)
            for w, mark in zip(workers, marks, strict=True):
                back = w.wait_for(lambda e: e["ev"] == "state" and e["state"] == "connected", 15, start=mark)
                recoveries.append(back["t"] - t_start)
        time.sleep(max(0.0, begin + window - time.monotonic()))  # the rest of the load window, on purpose
        elapsed = time.monotonic() - begin
        done = {w.name: w.finish(30) for w in workers}

        # -- acknowledged writes: the store holds at least the last acked number of every key --------------
        acked: dict[str, int] = {}
        attempted: dict[str, int] = {}
        for name in writer_keys:
            acked.update(done[name]["acked"])
            attempted.update(done[name]["attempted"])
        with StateStoreClient(broker.host, broker.port, timeout=5) as checker:
            stored = {}
            for k in all_keys:
                entry = checker.get(f"{namespace}/{k}")
                stored[k] = None if entry is None else json.loads(entry.value)
        lost = [k for k in all_keys if stored[k] is None or stored[k] < acked[k]]
        phantom = [k for k in all_keys if stored[k] is not None and stored[k] > attempted[k]]

        # -- figures ------------------------------------------------------------------------------------------
        stats = {name: d["stats"] for name, d in done.items()}
        stale_events = [(w.name, e) for w in workers for e in w.of("stale")]
        stale = sum(s["stale"] for s in stats.values())
        writes_acked = sum(stats[n]["writes_acked"] for n in writer_keys)
        writes_unknown = sum(stats[n]["writes_unknown"] for n in writer_keys)
        reads = sum(s["reads"] for s in stats.values())
        hits = sum(s["cache_hits"] for s in stats.values())
        service_back = []
        for t_start in restart_times:
            for w in workers:
                firsts = [e["t"] for e in w.of("first_ok") if e["t"] > t_start]
                if firsts:
                    service_back.append(min(firsts) - t_start)
        fault_report.load = (
            f"2 writer + 2 reader procs, {elapsed:.0f}s: {writes_acked} writes acked "
            f"({writes_unknown} unknown outcome), {reads} reads ({hits} cache hits)"
        )
        fault_report.writes_lost = f"{len(lost)} of {len(all_keys)} keys"
        fault_report.stale_reads = str(stale)
        fault_report.recovery = recovery_text(recoveries)
        fault_report.notes.append(
            f"first successful store op after broker start (service back, max/median): {recovery_text(service_back)}"
        )

        # -- leaks: steady state before and after N reconnects; after close back to the baseline ------------
        leaks = []
        for w in workers:
            counts = {e["phase"]: e for e in w.of("counts")}
            ready, end, base, closed = counts["ready"], counts["end"], counts["baseline"], counts["closed"]
            for what in ("threads", "tasks", "fds"):
                if end[what] != ready[what]:
                    leaks.append(f"{w.name}: {what} {ready[what]} when set up, {end[what]} after the load")
            for what in ("tasks", "fds"):
                if closed[what] != base[what]:
                    leaks.append(f"{w.name}: {what} {base[what]} before connecting, {closed[what]} after closing")
            extra_threads = sorted(set(closed["thread_names"]) - set(base["thread_names"]))
            # the event loop's default executor (asyncio_N: getaddrinfo of the connects) keeps its idle
            # threads for reuse; anything else still running after close is a leak
            leaks.extend(
                f"{w.name}: thread {t} left after closing" for t in extra_threads if not t.startswith("asyncio_")
            )
            fault_report.notes.append(
                f"{w.name}: threads/tasks/fds set up {ready['threads']}/{ready['tasks']}/{ready['fds']}, "
                f"after load {end['threads']}/{end['tasks']}/{end['fds']}, "
                f"closed {closed['threads']}/{closed['tasks']}/{closed['fds']} "
                f"(baseline {base['threads']}/{base['tasks']}/{base['fds']}; threads kept after close: "
                f"{extra_threads or 'none'}), reconnects {stats[w.name]['reconnects']}"
            )

        assert not lost, f"acknowledged writes lost: { {k: (stored[k], acked[k]) for k in lost} }"
        assert not phantom, f"values never written: { {k: (stored[k], attempted[k]) for k in phantom} }"
        assert stale == 0, f"stale reads: {stale_events[:10]}"
        slow = [r for r in recoveries if r > RECOVERY_LIMIT_S]
        assert not slow, f"clients back later than {RECOVERY_LIMIT_S} s after the broker: {sorted(slow)}"
        assert all(s["reconnects"] == restarts for s in stats.values()), stats
        assert not leaks, leaks
        assert writes_acked > 10 * restarts and hits > 0, "the load did not really run"
        assert statistics.median(service_back) < RECOVERY_LIMIT_S
    finally:
        for w in workers:
            w.close()
