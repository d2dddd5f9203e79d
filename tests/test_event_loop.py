"""The loop the suites run on is the one ``SSKV_LOOP`` asks for (so ``nox -s uvloop`` cannot quietly test
asyncio's loop), and the client works on uvloop in every run, whichever loop the rest of the run uses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from sskv_mapping._blocking import LoopThread
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.procs import EmulatorProcess


def _is_uvloop(loop: asyncio.AbstractEventLoop) -> bool:
    return type(loop).__module__.split(".")[0] == "uvloop"


async def test_the_tests_run_on_the_selected_loop() -> None:
    wanted = os.environ.get("SSKV_LOOP", "").strip() or "asyncio"
    assert _is_uvloop(asyncio.get_running_loop()) == (wanted == "uvloop")


def test_the_blocking_twins_loop_thread_follows_the_policy() -> None:
    """The loop thread makes its loop with ``asyncio.new_event_loop()``: uvloop's when its policy is set."""
    wanted = os.environ.get("SSKV_LOOP", "").strip() or "asyncio"
    thread = LoopThread(name="sskv-test-loop")
    try:
        assert _is_uvloop(thread.loop) == (wanted == "uvloop")
    finally:
        thread.loop.call_soon_threadsafe(thread.loop.stop)
        thread.thread.join(10)


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop has no Windows build")
def test_client_round_trip_on_uvloop(mosquitto: MosquittoBroker, emulator: EmulatorProcess) -> None:
    """uvloop's TCPTransport is no asyncio.Transport subclass: connecting used to fail an isinstance assert."""
    uvloop = pytest.importorskip("uvloop")

    async def round_trip() -> tuple[bytes | None, bool]:
        async with AsyncStateStoreClient(mosquitto.host, mosquitto.port) as client:
            await client.set("uvloop-round-trip", b"v")
            entry = await client.get("uvloop-round-trip")
            await client.delete("uvloop-round-trip")
            return (entry.value if entry is not None else None), _is_uvloop(asyncio.get_running_loop())

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        value, on_uvloop = runner.run(round_trip())
    assert on_uvloop
    assert value == b"v"


BLOCKING_ON_UVLOOP = """
import asyncio, sys, uvloop
asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())  # before the first blocking call
from sskv_mapping import StateStoreClient
from sskv_mapping._blocking import get_loop_thread
with StateStoreClient(sys.argv[1], int(sys.argv[2])) as client:
    client.set("uvloop-blocking", b"w")
    entry = client.get("uvloop-blocking")
    client.delete("uvloop-blocking")
print(type(get_loop_thread().loop).__module__, entry.value if entry is not None else None)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop has no Windows build")
def test_blocking_client_on_a_uvloop_loop_thread(mosquitto: MosquittoBroker, emulator: EmulatorProcess) -> None:
    """A process that sets uvloop's policy before its first blocking call gets its loop thread on uvloop (a fresh
    process: this one's loop thread may already exist)."""
    pytest.importorskip("uvloop")
    done = subprocess.run(
        [sys.executable, "-c", BLOCKING_ON_UVLOOP, mosquitto.host, str(mosquitto.port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["uvloop", "b'w'"]
