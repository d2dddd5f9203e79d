"""Leader election with real processes: ``sskv leader NAME -- python _acting.py`` candidates on a real mosquitto +
the emulator process. A watcher records every value the acting leader writes (``candidate|token|n``, fenced
with the token) in notification order.

* the leader SIGKILLed 10 times: a new leader acts within term + 1 s every time;
* the leader (its whole process group) SIGSTOPped past its term, a successor takes over, SIGCONT: the old
  leader says it lost, and none of its writes after the takeover is accepted;
* a broker restart during a term: a leader acts again afterwards;
* throughout: the tokens of accepted writes never go backwards (never two leaders' writes interleaved).

Synchronisation is on the watcher's notifications and the processes' output, never a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sskv_mapping import AsyncStateStoreClient, HybridLogicalClock, KeyEvent, KeyOperation
from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.waiting import eventually

pytestmark = pytest.mark.broker

ACTING = Path(__file__).resolve().with_name("_acting.py")
TERM = 1.0
KILLS = int(os.environ.get("SSKV_ELECTION_KILLS", "10"))
MARGIN = 1.0  # a loaded CI machine


class Candidate:
    def __init__(self, url: str, name: str, key: str, candidate: str) -> None:
        self.candidate = candidate
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "sskv_mapping.cli", "leader", name, "--url", url, "--term", str(TERM)),
                *("--candidate", candidate, "--grace", "1", "--", sys.executable, str(ACTING), url, key, candidate),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: the acting child goes with it on cleanup
        )
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, name=f"stderr-{candidate}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def said(self, text: str) -> bool:
        return text in "".join(self.stderr)

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the ``sskv leader`` process only: an acting child it leaves behind is fenced out."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(10)

    def cleanup(self) -> None:
        self.signal_group(signal.SIGCONT)
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class Watcher:
    """Every accepted write of the protected key: (arrival time, candidate, token), in notification order."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, str, HybridLogicalClock]] = []
        self.changed = asyncio.Event()

    def __call__(self, event: KeyEvent) -> None:
        if event.op is KeyOperation.SET and event.value and not event.synthetic:
            candidate, token, _ = event.value.decode().split("|")
            self.writes.append((time.monotonic(), candidate, HybridLogicalClock.parse(token)))
            self.changed.set()

    async def next_leader(self, after: float, other_than: str | None, timeout: float = 15) -> tuple[float, str]:
        async with asyncio.timeout(timeout):
            while True:
                for t, who, _ in self.writes:
                    if t > after and who != other_than:
                        return t, who
                self.changed.clear()
                await self.changed.wait()

    def leader_now(self) -> str:
        return self.writes[-1][1]

    def tokens_never_go_back(self) -> None:
        tokens = [tok for _, _, tok in self.writes]
        backwards = [(a, b) for a, b in itertools.pairwise(tokens) if b < a]
        assert not backwards, f"an older token was accepted after a newer one: {backwards[:3]}"


@pytest.fixture
def names() -> tuple[str, str]:
    return f"election-{uuid.uuid4().hex[:8]}", f"acted-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def candidates() -> Iterator[list[Candidate]]:
    made: list[Candidate] = []
    yield made
    for c in made:
        c.cleanup()


@pytest.fixture
async def watcher(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: Any, names: tuple[str, str]
) -> AsyncIterator[Watcher]:
    w = Watcher()
    async with AsyncStateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port) as client:
        await client.subscribe_key(names[1], w)
        yield w


async def test_killing_the_leader_ten_times(
    fresh_mosquitto: MosquittoBroker, watcher: Watcher, candidates: list[Candidate], names: tuple[str, str]
) -> None:
    url = f"mqtt://{fresh_mosquitto.host}:{fresh_mosquitto.port}"
    name, key = names
    for i in range(3):
        candidates.append(Candidate(url, name, key, f"c{i}"))
    await watcher.next_leader(after=0, other_than=None)
    takeovers: list[float] = []
    for round_ in range(KILLS):
        leader = watcher.leader_now()
        victim = next(c for c in candidates if c.candidate == leader and c.proc.poll() is None)
        killed = time.monotonic()
        victim.kill()
        acted, _ = await watcher.next_leader(after=killed, other_than=leader)
        takeovers.append(acted - killed)
        candidates.append(Candidate(url, name, key, f"r{round_}"))  # keep three candidates
    watcher.tokens_never_go_back()
    assert max(takeovers) < TERM + 1.0 + MARGIN, f"takeovers (s): {[round(t, 2) for t in takeovers]}"
    print(
        f"\nelection: {KILLS} leader kills, takeover max {max(takeovers):.2f} s / median "
        f"{sorted(takeovers)[len(takeovers) // 2]:.2f} s (term {TERM} s)"
    )


async def test_a_stopped_leader_is_fenced_out_and_reports_the_loss(
    fresh_mosquitto: MosquittoBroker, watcher: Watcher, candidates: list[Candidate], names: tuple[str, str]
) -> None:
    url = f"mqtt://{fresh_mosquitto.host}:{fresh_mosquitto.port}"
    name, key = names
    candidates.extend(Candidate(url, name, key, f"c{i}") for i in range(2))
    await watcher.next_leader(after=0, other_than=None)
    leader = watcher.leader_now()
    old = next(c for c in candidates if c.candidate == leader)
    stopped = time.monotonic()
    old.signal_group(signal.SIGSTOP)  # the leader and its acting child freeze past the term
    taken, _ = await watcher.next_leader(after=stopped, other_than=leader)
    old.signal_group(signal.SIGCONT)
    # the old leader notices by its own clock that its term ended (and stops its command)
    await eventually(lambda: old.said(f"lost {name}"), timeout=10)
    reported = time.monotonic()
    await watcher.next_leader(after=reported, other_than=leader)  # the successor goes on writing
    late = [w for w in watcher.writes if w[0] > taken and w[1] == leader]
    assert late == [], f"writes of the old leader accepted after the takeover: {late[:3]}"
    watcher.tokens_never_go_back()


async def test_a_broker_restart_during_a_term(
    fresh_mosquitto: MosquittoBroker, watcher: Watcher, candidates: list[Candidate], names: tuple[str, str]
) -> None:
    url = f"mqtt://{fresh_mosquitto.host}:{fresh_mosquitto.port}"
    name, key = names
    candidates.extend(Candidate(url, name, key, f"c{i}") for i in range(3))
    await watcher.next_leader(after=0, other_than=None)
    restarted = time.monotonic()
    fresh_mosquitto.restart()
    await watcher.next_leader(after=restarted, other_than=None, timeout=30)  # someone leads and acts again
    watcher.tokens_never_go_back()


async def test_sskv_leader_status(mosquitto: MosquittoBroker, emulator: Any) -> None:
    from sskv_mapping import AsyncLeaderElection

    url = f"mqtt://{mosquitto.host}:{mosquitto.port}"
    name = f"status-{uuid.uuid4().hex[:8]}"

    def status() -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "sskv_mapping.cli", "leader", name, "--status", "--json", "--url", url]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

    nobody = await asyncio.to_thread(status)
    assert nobody.returncode == 1 and '"leader": null' in nobody.stdout
    async with AsyncStateStoreClient(mosquitto.host, mosquitto.port) as client:
        election = AsyncLeaderElection(client, name, term=30, candidate="the-leader")
        async with election:
            led = await asyncio.to_thread(status)
    assert led.returncode == 0 and '"leader": "the-leader"' in led.stdout, led.stdout + led.stderr
