"""The ``sskv`` command holds on (issue 27, point 6), over real processes: mosquitto restarted under ``sskv watch``
and under two ``sskv lock NAME -- COMMAND`` processes, a lease really lost, stdout that is COMMAND's alone, and a
``--url`` port that does not speak MQTT.

The lock jobs write their start and end (``time.monotonic_ns``, one clock for every process of the machine) to a
file; "never overlap" is checked on those stamps. Waits are on the lines the processes print, with deadlines.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import REPO_ROOT, EmulatorProcess
from tests._support.waiting import eventually_sync

from .test_cli import SSKV, TIMEOUT, clean_env, new_key, one_line_error, sskv

pytestmark = pytest.mark.broker

EXIT_OK, EXIT_MISS, EXIT_CONNECTION, EXIT_LEASE_LOST = 0, 1, 3, 6

#: a lock's job: stamps "start", works SECONDS, stamps "end"; on SIGTERM stamps "end" and exits 143
JOB = """\
import os, signal, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
def stamp(what):
    with open(path, "a") as f:
        f.write(f"{what} {time.monotonic_ns()} {os.getpid()}\\n")
def on_term(*_):
    stamp("end")
    os._exit(143)
signal.signal(signal.SIGTERM, on_term)
stamp("start")
time.sleep(seconds)
stamp("end")
"""


class Cli:
    """An ``sskv`` subprocess whose stdout and stderr lines are collected as they come."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*SSKV, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
            start_new_session=True,  # its own group: cleanup reaches COMMAND too
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Iterable[bytes], into: list[str]) -> None:
        for line in stream:
            into.append(line.decode(errors="replace"))

    def said(self, text: str, stream: str = "err") -> bool:
        return any(text in line for line in (self.err if stream == "err" else self.out))

    def wait_for(self, text: str, stream: str = "err", timeout: float = TIMEOUT) -> None:
        try:
            eventually_sync(lambda: self.said(text, stream) or self.proc.poll() is not None, timeout=timeout)
        except TimeoutError:
            raise AssertionError(f"no {text!r} on std{stream} within {timeout} s: {self.err}") from None
        assert self.said(text, stream), f"exited ({self.proc.returncode}) without {text!r}: {self.err} {self.out}"

    def finish(self, timeout: float = TIMEOUT) -> int:
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(5)
        return code

    def cleanup(self) -> None:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
        self.proc.wait(10)


@pytest.fixture
def restartable(fresh_mosquitto: MosquittoBroker, fresh_emulator: EmulatorProcess) -> Iterator[StateStoreClient]:
    """A broker of this test's own (restart it at will) with its emulator, and a library client on it."""
    client = StateStoreClient(fresh_mosquitto.host, fresh_mosquitto.port, timeout=10)
    client.connect()
    try:
        yield client
    finally:
        client.close()


def windows(path: Path) -> dict[int, tuple[int, int | None]]:
    """Each job's (start, end) by pid, from the stamps it wrote."""
    found: dict[int, tuple[int, int | None]] = {}
    for line in path.read_text().splitlines():
        what, stamp, pid = line.split()
        if what == "start":
            found[int(pid)] = (int(stamp), None)
        else:
            found[int(pid)] = (found[int(pid)][0], int(stamp))
    return found


def assert_no_overlap(path: Path, jobs: int) -> list[tuple[int, int]]:
    spans = sorted(windows(path).values())
    assert len(spans) == jobs, spans
    ended = [(start, end) for start, end in spans if end is not None]
    assert len(ended) == jobs, f"a job never stamped its end: {spans}"
    for (_, first_end), (second_start, _) in itertools.pairwise(ended):
        assert first_end < second_start, f"two jobs ran at once: {ended}"
    return ended


def restart(broker: MosquittoBroker, emulator: EmulatorProcess) -> None:
    """Crash mosquitto and start it again on its port; returns once the emulator serves on it again."""
    broker.kill()
    t_start = time.monotonic()
    broker.start()
    assert emulator.line_time("serving again", after=t_start, timeout=30) is not None


# -- stdout is data ---------------------------------------------------------------------------------------------


def test_stdout_of_lock_is_exactly_the_commands_and_a_miss_is_said_on_stderr(
    mosquitto: MosquittoBroker, emulator: EmulatorProcess
) -> None:
    url, name, key = mosquitto.url, new_key("-lock"), new_key()
    done = sskv("lock", name, "--url", url, "--", "echo", "data")
    assert (done.returncode, done.stdout) == (EXIT_OK, b"data\n"), done
    assert b"acquired " in done.stderr and f"released {name}".encode() in done.stderr

    done = sskv("lock", name, "--url", url, "--json", "--", "echo", "data")
    assert (done.returncode, done.stdout) == (EXIT_OK, b"data\n"), done  # the JSON records go to stderr too

    for verb in ("get", "del"):
        miss = sskv(verb, key, "--url", url)
        assert (miss.returncode, miss.stdout) == (EXIT_MISS, b""), miss
        assert miss.stderr == f"(not found) {key}\n".encode()


