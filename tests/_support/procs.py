"""Child processes for tests: the emulator process (``sskv_mapping.testing``'s launcher, run on this checkout), a
web server process (:class:`ServerProcess`), and a census of our own children.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Self

from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.testing import EmulatorProcess, live_emulators
from sskv_mapping.testing import start_emulator as _start

__all__ = [
    "REPO_ROOT",
    "EmulatorProcess",
    "ServerProcess",
    "ServerStartError",
    "child_processes",
    "kill_child",
    "live_emulators",
    "private_store",
    "repo_env",
    "start_emulator",
]

REPO_ROOT = Path(__file__).resolve().parents[2]


def child_processes(name: str | None = None) -> list[tuple[int, str]]:
    """``(pid, command name)`` of this process's live children (Linux ``/proc``), optionally by name.

    Zombies count: a child that exited but was never waited for is a leak too.
    """
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may contain spaces and parentheses, so split at the last ")".
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == me and (name is None or comm == name):
            found.append((int(entry.name), comm))
    return found


def kill_child(pid: int) -> None:
    """SIGKILL one of our children and reap it (no zombie left)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def start_emulator(
    host: str,
    port: int,
    *extra_args: str,
    timeout: float = 15.0,
    env: dict[str, str] | None = None,
) -> EmulatorProcess:
    """:func:`sskv_mapping.testing.start_emulator` with this checkout first on the child's ``sys.path`` (a worktree's
    tests run the worktree's emulator, whatever the venv installed)."""
    return _start(host, port, *extra_args, timeout=timeout, env=repo_env(env), cwd=str(REPO_ROOT))


@contextlib.contextmanager
def private_store() -> Iterator[str]:
    """The URL of a private mosquitto with the emulator process serving it; both stopped on exit."""
    with MosquittoBroker() as broker, start_emulator(broker.host, broker.port):
        yield f"mqtt://{broker.host}:{broker.port}"


def repo_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with this checkout first on ``PYTHONPATH``."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


class ServerStartError(RuntimeError):
    """A server process exited or did not say it listens in time; the message has its output."""


class ServerProcess:
    """A server child process (uvicorn, gunicorn, an example site) with its stdout and stderr merged and read all
    along (a full pipe would block it). :meth:`start` returns once a line matches ``listening`` (its first group, if
    any, is :attr:`url`); :meth:`stop` sends SIGTERM (a graceful shutdown), kills it after ``timeout`` and returns
    its exit status. A context manager: started on entry, stopped on exit."""

    def __init__(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], listening: str, startup_timeout: float = 60.0
    ) -> None:
        self.argv = argv
        self.url = ""
        self._cwd, self._env = cwd, {**env, "PYTHONUNBUFFERED": "1"}
        self._listening, self._startup_timeout = re.compile(listening), startup_timeout
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._changed = threading.Event()  # the listening line, or the end of the output
        self._started = threading.Event()
        self._eof = threading.Event()
        self._process: subprocess.Popen[str] | None = None

    @property
    def output(self) -> str:
        with self._lock:
            return "".join(self._lines)

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("not started")
        return self._process.pid

    def start(self) -> Self:
        self._process = subprocess.Popen(
            self.argv, cwd=self._cwd, env=self._env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, errors="replace",
        )  # fmt: skip
        threading.Thread(target=self._read, name=f"server-output-{self._process.pid}", daemon=True).start()
        self._changed.wait(self._startup_timeout)
        if not self._started.is_set():
            self._kill()
            what = "exited" if self._eof.is_set() else f"did not say it listens within {self._startup_timeout} s"
            raise ServerStartError(f"the server {what}.\ncommand: {' '.join(self.argv)}\noutput:\n{self.output}")
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        try:
            for line in self._process.stdout:
                with self._lock:
                    self._lines.append(line)
                found = None if self._started.is_set() else self._listening.search(line)
                if found:
                    self.url = found.group(1) if found.re.groups else ""
                    self._started.set()
                    self._changed.set()
        finally:
            self._eof.set()
            self._changed.set()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait for the exit (killed after ``timeout``); the exit status."""
        if self._process is None:
            raise RuntimeError("not started")
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        self._eof.wait(10)  # the reader has the last lines
        return self._process.returncode

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
