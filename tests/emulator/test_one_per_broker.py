"""One state store per broker: an emulator started where one already answers is refused (one line, exit 1), unless
``--allow-second-emulator``; on a broker with nobody subscribed it starts without waiting (PUBACK 0x10)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.emulator.server import PROBE_WAIT_S, serving_already
from tests._support.miniclient import MiniClient
from tests._support.procs import REPO_ROOT, EmulatorProcess, start_emulator


def test_a_second_emulator_on_the_same_broker_is_refused(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: EmulatorProcess
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sskv_mapping.emulator", "--port", str(fresh_mosquitto.port)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=False,
    )
    assert out.returncode == 1, out
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "a state store already serves on" in lines[0], lines
    assert "--allow-second-emulator" in lines[0]
    assert "serving state store on" not in out.stdout


async def test_allow_second_emulator_starts_anyway(
    fresh_mosquitto: MosquittoBroker, fresh_emulator: EmulatorProcess
) -> None:
    with start_emulator(fresh_mosquitto.host, fresh_mosquitto.port, "--allow-second-emulator") as second:
        assert "serving state store on" in second.output
    assert second.returncode == 0


async def test_the_probe_tells_a_served_broker_from_an_empty_one(fresh_mosquitto: MosquittoBroker) -> None:
    settings = ConnectionSettings(host=fresh_mosquitto.host, port=fresh_mosquitto.port)
    started = time.monotonic()
    assert await serving_already(settings) is None
    assert time.monotonic() - started < PROBE_WAIT_S  # PUBACK 0x10: no subscriber, nothing waited for
    with start_emulator(fresh_mosquitto.host, fresh_mosquitto.port):
        said = await serving_already(settings)
        assert said is not None and f"already serves on {settings.url}" in said
        async with MiniClient(fresh_mosquitto.host, fresh_mosquitto.port) as c:  # the probe wrote nothing
            assert (await c.request(b"GET", b"__sskv-emulator-probe")).payload == b"$-1\r\n"
    await asyncio.sleep(0)  # (the emulator is stopped: the broker has no subscriber again)
    assert await serving_already(settings) is None
