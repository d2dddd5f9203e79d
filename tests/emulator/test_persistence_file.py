"""``--persist-file``: a file that cannot be written stops the emulator at start (exit 2, one line); a write that
fails later is logged at ERROR, counted, and tried again, never silent."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from sskv_mapping._transport.settings import ConnectionSettings
from sskv_mapping.emulator.broker import MosquittoBroker, free_port
from sskv_mapping.emulator.server import EmulatorServer
from sskv_mapping.errors import ConfigurationError
from tests._support.miniclient import MiniClient
from tests._support.procs import REPO_ROOT
from tests._support.waiting import eventually

OK = b"+OK\r\n"
PERSIST = [("aio-persistence", "true")]


def _unusable(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """A persistence path that cannot be written, and what the error must name."""
    if kind == "missing directory":
        return tmp_path / "nonexistent" / "dir" / "f.json", "does not exist"
    if kind == "a directory":
        return tmp_path, "is a directory"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing directory", "a directory"])
@pytest.mark.parametrize("command", ["emulator module", "sskv emulator"])
def test_a_persist_file_that_cannot_be_written_stops_the_emulator_at_start(
    kind: str, command: str, tmp_path: Path
) -> None:
    """Refused before connecting (no broker here): exit 2 and one line naming the path and why."""
    path, why = _unusable(kind, tmp_path)
    argv = (
        [sys.executable, "-m", "sskv_mapping.emulator"]
        if command == "emulator module"
        else [sys.executable, "-m", "sskv_mapping.cli", "emulator"]
    )
    out = subprocess.run(
        [*argv, "--port", str(free_port()), "--persist-file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=False,
    )
    assert out.returncode == 2, out
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sskv emulator: "), lines
    assert str(path) in lines[0] and why in lines[0]
    assert "serving state store on" not in out.stdout


async def test_the_server_refuses_an_unwritable_persist_file_before_serving(tmp_path: Path) -> None:
    path, why = _unusable("missing directory", tmp_path)
    server = EmulatorServer(ConnectionSettings(host="127.0.0.1", port=free_port()), persist_file=path)
    with pytest.raises(ConfigurationError, match=why):
        await asyncio.wait_for(server.run(), 15)
    assert not server.ready


async def test_a_failed_write_is_logged_counted_and_retried(
    fresh_mosquitto: MosquittoBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "store.json"
    host, port = fresh_mosquitto.host, fresh_mosquitto.port
    server = EmulatorServer(ConnectionSettings(host=host, port=port), persist_file=path)
    task = asyncio.create_task(server.run())
    caplog.set_level(logging.WARNING, logger="sskv_mapping.emulator.server")
    try:
        await asyncio.wait_for(server.wait_ready(), 15)
        async with MiniClient(host, port) as c:
            assert (await c.request(b"SET", b"first", b"1", extra=PERSIST)).payload == OK
            await eventually(lambda: path.exists(), 10)
            folder.rename(tmp_path / "moved")  # the directory goes away under the running emulator
            assert (await c.request(b"SET", b"second", b"2", extra=PERSIST)).payload == OK
            await eventually(lambda: server.stats["persist_failures"] >= 1, 10)
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert errors and "NOT saved" in errors[0].getMessage() and str(path) in errors[0].getMessage()
            folder.mkdir()  # it comes back: the retry writes what was not saved
            await eventually(lambda: path.exists(), 10)
        saved = json.loads(path.read_text())
        assert len(saved["entries"]) == 2
        await eventually(lambda: any("again" in r.getMessage() for r in caplog.records), 10)
    finally:
        server.stop()
        await asyncio.wait_for(task, 15)
