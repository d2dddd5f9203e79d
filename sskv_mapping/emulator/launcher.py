"""The emulator as a child process, started and watched the one way every launcher here uses."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Self

from ..errors import StateStoreStartError
from .server import READY_TEXT

__all__ = ["EmulatorProcess", "live_emulators", "start_emulator"]

_LIVE: set[EmulatorProcess] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_all_emulators() -> None:  # a crashed run must not leave an emulator behind
    for proc in live_emulators():
        with contextlib.suppress(Exception):
            proc.kill()


def live_emulators() -> list[EmulatorProcess]:
    """Emulator processes started by this interpreter that have not been stopped (or reaped) yet."""
    with _LIVE_LOCK:
        return [p for p in _LIVE if p.running]


class EmulatorProcess:
    """A ``python -m sskv_mapping.emulator`` child process; stdout and stderr merged into ``output``.

    Example::

        with start_emulator("127.0.0.1", broker.port) as emulator:
            ...
        print(emulator.output)
    """

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        self.argv = argv
        self._env = env
        self._cwd = cwd
        self._lines: list[str] = []
        self._stamps: list[float] = []  # time.monotonic() when each line was read
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._eof = threading.Event()
        self._changed = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    @property
    def output(self) -> str:
        """Everything the process printed so far (stdout and stderr, interleaved as written)."""
        with self._lock:
            return "".join(self._lines)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        return self._process.poll() if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.running else f"exited rc={self.returncode}"
        return f"<EmulatorProcess {' '.join(self.argv[1:])} {state}>"

    def start(self, timeout: float = 15.0) -> Self:
        """Start the process and wait until it prints its ready line (:data:`READY_TEXT`).

        Raises:
            StateStoreStartError: it exited first, or ``timeout`` passed (it is killed then).
        """
        if self._process is not None:
            raise RuntimeError("an EmulatorProcess starts once; make a new one")
        env = dict(os.environ if self._env is None else self._env)
        env["PYTHONUNBUFFERED"] = "1"  # the ready line must not sit in a pipe buffer
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self._cwd,
            close_fds=True,
        )
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._reader = threading.Thread(
            target=self._read_output, name=f"emulator-output-{self._process.pid}", daemon=True
        )
        self._reader.start()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _read_output(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        try:
            for raw in iter(self._process.stdout.readline, b""):
                line = raw.decode("utf-8", errors="replace")
                with self._lock:
                    self._lines.append(line)
                    self._stamps.append(time.monotonic())
                if READY_TEXT in line:
                    self._ready.set()
                    self._changed.set()
        finally:
            self._eof.set()
            self._changed.set()

    def _wait_ready(self, timeout: float) -> None:
        # _changed fires on the ready line and on EOF (the process exited or closed its output).
        self._changed.wait(timeout)
        if self._ready.is_set():
            return
        assert self._process is not None
        if self._eof.is_set():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
            raise StateStoreStartError(
                f"the emulator exited (status {self._process.returncode}) before printing "
                f"{READY_TEXT!r}.\ncommand: {' '.join(self.argv)}\noutput:\n{self.output}"
            )
        raise StateStoreStartError(
            f"the emulator did not print {READY_TEXT!r} within {timeout} s (killed).\n"
            f"command: {' '.join(self.argv)}\noutput so far:\n{self.output}"
        )

    def line_time(self, text: str, after: float, timeout: float = 10.0) -> float | None:
        """When (``time.monotonic()``) the first line containing ``text`` read after ``after`` arrived; waits for
        it up to ``timeout`` s; ``None`` if none came."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                for stamp, line in zip(self._stamps, self._lines, strict=True):
                    if stamp > after and text in line:
                        return stamp
            if self._eof.is_set() or time.monotonic() >= deadline:
                return None
            self._eof.wait(0.01)

    def wait_for_output(self, text: str, timeout: float = 10.0) -> bool:
        """Wait until ``text`` appears in ``output``; False on timeout or when the process exited first."""
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self._eof.is_set():
                return text in self.output
            if time.monotonic() >= deadline:
                return False
            self._eof.wait(0.02)
        return True

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, wait ``timeout`` s, then SIGKILL; returns the exit status. Idempotent."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.send_signal(signal.SIGCONT)  # a paused (SIGSTOP) process must still get the SIGTERM
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
        return self._finish()

    def kill(self) -> int | None:
        """SIGKILL (a crash). Returns the exit status. Idempotent."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.kill()
        return self._finish()

    def _finish(self) -> int | None:
        assert self._process is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=5)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._process.stdout is not None and self._eof.is_set():
            self._process.stdout.close()
        if self._process.poll() is not None:
            with _LIVE_LOCK:
                _LIVE.discard(self)
        return self._process.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_emulator(
    host: str,
    port: int,
    *extra_args: str,
    timeout: float = 15.0,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> EmulatorProcess:
    """Run ``sys.executable -m sskv_mapping.emulator --host HOST --port PORT *extra_args`` and return once it
    serves (it printed :data:`READY_TEXT`, which it does after its request subscription is acknowledged).

    Raises:
        StateStoreStartError: it exited first or never got ready (its output is in the message).
    """
    argv = [sys.executable, "-m", "sskv_mapping.emulator", "--host", host, "--port", str(port), *extra_args]
    return EmulatorProcess(argv, env=env, cwd=cwd).start(timeout=timeout)
