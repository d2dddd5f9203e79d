"""Scenario a: the broker is SIGKILLed and restarted N times under mixed load from six processes.

Two writer and two reader processes on a ``StateStoreDict`` and one of each on the blocking cache
(``_worker.py``: a notification-kept local cache on a ``StateStoreClient`` each, default timeouts) run a
paced, bounded load while mosquitto is killed with SIGKILL and
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
* **no call longer than 2 s** with the default 10 s timeouts (a request the broker delivered to nobody while the
  emulator re-subscribed is resent, not waited out), and **every writer's first acknowledged write within
  0.5 s** of the emulator serving again (its "serving again" line);
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
from tests._support.procs import EmulatorProcess

from ._harness import WorkerProcess
from .conftest import FaultRow, env_float, env_int, recovery_text

pytestmark = [pytest.mark.faults, pytest.mark.broker]

KEYS_PER_WRITER = 4
RECOVERY_LIMIT_S = 2.0
LONGEST_CALL_S = 2.0
FIRST_ACK_S = 0.5
MARGIN_S = 1.0


def _spawn(
    role: str, name: str, broker: MosquittoBroker, namespace: str, keys: list[str], seconds: float, kind: str = "dict"
) -> Any:
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
            "--kind",
            kind,
        ],
    )


def test_broker_sigkill_restarts_under_mixed_load(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: EmulatorProcess, fault_report: FaultRow
) -> None:
    restarts = env_int("SSKV_FAULTS_RESTARTS", 10)
    window = env_float("SSKV_FAULTS_SECONDS", 60.0)
    broker = fresh_mosquitto
    namespace = f"faults{uuid.uuid4().hex[:8]}"
    writer_keys = {f"w{i}": [f"w{i}-k{j}" for j in range(KEYS_PER_WRITER)] for i in range(2)}
    writer_keys["cw"] = [f"cw-k{j}" for j in range(KEYS_PER_WRITER)]  # the cache writer's keys
    writer_keys["cn"] = [f"cn-k{j}" for j in range(KEYS_PER_WRITER)]  # a cache writer without TTLs
    # one dict lists by SCAN (auto), one by the stored index; the TTL-less cache writer takes locks of its own
    kinds = {"w0": "dict", "w1": "dict-index", "cw": "cache", "cn": "cache-nottl"}
    all_keys = [k for keys in writer_keys.values() for k in keys]
    dict_keys = [k for name, keys in writer_keys.items() if kinds[name].startswith("dict") for k in keys]
    hard_deadline = window + 60  # the workers stop by themselves even if the test never says "stop"
    fault_report.scenario = "a. broker SIGKILL+restart"
    fault_report.faults = f"{restarts} broker SIGKILL+restart"

    workers: list[WorkerProcess] = []
    try:
        data_keys: dict[str, str] = {}
        # the index writer first: the SCAN-listing dict then finds the namespace indexed and keeps the index
        # current (a namespace written by SCAN-listing dicts first is refused to an index-listing one)
        for name in sorted(writer_keys, key=lambda n: kinds[n] != "dict-index"):
            workers.append(_spawn("writer", name, broker, namespace, writer_keys[name], hard_deadline, kinds[name]))
            if kinds[name] == "dict-index":
                data_keys.update(workers[-1].wait_for(lambda e: e["ev"] == "ready", 60)["data_keys"])
        for w in workers:
            if kinds[w.name] != "dict-index":  # (waited for above)
                data_keys.update(w.wait_for(lambda e: e["ev"] == "ready", 60)["data_keys"])
        for i in range(2):
            workers.append(_spawn("reader", f"r{i}", broker, namespace, dict_keys, hard_deadline))
        workers.append(_spawn("reader", "cr", broker, namespace, writer_keys["cw"], hard_deadline, "cache"))
        for w in workers:
            w.wait_for(lambda e: e["ev"] == "ready", 60)

        cycle = window / restarts
        downtime = min(0.3, cycle / 4)
        begin = time.monotonic()
        recoveries: list[float] = []
        restart_times: list[float] = []
        service_times: list[float] = []
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
            served = fresh_emulator.line_time("serving again", after=t_start, timeout=15)
            assert served is not None, "the emulator did not say it serves again"
            service_times.append(served)
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
                entry = checker.get(data_keys[k])
                stored[k] = None if entry is None else json.loads(entry.value)
        lost = [k for k in all_keys if (value := stored[k]) is None or value < acked[k]]
        phantom = [k for k in all_keys if (value := stored[k]) is not None and value > attempted[k]]

        # -- figures ------------------------------------------------------------------------------------------
        stats = {name: d["stats"] for name, d in done.items()}
        stale_events = [(w.name, e) for w in workers for e in w.of("stale")]
        stale = sum(s["stale"] for s in stats.values())
        writes_acked = sum(stats[n]["writes_acked"] for n in writer_keys)
        writes_unknown = sum(stats[n]["writes_unknown"] for n in writer_keys)
        reads = sum(s["reads"] for s in stats.values())
        hits = sum(s["cache_hits"] for s in stats.values())
        service_back = []
        first_acks: list[float] = []  # per restart and writer: first acknowledged write after the service is back
        for t_start, t_served in zip(restart_times, service_times, strict=True):
            for w in workers:
                firsts = [e["t"] for e in w.of("first_ok") if e["t"] > t_start]
                if firsts:
                    service_back.append(min(firsts) - t_start)
                    if w.name in writer_keys:
                        first_acks.append(max(0.0, min(firsts) - t_served))
        longest = max(d["longest_call"] for d in done.values())
        fault_report.load = (
            "2+2 dict (SCAN and index listing) and 2+1 cache (one without TTLs) writer/reader procs, "
            f"default timeouts, {elapsed:.0f}s: "
            f"{writes_acked} writes acked "
            f"({writes_unknown} unknown outcome), {reads} reads ({hits} cache hits)"
        )
        fault_report.writes_lost = f"{len(lost)} of {len(all_keys)} keys"
        fault_report.stale_reads = str(stale)
        fault_report.recovery = recovery_text(recoveries)
        fault_report.notes.append(
            f"first successful store op after broker start (max/median): {recovery_text(service_back)}; "
            f"every writer's first acked write after the emulator served again (max/median, {len(first_acks)} "
            f"writer-restarts): {recovery_text(first_acks)}; longest call of the run: {longest:.2f}s "
            f"(default 10 s timeout)"
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
        # the targets (no call > 2 s; every writer's first ack <= 0.5 s after the service is back), with
        # a margin for a loaded CI machine; the measured figures are in the report
        assert longest < LONGEST_CALL_S + MARGIN_S, f"a call took {longest:.2f} s"
        assert max(first_acks) < FIRST_ACK_S + MARGIN_S, f"first acked writes after the service: {first_acks}"
    finally:
        for w in workers:
            w.close()
