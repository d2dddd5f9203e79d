"""An ASGI example app served by a real ``uvicorn`` process, the way users run it (``uvicorn[standard]``
brings uvloop, and uvicorn then runs the app on it): for the example apps' uvicorn end-to-end tests.

Example::

    with UvicornServer("fastapi_app.app:app", sskv_url=url, loop="uvloop") as server:
        httpx.get(f"{server.base_url}/")
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sskv_mapping.emulator.broker import free_port

from .procs import REPO_ROOT, ServerProcess, ServerStartError, repo_env

#: what uvicorn logs once it listens: after the app's lifespan startup (the store is connected by then) and after
#: binding the port ("Application startup complete." comes before the bind: a request right after it was refused)
STARTED = "Uvicorn running on "
STOPPED = "Application shutdown complete."
UvicornStartError = ServerStartError


class UvicornServer(ServerProcess):
    """``python -m uvicorn APP --loop LOOP`` on a free loopback port, ``integrations/`` as the app folder and
    ``SSKV_URL`` set; stdout and stderr merged into :attr:`output`. :meth:`stop` sends SIGTERM (uvicorn's graceful
    shutdown: the lifespan's exit closes the store's connections) and returns the exit status."""

    def __init__(self, app: str, *, sskv_url: str, loop: str = "uvloop", startup_timeout: float = 60.0) -> None:
        self.app = app
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        argv = [
            sys.executable, "-m", "uvicorn", app, "--app-dir", str(REPO_ROOT / "integrations"),
            "--host", "127.0.0.1", "--port", str(self.port), "--loop", loop,
            "--lifespan", "on",  # a failing startup exits the process instead of serving without the store
        ]  # fmt: skip
        env = repo_env({**os.environ, "SSKV_URL": sskv_url})
        super().__init__(argv, cwd=REPO_ROOT, env=env, listening=STARTED, startup_timeout=startup_timeout)

    def loaded_modules(self) -> str:
        """The shared objects mapped into the server process (``/proc/PID/maps``): which C extensions it runs."""
        return Path(f"/proc/{self.pid}/maps").read_text()


@contextmanager
def two_servers(app: str, *, sskv_url: str, loop: str = "uvloop") -> Iterator[tuple[UvicornServer, UvicornServer]]:
    """Two processes serving ``app`` on one store, as two deployments behind a load balancer."""
    with UvicornServer(app, sskv_url=sskv_url, loop=loop) as a, UvicornServer(app, sskv_url=sskv_url, loop=loop) as b:
        yield a, b
