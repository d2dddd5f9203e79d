"""COMMAND of ``sskv lock NAME -- COMMAND``: started in its own process group, stopped as a whole.

Signals and the grace period: docs/design/architecture.md, "The command line and the test helpers".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator, Mapping, Sequence

__all__ = ["FORWARDED", "exit_status", "forward_signals", "signal_group", "start_in_group", "stop_group"]

#: the signals ``sskv`` passes on to COMMAND's process group while it runs
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def start_in_group(command: Sequence[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
    """Start ``command`` as the leader of a new process group (``OSError`` if it cannot be run)."""
    return await asyncio.create_subprocess_exec(*command, env=dict(env), process_group=0)


def signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    """Send ``sig`` to the command's process group (nothing if it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def stop_group(proc: asyncio.subprocess.Process, grace: float) -> int:
    """SIGTERM to the group; SIGKILL to the group once the command has ended or ``grace`` seconds have passed,
    so that nothing of it is left running; returns the command's exit status."""
    exited = asyncio.ensure_future(proc.wait())
    signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), grace)
    # the leader may have ended on SIGTERM while a child of it ignores the signal: the group goes now
    signal_group(proc, signal.SIGKILL)
    return exit_status(await exited)


def exit_status(returncode: int) -> int:
    """A child's return code as a shell reports it: 128 + N when it was ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode


@contextlib.contextmanager
def forward_signals(proc: asyncio.subprocess.Process) -> Iterator[list[int]]:
    """While the command runs, SIGINT/SIGTERM/SIGHUP sent to ``sskv`` go to the command's group instead (the
    signals received are appended to the list yielded); the previous handlers come back afterwards."""
    loop = asyncio.get_running_loop()
    received: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in FORWARDED}

    def forward(sig: int) -> None:
        received.append(sig)
        signal_group(proc, sig)

    for sig in FORWARDED:
        loop.add_signal_handler(sig, forward, sig)
    try:
        yield received
    finally:
        for sig in FORWARDED:
            loop.remove_signal_handler(sig)
            handler = previous[sig]
            if handler is not None:
                signal.signal(sig, handler)