# -- a port that is not MQTT ------------------------------------------------------------------------------------


class NotMqtt:
    """A TCP server on a free loopback port that answers any connection with HTTP text, or closes it."""

    def __init__(self, answer: bytes | None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)  # the CONNECT
                if self.answer is not None:
                    conn.sendall(self.answer)
                    conn.recv(1024)  # until the client goes

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "does not speak MQTT: its first bytes b'HTTP/1.1"),
        (None, "closed the connection before CONNACK"),
    ],
    ids=["garbage", "closes"],
)
def test_a_port_that_is_not_mqtt_fails_at_once_with_a_reason(answer: bytes | None, reason: str) -> None:
    server = NotMqtt(answer)
    try:
        started = time.monotonic()
        done = sskv("get", "k", "--url", f"mqtt://127.0.0.1:{server.port}")
        took = time.monotonic() - started
    finally:
        server.close()
    assert done.returncode == EXIT_CONNECTION, done
    line = one_line_error(done)  # the reason, once
    assert line.startswith(f"sskv: BrokerConnectError: could not connect to mqtt://127.0.0.1:{server.port}: ")
    assert reason in line, line
    print(f"{reason[:20]}: failed after {took:.2f} s (the process's start-up included)")


# -- watch --------------------------------------------------------------------------------------------------------


def test_watch_goes_on_printing_changes_after_the_broker_restarts(
    fresh_mosquitto: MosquittoBroker,
    fresh_emulator: EmulatorProcess,
    restartable: StateStoreClient,
    clis: list[Cli],
) -> None:
    key = new_key()
    watch = Cli("watch", key, "--url", fresh_mosquitto.url)
    clis.append(watch)
    watch.wait_for("watching ")
    restartable.set(key, b"before")
    watch.wait_for(f"SET {key} before", "out")

    restart(fresh_mosquitto, fresh_emulator)
    watch.wait_for("reconnected to ")
    restartable.wait_connected(30)
    # seen either as a notification (the watch is back) or as the resync of a change made before it was
    restartable.set(key, b"after")
    watch.wait_for(f"SET {key} after", "out")
    restartable.set(key, b"later")  # the watch is registered again by now: a plain notification
    watch.wait_for(f"SET {key} later", "out")
    assert watch.proc.poll() is None  # still watching
    assert "resync" not in next(line for line in watch.out if "later" in line)
    assert watch.said("connection to ") and watch.said("lost; reconnecting")


# -- lock ----------------------------------------------------------------------------------------------------------


def lock_cli(url: str, name: str, stamps: Path, seconds: float, *options: str) -> Cli:
    return Cli("lock", name, "--url", url, *options, "--", sys.executable, "-c", JOB, str(stamps), str(seconds))


def test_two_lock_jobs_never_overlap_across_a_broker_restart(
    fresh_mosquitto: MosquittoBroker,
    fresh_emulator: EmulatorProcess,
    restartable: StateStoreClient,
    clis: list[Cli],
    tmp_path: Path,
) -> None:
    name, stamps = new_key("-lock"), tmp_path / "stamps"
    first = lock_cli(fresh_mosquitto.url, name, stamps, 6, "--lease", "4")
    clis.append(first)
    first.wait_for("acquired ")
    eventually_sync(lambda: stamps.exists() and "start" in stamps.read_text(), timeout=TIMEOUT)
    second = lock_cli(fresh_mosquitto.url, name, stamps, 0.2, "--lease", "4", "--wait", "60")
    clis.append(second)
    second.wait_for(f"waiting for {name}")

    restart(fresh_mosquitto, fresh_emulator)  # a blip, well within the 4 s lease: renewed after it

    assert first.finish() == EXIT_OK, first.err  # its job ran to its end, its lease kept
    assert second.finish() == EXIT_OK, second.err
    assert not first.said(f"lost {name}")
    assert first.said("lost; reconnecting") and first.said("reconnected to ")  # it did go through the restart
    assert_no_overlap(stamps, 2)


def test_a_lease_really_lost_stops_the_command_before_the_next_holder_starts(
    fresh_mosquitto: MosquittoBroker,
    fresh_emulator: EmulatorProcess,
    restartable: StateStoreClient,
    clis: list[Cli],
    tmp_path: Path,
) -> None:
    name, stamps = new_key("-lock"), tmp_path / "stamps"
    first = lock_cli(fresh_mosquitto.url, name, stamps, 120, "--lease", "2", "--grace", "5")
    clis.append(first)
    first.wait_for("acquired ")
    eventually_sync(lambda: stamps.exists() and "start" in stamps.read_text(), timeout=TIMEOUT)
    second = lock_cli(fresh_mosquitto.url, name, stamps, 0.2, "--lease", "2", "--wait", "60")
    clis.append(second)
    second.wait_for(f"waiting for {name}")

    # the broker stays down longer than the lease: the first holder cannot renew, its lease ends
    fresh_mosquitto.kill()
    first.wait_for(f"lost {name}: the lease ran out")
    t_start = time.monotonic()
    fresh_mosquitto.start()
    assert fresh_emulator.line_time("serving again", after=t_start, timeout=30) is not None

    assert first.finish() == EXIT_LEASE_LOST, first.err
    assert second.finish() == EXIT_OK, second.err
    assert_no_overlap(stamps, 2)
    assert first.said("stopped the command (its exit status 143)")
    pids = list(windows(stamps))
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)  # the first job is gone, not left running


