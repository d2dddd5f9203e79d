"""An ASGI example app served by a real ``uvicorn`` process, the way users run it (``uvicorn[standard]``
brings uvloop, and uvicorn then runs the app on it): for the example apps' uvicorn end-to-end tests.

Example::

    with UvicornServer("fastapi_app.app:app", sskv_url=url, loop="uvloop") as server:
        httpx.get(f"{server.base_url}/")
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Self

from sskv_mapping.emulator.broker import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
#: what uvicorn logs once it listens: after the app's lifespan startup (the store is connected by then) and after
#: binding the port ("Application startup complete." comes before the bind: a request right after it was refused)
STARTED = "Uvicorn running on "
STOPPED = "Application shutdown complete."


class UvicornStartError(RuntimeError):
    """uvicorn exited or did not finish the app's startup in time; the message has its output."""


class UvicornServer:
    """``python -m uvicorn APP --loop LOOP`` on a free loopback port, ``integrations/`` as the app folder and
    ``SSKV_URL`` set; stdout and stderr merged into :attr:`output`. :meth:`stop` sends SIGTERM (uvicorn's graceful
    shutdown: the lifespan's exit closes the store's connections) and returns the exit status."""

    def __init__(self, app: str, *, sskv_url: str, loop: str = "uvloop", startup_timeout: float = 60.0) -> None:
        self.app = app
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.argv = [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--app-dir",
            str(REPO_ROOT / "integrations"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--loop",
            loop,
            "--lifespan",
            "on",  # a failing startup exits the process instead of serving without the store
        ]
        self._sskv_url = sskv_url
        self._startup_timeout = startup_timeout
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._changed = threading.Event()  # the startup line, or EOF
        self._eof = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def output(self) -> str:
        with self._lock:
            return "".join(self._lines)

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("not started")
        return self._process.pid

    def loaded_modules(self) -> str:
        """The shared objects mapped into the server process (``/proc/PID/maps``): which C extensions it runs."""
        return Path(f"/proc/{self.pid}/maps").read_text()

    def start(self) -> Self:
        env = dict(os.environ, SSKV_URL=self._sskv_url, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO_ROOT,
        )
        threading.Thread(target=self._read, name=f"uvicorn-output-{self._process.pid}", daemon=True).start()
        self._changed.wait(self._startup_timeout)
        if not self._started.is_set():
            self._kill()
            what = "exited" if self._eof.is_set() else f"did not log {STARTED!r} within {self._startup_timeout} s"
            raise UvicornStartError(f"uvicorn {what}.\ncommand: {' '.join(self.argv)}\noutput:\n{self.output}")
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        try:
            for raw in iter(self._process.stdout.readline, b""):
                line = raw.decode("utf-8", errors="replace")
                with self._lock:
                    self._lines.append(line)
                if STARTED in line:
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

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
