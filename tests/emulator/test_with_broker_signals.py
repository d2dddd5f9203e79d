"""``sskv emulator --with-broker`` stops the mosquitto it started on SIGTERM, SIGINT and SIGHUP (a closed terminal)."""

from __future__ import annotations

import os
import signal
import socket
import sys

import pytest

from sskv_mapping.emulator.broker import free_port
from tests._support.procs import REPO_ROOT, EmulatorProcess, repo_env


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_stops_the_emulator_and_its_broker(sig: signal.Signals) -> None:
    port = free_port()
    proc = EmulatorProcess(
        [sys.executable, "-m", "sskv_mapping.cli", "emulator", "--with-broker", "--broker-port", str(port)],
        env=repo_env(),
        cwd=str(REPO_ROOT),
    )
    proc.start()
    try:
        assert _accepts(port)
        assert proc.pid is not None
        os.kill(proc.pid, sig)
        assert proc._process is not None
        proc._process.wait(timeout=30)  # its own exit, not stop()'s SIGTERM
    finally:
        status = proc.stop()
    assert status == 0, proc.output
    assert "stopped" in proc.output and "Traceback" not in proc.output
    assert not _accepts(port)  # the private mosquitto went with it