def test_a_leader_keeps_its_term_across_a_broker_restart(
    fresh_mosquitto: MosquittoBroker,
    fresh_emulator: EmulatorProcess,
    restartable: StateStoreClient,
    clis: list[Cli],
    tmp_path: Path,
) -> None:
    name, stamps = new_key("-leader"), tmp_path / "stamps"
    job = (sys.executable, "-c", JOB, str(stamps), "6")
    leader = Cli("leader", name, "--url", fresh_mosquitto.url, "--term", "4", "--", *job)
    clis.append(leader)
    leader.wait_for(f"leading {name}")
    eventually_sync(lambda: stamps.exists() and "start" in stamps.read_text(), timeout=TIMEOUT)

    restart(fresh_mosquitto, fresh_emulator)  # a blip within the 4 s term: renewed after it

    assert leader.finish() == EXIT_OK, leader.err  # its command ran to its end: never stopped
    assert leader.said("reconnected to ") and not leader.said(f"lost {name}")
    assert leader.said(f"resigned {name}") and leader.out == []  # the job printed nothing; nor did sskv on stdout
    ((_, end),) = windows(stamps).values()
    assert end is not None


#: a shell whose child ignores SIGTERM: only the SIGKILL to the whole process group after --grace ends it
STUBBORN = """\
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
time.sleep(120)
"""


def gone(pid: int) -> bool:
    """The process has ended (a zombie waiting for init to reap it counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_lock_taken_over_stops_the_whole_process_group_of_the_command(
    mosquitto: MosquittoBroker, emulator: EmulatorProcess, clis: list[Cli], tmp_path: Path
) -> None:
    store = StateStoreClient(mosquitto.host, mosquitto.port, timeout=10)
    store.connect()
    try:
        name, pidfile = new_key("-lock"), tmp_path / "pid"
        script = f"\"$0\" -c '{STUBBORN}' {pidfile} & wait"
        options = ("--url", mosquitto.url, "--lease", "30", "--grace", "1")
        first = Cli("lock", name, *options, "--", "sh", "-c", script, sys.executable)
        clis.append(first)
        first.wait_for("acquired ")
        eventually_sync(lambda: pidfile.exists() and pidfile.read_text() != "", timeout=TIMEOUT)
        child = int(pidfile.read_text())

        store.delete(name)  # someone else frees the lock under the holder (and may take it)
        assert first.finish() == EXIT_LEASE_LOST, first.err
        assert first.said(f"lost {name}: the lock key was deleted")
        eventually_sync(lambda: gone(child), timeout=TIMEOUT)  # SIGKILLed with its group, SIGTERM ignored
    finally:
        store.close()


def test_sigterm_to_sskv_lock_reaches_the_command_and_the_lock_is_released(
    mosquitto: MosquittoBroker, emulator: EmulatorProcess, clis: list[Cli], tmp_path: Path
) -> None:
    name, stamps = new_key("-lock"), tmp_path / "stamps"
    holder = lock_cli(mosquitto.url, name, stamps, 120)
    clis.append(holder)
    eventually_sync(lambda: stamps.exists() and "start" in stamps.read_text(), timeout=TIMEOUT)
    holder.proc.send_signal(signal.SIGTERM)
    assert holder.finish() == 143, holder.err  # COMMAND's own status: it ended on the SIGTERM passed on
    assert holder.said(f"released {name}")
    ((_, end),) = windows(stamps).values()
    assert end is not None  # the job ran its SIGTERM handler
    assert sskv("lock", name, "--url", mosquitto.url).stdout == b"free\n"


# -- docs -----------------------------------------------------------------------------------------------------------


def test_the_lock_help_on_the_cli_page_is_the_commands_own(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sskv_mapping.cli import main

    monkeypatch.setenv("COLUMNS", "100")  # the width the page was written at
    text = (REPO_ROOT / "docs" / "cli.md").read_text()
    marker = "<!-- sskv lock --help: checked against the command"
    block = text.split(marker, 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    with pytest.raises(SystemExit):
        main(["lock", "--help"])
    assert block == capsys.readouterr().out.rstrip("\n"), "docs/cli.md: paste the new `sskv lock --help` (COLUMNS=100)"
