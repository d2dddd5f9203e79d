"""``sskv keys PATTERN`` as a real subprocess against a real mosquitto + emulator: one key a line, ``--count``,
``--json``, exact bytes, and the errors of the other commands (2 usage, 3 connection, 4 service, here an
emulator started with ``--no-scan``)."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from sskv_mapping import escape_glob
from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker, free_port
from tests._support.procs import start_emulator

from .test_cli import EXIT_CONNECTION, EXIT_OK, EXIT_SERVICE, EXIT_USAGE, one_line_error, run_all, sskv

pytestmark = pytest.mark.broker


def test_keys_lists_one_key_a_line_and_counts(url: str, store: StateStoreClient) -> None:
    ns = f"clikeys[{uuid.uuid4().hex[:8]}]*/"
    names = [f"{ns}{i}" for i in range(5)] + [f"{ns}sub/x"]
    for name in names:
        store.set(name, b"v")
    binary = ns.encode() + b"bin-\xff"  # not UTF-8
    store.set(binary, b"v")
    pattern = escape_glob(ns) + b"*"
    listing, count, as_json, narrow, none = run_all(
        ["keys", "--url", url, pattern],
        ["keys", "--url", url, "--count", pattern],
        ["keys", "--url", url, "--json", pattern],
        ["keys", "--url", url, escape_glob(ns) + b"[0-2]"],
        ["keys", "--url", url, escape_glob(ns) + b"nothing*"],
    )
    for done in (listing, count, as_json, narrow, none):
        assert done.returncode == EXIT_OK, done.stderr
        assert done.stderr == b""
    expected = sorted([n.encode() for n in names] + [binary])
    assert sorted(listing.stdout.splitlines()) == expected  # exact bytes, a non-UTF-8 key included
    assert count.stdout == b"7\n"
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert sorted(r["key"] for r in records if "key" in r) == sorted(names)
    assert [r["key_base64"] for r in records if "key_base64" in r] == [base64.b64encode(binary).decode()]
    assert sorted(narrow.stdout.splitlines()) == [f"{ns}{i}".encode() for i in range(3)]
    assert none.stdout == b""


def test_count_as_json(url: str, store: StateStoreClient) -> None:
    ns = f"clicount-{uuid.uuid4().hex[:8]}/"
    store.set(ns + "a", b"v")
    done = sskv("keys", "--url", url, "--count", "--json", ns + "*")
    assert done.returncode == EXIT_OK
    assert json.loads(done.stdout) == {"pattern": ns + "*", "count": 1}


def test_usage_and_connection_errors(url: str) -> None:
    down = f"mqtt://127.0.0.1:{free_port()}"
    empty, bad_listing, unreachable = run_all(
        ["keys", "--url", url, ""],
        ["keys", "--url", url, "--listing-timeout", "-1", "*"],
        ["keys", "--url", down, "*"],
    )
    assert empty.returncode == EXIT_USAGE and "ConfigurationError" in one_line_error(empty)
    assert bad_listing.returncode == EXIT_USAGE and "--listing-timeout" in one_line_error(bad_listing)
    assert unreachable.returncode == EXIT_CONNECTION and "BrokerConnectError" in one_line_error(unreachable)
    assert unreachable.stdout == b""


def test_a_service_without_scan_exits_4(fresh_mosquitto: MosquittoBroker) -> None:
    with start_emulator(fresh_mosquitto.host, fresh_mosquitto.port, "--no-scan"):
        done = sskv("keys", "--url", fresh_mosquitto.url, "*")
        assert done.returncode == EXIT_SERVICE
        line = one_line_error(done)
        assert "UnsupportedCommandError" in line and "unknown command" in line
        as_json = sskv("keys", "--url", fresh_mosquitto.url, "--json", "*")
        assert json.loads(as_json.stdout.splitlines()[0])["error"] == "UnsupportedCommandError"


def test_help_mentions_the_glob_rules() -> None:
    done = sskv("keys", "--help")
    assert done.returncode == 0
    for word in (b"--count", b"--listing-timeout", b"[!abc]", b"[*]", b"--json"):
        assert word in done.stdout
