"""Forked workers as pre-forking servers make them: ``os.fork()`` children of a process that used an adapter
(uWSGI's way), and ``gunicorn --preload -w 2`` serving an example app (tests of issue 37, finding 1)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .procs import REPO_ROOT, ServerProcess

__all__ = ["UVICORN_WORKER_CONF", "Gunicorn", "forked_workers", "gunicorn_config", "uvicorn_workers"]

#: A gunicorn config (``-c``) for uvicorn workers: their access lines go through gunicorn's access log handlers but
#: not its ``--access-logformat``; this puts the worker's pid in front of them as that format does.
UVICORN_WORKER_CONF = """
import logging

def post_worker_init(worker):
    for handler in logging.getLogger("uvicorn.access").handlers:
        handler.setFormatter(logging.Formatter("ACCESS <%(process)d> %(message)s"))
"""


def gunicorn_config(directory: Path, text: str) -> Path:
    """Write ``text`` as a gunicorn config module in ``directory``; its path, for ``-c``."""
    path = (directory / "gunicorn_conf").with_suffix(".py")
    path.write_text(text)
    return path


def forked_workers(n: int, work: Callable[[], dict[str, Any]], timeout: float = 60.0) -> list[dict[str, Any]]:
    """Fork ``n`` children that run ``work()`` together (released at once, after every fork) and return what each
    reported (``{"error": ...}`` if it raised). The children leave with ``os._exit``."""
    children: list[tuple[int, int, int]] = []
    for _ in range(n):
        go_r, go_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports over its pipe
            code = 0
            try:
                os.close(go_w)
                os.close(out_r)
                os.read(go_r, 1)
                try:
                    report = work()
                except BaseException as exc:
                    report = {"error": f"{type(exc).__name__}: {exc}"}
                os.write(out_w, json.dumps(report, default=str).encode())
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(go_r)
        os.close(out_w)
        children.append((pid, go_w, out_r))
    for _, go_w, _ in children:  # every child released together: they run side by side
        os.write(go_w, b"x")
        os.close(go_w)
    reports = []
    deadline = time.monotonic() + timeout
    for pid, _, out_r in children:
        chunks = []
        with os.fdopen(out_r, "rb") as out:
            while chunk := out.read(65536):
                chunks.append(chunk)
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise TimeoutError(f"forked worker {pid} did not finish")
            time.sleep(0.01)
        assert os.waitstatus_to_exitcode(done[1]) == 0, f"worker {pid} failed to report"
        reports.append(json.loads(b"".join(chunks)))
    return reports


class Gunicorn(ServerProcess):
    """``gunicorn --preload -w 2`` serving ``app`` on a free loopback port; its access log names each worker."""

    def __init__(self, app: str, cwd: Path, env: dict[str, str], *extra: str) -> None:
        argv = [
            sys.executable, "-m", "gunicorn", "--preload", "-w", "2", "-b", "127.0.0.1:0",
            "--access-logfile", "-", "--access-logformat", "ACCESS %(p)s %(s)s %(m)s %(U)s", *extra, app,
        ]  # fmt: skip
        super().__init__(argv, cwd=cwd, env=env, listening=r"Listening at: (http://127\.0\.0\.1:\d+)")

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, str]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def served_by(self) -> set[str]:
        """The worker pids the access log names so far."""
        return set(re.findall(r"^ACCESS <(\d+)>", self.output, re.MULTILINE))

    def until_both_workers_served(self, call: Callable[[], tuple[int, str]], deadline: float = 60.0) -> list[int]:
        """Call ``call()`` from four threads until the access log shows two workers served (or ``deadline``), and
        check that both did and every answer was a 200; every status seen, in order."""
        statuses: list[int] = []
        end = time.monotonic() + deadline

        def loop() -> None:
            while time.monotonic() < end and len(self.served_by()) < 2:
                statuses.append(call()[0])

        with ThreadPoolExecutor(4) as pool:
            for future in [pool.submit(loop) for _ in range(4)]:
                future.result()
        assert len(self.served_by()) == 2, self.output
        assert statuses and set(statuses) == {200}, self.output
        return statuses


def uvicorn_workers(app: str, directory: Path) -> Gunicorn:
    """:class:`Gunicorn` with uvicorn workers (``UVICORN_WORKER_CONF``, written in ``directory``) serving an ASGI
    example app of ``integrations/``."""
    conf = gunicorn_config(directory, UVICORN_WORKER_CONF)
    worker = "uvicorn.workers.UvicornWorker"
    return Gunicorn(app, REPO_ROOT / "integrations", dict(os.environ), "-k", worker, "-c", str(conf))
