"""Child processes for tests: the emulator process (``sskv_mapping.testing``'s launcher, run on this checkout), and a
census of our own children.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from sskv_mapping.testing import EmulatorProcess, live_emulators
from sskv_mapping.testing import start_emulator as _start

__all__ = [
    "REPO_ROOT",
    "EmulatorProcess",
    "child_processes",
    "kill_child",
    "live_emulators",
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


def repo_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with this checkout first on ``PYTHONPATH``."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env
