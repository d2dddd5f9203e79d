"""The ``sskv`` command as a real subprocess against the session's mosquitto + emulator process.

Exit codes: 0 ok, 1 not found / not applied, 2 usage or bad argument, 3 connection, 4 service error,
5 protocol error, 6 lock (sskv_mapping._cli_client).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence

import pytest

from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker, free_port

pytestmark = pytest.mark.broker

TIMEOUT = 60


def sskv(*args: str | bytes, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    argv: Sequence[str | bytes] = [sys.executable, "-m", "sskv_mapping.cli", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=TIMEOUT, check=False)


@pytest.fixture
def url(mosquitto: MosquittoBroker, emulator: object) -> str:
    return mosquitto.url


@pytest.fixture
def store(mosquitto: MosquittoBroker, emulator: object) -> Iterator[StateStoreClient]:
    client = StateStoreClient(mosquitto.host, mosquitto.port, timeout=5)
    client.connect()
    yield client
    client.close()


def key() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("command", [[], ["get"], ["set"], ["del"], ["vdel"], ["watch"], ["lock"], ["emulator"]])
def test_help(command: list[str]) -> None:
    done = sskv(*command, "--help")
    assert done.returncode == 0 and b"usage: sskv" in done.stdout


def test_set_get_del_round_trip(url: str, store: StateStoreClient) -> None:
    k = key()
    done = sskv("set", "--url", url, k, "hello")
    assert done.returncode == 0 and done.stdout.startswith(b"OK"), done
    entry = store.get(k)
    assert entry is not None and entry.value == b"hello"
    assert str(entry.version).encode() in done.stdout  # the version it printed is the stored one
    assert sskv("get", "--url", url, k).stdout == b"hello\n"
    record = json.loads(sskv("get", "--url", url, k, "--json").stdout)
    assert record == {"key": k, "found": True, "value": "hello", "version": str(entry.version)}
    assert sskv("vdel", "--url", url, k, "other").returncode == 1  # value differs: not deleted
    assert store.get(k) is not None
    assert sskv("del", "--url", url, k).returncode == 0
    assert store.get(k) is None


def test_a_missing_key_and_an_unreachable_broker_are_different_outcomes(url: str) -> None:
    missing = sskv("get", "--url", url, key())
    assert missing.returncode == 1 and missing.stdout.startswith(b"(not found)")
    down = sskv("get", "--url", f"mqtt://127.0.0.1:{free_port()}", key())
    assert down.returncode == 3 and b"BrokerConnectError" in down.stderr
    assert down.stdout == b"" and b"Traceback" not in down.stderr


def test_conditions_ttl_and_stdin(url: str, store: StateStoreClient) -> None:
    k = key()
    assert sskv("set", "--url", url, k, "-", stdin=b"from\x00stdin").returncode == 0
    assert store.get(k).value == b"from\x00stdin"  # type: ignore[union-attr]
    assert sskv("set", "--url", url, "--nx", k, "again").returncode == 1  # exists: not applied
    assert sskv("set", "--url", url, "--ttl", "600", k, "expiring").returncode == 0
    assert store.get(k).value == b"expiring"  # type: ignore[union-attr]
    store.delete(k)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "", "v"], b"empty"),
        (["set", "K", "v", "--ttl", "-1"], b"ttl"),
        (["set", "K", "v", "--fencing-token", "not-an-hlc"], b"--fencing-token"),
        (["set", "K", "v", "--fencing-token", "1:2:\udcff"], b"--fencing-token"),
    ],
)
def test_bad_arguments_are_usage_errors_and_write_nothing(
    url: str, store: StateStoreClient, args: list[str], message: bytes
) -> None:
    k = key()
    command, *rest = [k if a == "K" else a for a in args]
    done = sskv(command, "--url", url, *rest)
    assert done.returncode == 2, done
    assert message in done.stderr and b"Traceback" not in done.stderr
    assert store.get(k) is None


def test_argv_bytes_that_are_not_utf8_are_stored_exactly(url: str, store: StateStoreClient) -> None:
    """Non-UTF-8 argv reaches Python as lone surrogates; the CLI stores the original bytes (no traceback)."""
    k = key().encode() + b"-\xff"
    done = sskv("set", "--url", url, k, b"value-\xfe")
    assert done.returncode == 0, done.stderr
    entry = store.get(k)
    assert entry is not None and entry.value == b"value-\xfe"
    shown = sskv("get", "--url", url, k)
    assert shown.returncode == 0 and b"Traceback" not in shown.stderr
    store.delete(k)


def test_watch_prints_changes_made_by_another_client(url: str, store: StateStoreClient) -> None:
    k = key()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "sskv_mapping.cli", "watch", "--url", url, k, "--count", "2", "--json"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as watcher:
        try:
            assert watcher.stdout is not None and watcher.stderr is not None
            ready = watcher.stderr.readline()  # printed once the KEYNOTIFY is registered
            assert ready.startswith(b"watching"), ready
            store.set(k, b"one")
            store.delete(k)
            out, err = watcher.communicate(timeout=TIMEOUT)
        finally:
            if watcher.poll() is None:
                watcher.kill()
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert [(e["key"], e["op"], e["value"]) for e in events] == [(k, "SET", "one"), (k, "DELETE", None)]
