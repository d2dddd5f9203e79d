"""``sskv get|set|del|vdel|watch|lock`` as a real subprocess against the session's mosquitto + emulator.

Every command runs as ``python -m sskv_mapping.cli ...`` with a timeout, its SSKV_* environment cleared, and
is checked against what a library client sees in the store. Exit codes (README, ``_cli_client``): 0 ok,
1 not found / not applied / lock busy, 2 usage, 3 connection, 4 service error, 5 protocol, 6 lock error;
``lock -- COMMAND`` exits with COMMAND's code (126/127 if it cannot be run).

Independent commands run in parallel (``run_all``); a watcher is synchronised on the lines it prints.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker, MosquittoStartError, free_port
from sskv_mapping.lock import LeasedLock
from tests._support.procs import REPO_ROOT, start_emulator

pytestmark = pytest.mark.broker

TIMEOUT = 30.0  # per subprocess; a healthy call takes well under a second
SSKV = [sys.executable, "-m", "sskv_mapping.cli"]
Arg = str | bytes

EXIT_OK, EXIT_MISS, EXIT_USAGE, EXIT_CONNECTION, EXIT_SERVICE = 0, 1, 2, 3, 4


def clean_env(**extra: str) -> dict[str, str]:
    """The test environment without SSKV_* (a developer's SSKV_URL must not redirect the CLI)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSKV_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def sskv(
    *args: Arg, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    argv: list[Arg] = [*SSKV, *args]
    return subprocess.run(
        argv,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
        env=env if env is not None else clean_env(),
        cwd=REPO_ROOT,
    )


def run_all(*calls: Sequence[Arg]) -> list[subprocess.CompletedProcess[bytes]]:
    """Run independent ``sskv`` calls in parallel; results in the order given."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda call: sskv(*call), calls))


def no_traceback(done: subprocess.CompletedProcess[bytes]) -> None:
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")


def one_line_error(done: subprocess.CompletedProcess[bytes]) -> str:
    """The single ``sskv: ...`` line a failed command prints on stderr."""
    no_traceback(done)
    lines = done.stderr.decode(errors="replace").splitlines()
    assert len(lines) == 1 and lines[0].startswith("sskv: "), lines
    return lines[0]


def new_key(tag: str = "") -> str:
    return f"cli{tag}-{uuid.uuid4().hex[:12]}"


# -- help ---------------------------------------------------------------------------------------------------


def test_help_of_the_command_and_every_subcommand() -> None:
    expected = {
        (): [b"get", b"set", b"del", b"vdel", b"keys", b"watch", b"lock", b"emulator"],
        ("get",): [b"--verbose", b"--json", b"--url", b"--password-env"],
        ("set",): [b"--nx", b"--nex", b"--ttl", b"--fencing-token", b"--persist", b"standard input"],
        ("del",): [b"--fencing-token"],
        ("vdel",): [b"--fencing-token"],
        ("keys",): [b"--count", b"--listing-timeout"],
        ("watch",): [b"--count"],
        ("lock",): [b"--lease", b"--wait", b"SSKV_FENCING_TOKEN"],
        ("emulator",): [b"--with-broker", b"--broker-port", b"--scan-page-size", b"--scan-empty-pages", b"--no-scan"],
    }
    results = run_all(*[[*command, "--help"] for command in expected], ["--version"])
    for (command, words), done in zip(expected.items(), results, strict=False):
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.startswith(b"usage: sskv " + " ".join(command).encode()), done.stdout[:80]
        for word in words:
            assert word in done.stdout, (command, word)
        assert done.stderr == b""
    version = results[-1]
    assert version.returncode == 0 and version.stdout.startswith(b"sskv ")


@pytest.mark.parametrize(
    "command", [[], ["get"], ["set"], ["del"], ["vdel"], ["keys"], ["watch"], ["lock"], ["emulator"]]
)
def test_help(command: list[str]) -> None:
    done = sskv(*command, "--help")
    assert done.returncode == 0 and b"usage: sskv" in done.stdout


def test_help_does_not_print_a_password_from_sskv_url() -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    done = sskv("get", "--help", env=clean_env(SSKV_URL=f"mqtt://alice:{secret}@127.0.0.1:1883"))
    assert done.returncode == 0 and b"SSKV_URL" in done.stdout
    assert secret.encode() not in done.stdout + done.stderr


# -- set / get / del / vdel -------------------------------------------------------------------------------------


def test_set_get_vdel_del_round_trip(url: str, store: StateStoreClient) -> None:
    k = new_key()
    done = sskv("set", "--url", url, k, "hello")
    assert done.returncode == EXIT_OK and done.stderr == b"", done
    entry = store.get(k)
    assert entry is not None and entry.value == b"hello"
    assert done.stdout == f"OK\t(version {entry.version})\n".encode()  # the version the store has

    plain, verbose, as_json = run_all(
        ["get", "--url", url, k], ["get", "--url", url, "-v", k], ["get", "--url", url, k, "--json"]
    )  # an option may come after the key too
    assert (plain.returncode, plain.stdout) == (EXIT_OK, b"hello\n")
    assert verbose.stdout == f"hello\t(version {entry.version})\n".encode()
    assert json.loads(as_json.stdout) == {"key": k, "found": True, "value": "hello", "version": str(entry.version)}

    again = sskv("set", "--url", url, "--json", k, "grüße ✓")
    record = json.loads(again.stdout)
    assert again.returncode == EXIT_OK and record["key"] == k and record["applied"] is True
    entry = store.get(k)
    assert entry is not None and entry.value == "grüße ✓".encode() and record["version"] == str(entry.version)
    assert sskv("get", "--url", url, k).stdout == "grüße ✓\n".encode()

    mismatch = sskv("vdel", "--url", url, k, "hello")
    assert (mismatch.returncode, mismatch.stdout, mismatch.stderr) == (
        EXIT_MISS,
        b"",
        b"(not deleted: the value differs)\n",  # a status: stdout carries only data
    )
    assert json.loads(sskv("vdel", "--url", url, "--json", k, "hello").stdout) == {
        "key": k,
        "result": "value_mismatch",
    }
    assert store.get(k) is not None
    vdel = sskv("vdel", "--url", url, "--json", k, "grüße ✓")
    assert vdel.returncode == EXIT_OK and json.loads(vdel.stdout) == {"key": k, "result": "deleted"}
    assert store.get(k) is None

    store.set(k, b"x")
    deleted, gone, gone_json, vdel_gone = run_all(
        ["del", "--url", url, k],
        ["del", "--url", url, new_key()],
        ["del", "--url", url, "--json", f"{k}-never"],
        ["vdel", "--url", url, "--json", f"{k}-never", "x"],
    )
    assert (deleted.returncode, deleted.stdout) == (EXIT_OK, b"deleted\n")
    assert store.get(k) is None
    assert (gone.returncode, gone.stdout) == (EXIT_MISS, b"") and gone.stderr.startswith(b"(not found) ")
    assert (gone_json.returncode, json.loads(gone_json.stdout)) == (EXIT_MISS, {"key": f"{k}-never", "deleted": False})
    assert (vdel_gone.returncode, json.loads(vdel_gone.stdout)) == (
        EXIT_MISS,
        {"key": f"{k}-never", "result": "not_found"},
    )


def test_a_missing_key_exits_1_and_says_so(url: str) -> None:
    k = new_key()
    human, as_json = run_all(["get", "--url", url, k], ["get", "--url", url, "--json", k])
    assert (human.returncode, human.stdout, human.stderr) == (EXIT_MISS, b"", f"(not found) {k}\n".encode())
    assert (as_json.returncode, json.loads(as_json.stdout), as_json.stderr) == (
        EXIT_MISS,
        {"key": k, "found": False},
        b"",
    )


def test_ttl_is_applied_and_the_key_expires(url: str, store: StateStoreClient) -> None:
    k = new_key()
    with store.watch(k) as watch:
        done = sskv("set", "--url", url, "--ttl", "0.3", k, "short-lived")
        assert done.returncode == EXIT_OK, done
        first = watch.next(timeout=TIMEOUT)
        assert (first.op.value, first.value) == ("SET", b"short-lived")
        expired = watch.next(timeout=TIMEOUT)  # the service's DELETE on expiry
        assert expired.op.value == "DELETE"
    assert store.get(k) is None
    assert sskv("set", "--url", url, "--ttl", "600", k, "long-lived").returncode == EXIT_OK
    entry = store.get(k)
    assert entry is not None and entry.value == b"long-lived"
    store.delete(k)


def test_nx_and_nex_not_applied_exit_1_and_leave_the_value(url: str, store: StateStoreClient) -> None:
    k, fresh = new_key(), new_key()
    store.set(k, b"first")
    nx, nx_json, nex_other, nex_same, nx_new, both = run_all(
        ["set", "--url", url, "--nx", k, "second"],
        ["set", "--url", url, "--nx", "--json", k, "second"],
        ["set", "--url", url, "--nex", k, "other"],
        ["set", "--url", url, "--nex", k, "first"],
        ["set", "--url", url, "--nx", fresh, "new"],
        ["set", "--url", url, "--nx", "--nex", k, "v"],
    )
    assert (nx.returncode, nx.stdout, nx.stderr) == (EXIT_MISS, b"", b"(not applied: condition not met)\n")
    record = json.loads(nx_json.stdout)
    assert nx_json.returncode == EXIT_MISS and record["key"] == k and record["applied"] is False
    assert nex_other.returncode == EXIT_MISS
    assert nex_same.returncode == EXIT_OK and nex_same.stdout.startswith(b"OK\t")  # equal value: a renewal
    assert nx_new.returncode == EXIT_OK
    assert both.returncode == EXIT_USAGE and b"not allowed with" in both.stderr
    entry, created = store.get(k), store.get(fresh)
    assert entry is not None and entry.value == b"first"
    assert created is not None and created.value == b"new"
    store.delete(k)
    store.delete(fresh)


def test_fencing_token_protects_a_key(url: str, store: StateStoreClient) -> None:
    k = new_key()
    old = store.set(new_key("-tok"), b"x").version  # two real service HLCs, old < new
    new = store.set(new_key("-tok"), b"x").version
    assert old is not None and new is not None and old < new
    assert sskv("set", "--url", url, "--fencing-token", str(new), k, "fenced").returncode == EXIT_OK
    stale_set, no_token, stale_del, stale_vdel = run_all(
        ["set", "--url", url, "--fencing-token", str(old), k, "stale"],
        ["set", "--url", url, k, "unfenced"],
        ["del", "--url", url, "--fencing-token", str(old), k],
        ["vdel", "--url", url, "--fencing-token", str(old), k, "fenced"],
    )
    assert stale_set.returncode == EXIT_SERVICE and "FencingTokenLowerVersionError" in one_line_error(stale_set)
    assert no_token.returncode == EXIT_SERVICE and "FencingTokenRequiredError" in one_line_error(no_token)
    assert stale_del.returncode == EXIT_SERVICE and stale_vdel.returncode == EXIT_SERVICE
    entry = store.get(k)
    assert entry is not None and entry.value == b"fenced"
    done = sskv("del", "--url", url, "--fencing-token", str(new), k)
    assert done.returncode == EXIT_OK
    assert store.get(k) is None


def test_values_from_stdin_and_binary_values(url: str, store: StateStoreClient) -> None:
    k = new_key()
    binary = b"\xff\x00bin\nary\x80"
    done = sskv("set", "--url", url, k, "-", stdin=binary)
    assert done.returncode == EXIT_OK, done
    entry = store.get(k)
    assert entry is not None and entry.value == binary  # exactly, NUL and newline included
    human, as_json = run_all(["get", "--url", url, k], ["get", "--url", url, "--json", k])
    assert human.stdout == b"base64:" + base64.b64encode(binary) + b"\n"  # not UTF-8: shown as base64
    record = json.loads(as_json.stdout)
    assert "value" not in record and base64.b64decode(record["value_base64"]) == binary
    mismatch = sskv("vdel", "--url", url, k, "-", stdin=binary + b"!")
    assert mismatch.returncode == EXIT_MISS
    assert sskv("vdel", "--url", url, k, "-", stdin=binary).returncode == EXIT_OK
    assert store.get(k) is None


def test_argv_bytes_that_are_not_utf8_are_used_exactly(url: str, store: StateStoreClient) -> None:
    """Non-UTF-8 argv reaches Python as lone surrogates; the CLI stores the original bytes."""
    k = new_key().encode() + b"-\xff\xc3"
    value = b"v-\xfe\x80\xc3("
    done = sskv("set", "--url", url, k, value)
    assert done.returncode == EXIT_OK, done.stderr
    entry = store.get(k)
    assert entry is not None and entry.value == value
    human, as_json, nx = run_all(
        ["get", "--url", url, k], ["get", "--url", url, "--json", k], ["set", "--url", url, "--nx", k, b"\xff"]
    )
    assert human.returncode == EXIT_OK and human.stdout == b"base64:" + base64.b64encode(value) + b"\n"
    no_traceback(human)
    record = json.loads(as_json.stdout.decode("utf-8"))  # still valid UTF-8 JSON
    assert base64.b64decode(record["key_base64"]) == k and base64.b64decode(record["value_base64"]) == value
    assert nx.returncode == EXIT_MISS
    assert sskv("vdel", "--url", url, k, b"v-\xfe").returncode == EXIT_MISS  # compared as bytes
    assert sskv("vdel", "--url", url, k, value).returncode == EXIT_OK
    assert store.get(k) is None


# -- errors: missing vs unreachable vs bad arguments --------------------------------------------------------


def test_an_unreachable_broker_is_a_connection_error_never_key_absent(url: str) -> None:
    down = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there
    k = new_key()
    calls = [
        ["get", "--url", down, k],
        ["set", "--url", down, k, "v"],
        ["del", "--url", down, k],
        ["vdel", "--url", down, k, "v"],
        ["watch", "--url", down, "--count", "1", k],
        ["lock", "--url", down, "--wait", "0", k, "--", "true"],
    ]
    *human, as_json = run_all(*calls, ["get", "--url", down, "--json", k])
    for call, done in zip(calls, human, strict=True):
        assert done.returncode == EXIT_CONNECTION, (call, done)
        line = one_line_error(done)
        assert "BrokerConnectError" in line and down.removeprefix("mqtt://") in line, line
        assert done.stdout == b"" and b"not found" not in done.stderr
    assert as_json.returncode == EXIT_CONNECTION
    assert json.loads(as_json.stdout)["error"] == "BrokerConnectError"


def test_a_missing_key_and_an_unreachable_broker_are_different_outcomes(url: str) -> None:
    missing = sskv("get", "--url", url, new_key())
    assert missing.returncode == 1 and missing.stderr.startswith(b"(not found)") and missing.stdout == b""
    down = sskv("get", "--url", f"mqtt://127.0.0.1:{free_port()}", new_key())
    assert down.returncode == 3 and b"BrokerConnectError" in down.stderr
    assert down.stdout == b"" and b"Traceback" not in down.stderr


# (arguments, a word the message must contain, also tried with nothing listening: a sample of sskv's own checks)
BAD_ARGUMENTS: list[tuple[list[Arg], bytes, bool]] = [
    (["set", "", "v"], b"empty", True),
    (["get", ""], b"empty", False),
    (["del", ""], b"empty", False),
    (["vdel", "", "v"], b"empty", False),
    (["watch", "--count", "1", ""], b"empty", False),
    (["lock", "", "--", "true"], b"empty", True),
    (["set", "K", "v", "--ttl", "-1"], b"--ttl", True),
    (["set", "K", "v", "--ttl", "0"], b"--ttl", False),
    (["set", "K", "v", "--ttl", "nan"], b"--ttl", False),
    (["set", "K", "v", "--ttl", "1e12"], b"--ttl", False),
    (["set", "K", "v", "--ttl", "soon"], b"--ttl", False),
    (["set", "K", "v", "--fencing-token", "not-an-hlc"], b"--fencing-token", True),
    (["set", "K", "v", "--fencing-token", "1:x:node"], b"--fencing-token", False),
    (["set", "K", "v", "--fencing-token", b"1:2:\xffnode"], b"--fencing-token", True),
    (["del", "K", "--fencing-token", "1:2"], b"--fencing-token", False),
    (["vdel", "K", "v", "--fencing-token", "-1:2:n"], b"--fencing-token", False),
    (["watch", "--count", "0", "K"], b"--count", True),
    (["lock", "K", "--wait", "-1", "--", "true"], b"--wait", True),
    (["lock", "K", "--lease", "0", "--", "true"], b"--lease", True),
    (["lock", "K", "--bogus", "--", "true"], b"--bogus", False),
    (["get", "K", "--timeout", "0"], b"timeout", False),
    (["get", "K", "--url", "http://127.0.0.1:1"], b"scheme", False),
    (["get", "K", "--url", "mqtt://[::1"], b"IPv6", True),
    (["lock", "K", "--lease", "0.001", "--", "true"], b"--lease must be at least", True),
    (["leader", "K", "--term", "0.001", "--", "true"], b"--term must be at least", True),
    (["leader", "K", "--term", "inf", "--", "true"], b"--term", False),
]


@pytest.mark.parametrize("broker", ["up", "down"])
def test_bad_arguments_are_usage_errors_and_write_nothing(broker: str, url: str, store: StateStoreClient) -> None:
    """Exit 2 with a message naming the problem; checked before connecting, so also with no broker there."""
    if broker == "up":
        target, cases = url, BAD_ARGUMENTS
    else:
        target, cases = f"mqtt://127.0.0.1:{free_port()}", [case for case in BAD_ARGUMENTS if case[2]]
    k = new_key()
    calls = []
    for args, _, _ in cases:
        command, *rest = [k if a == "K" else a for a in args]
        calls.append([command, "--url", target, *rest])
    for (args, message, _), done in zip(cases, run_all(*calls), strict=True):
        assert done.returncode == EXIT_USAGE, (args, done)
        no_traceback(done)
        assert message in done.stderr, (args, done.stderr)
        assert done.stdout == b""
    assert store.get(k) is None  # nothing was written (the lock key neither)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set", "", "v"], b"empty"),
        (["set", "K", "v", "--ttl", "-1"], b"ttl"),
        (["set", "K", "v", "--fencing-token", "not-an-hlc"], b"--fencing-token"),
        (["set", "K", "v", "--fencing-token", "1:2:\udcff"], b"--fencing-token"),
    ],
)
def test_bad_set_arguments_are_usage_errors_and_write_nothing(
    url: str, store: StateStoreClient, args: list[str], message: bytes
) -> None:
    k = new_key()
    command, *rest = [k if a == "K" else a for a in args]
    done = sskv(command, "--url", url, *rest)
    assert done.returncode == 2, done
    assert message in done.stderr and b"Traceback" not in done.stderr
    assert store.get(k) is None


# -- watch ------------------------------------------------------------------------------------------------


def test_watch_prints_changes_made_by_another_client(url: str, store: StateStoreClient) -> None:
    k1, k2 = new_key(), new_key()
    k3 = new_key().encode() + b"-\xff"
    watchers = {
        "json": [*SSKV, "watch", "--url", url, "--json", "--count", "4", k1, k2],
        "human": [*SSKV, "watch", "--url", url, "--count", "2", k1],
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, argv in watchers.items():
            procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env()
            )
        binary_watch = subprocess.Popen(
            [*SSKV, "watch", "--url", url, "--json", "--count", "1", k3],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
        )
        procs["binary"] = binary_watch
        for proc in procs.values():
            assert proc.stderr is not None
            ready = proc.stderr.readline()  # printed once every KEYNOTIFY is registered
            assert ready.startswith(b"watching "), ready
        store.set(k1, b"one")
        store.set(k2, b"\xff\xfe")
        store.delete(k1)
        store.set(k2, b"two")
        store.set(k3, b"three")
        outputs = {name: proc.communicate(timeout=TIMEOUT) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, proc in procs.items():
        assert proc.returncode == EXIT_OK, (name, outputs[name])
        assert b"Traceback" not in outputs[name][1]

    events = [json.loads(line) for line in outputs["json"][0].splitlines()]
    assert [(e["key"], e["op"], e.get("value"), e.get("value_base64")) for e in events] == [
        (k1, "SET", "one", None),
        (k2, "SET", None, base64.b64encode(b"\xff\xfe").decode()),
        (k1, "DELETE", None, None),
        (k2, "SET", "two", None),
    ]
    for event in events:
        HybridLogicalClock.parse(event["version"])

    lines = outputs["human"][0].decode().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"SET {k1} one\t(version ") and lines[1].startswith(f"DELETE {k1}\t(version ")

    (record,) = [json.loads(line) for line in outputs["binary"][0].decode("utf-8").splitlines()]
    assert base64.b64decode(record["key_base64"]) == k3 and record["value"] == "three"
    store.delete(k2)
    store.delete(k3)


def test_watch_of_one_key_prints_its_set_and_delete(url: str, store: StateStoreClient) -> None:
    k = new_key()
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


# -- lock -------------------------------------------------------------------------------------------------


def test_lock_runs_the_command_with_a_fencing_token_and_releases(url: str, store: StateStoreClient) -> None:
    name, protected = new_key("-lock"), new_key()
    # the documented use: the command writes a protected key with the token it was given
    script = (
        f'exec "$0" -m sskv_mapping.cli set --url {url} --fencing-token "$SSKV_FENCING_TOKEN" {protected} '
        '"$SSKV_LOCK"; '
    )
    free, free_json = run_all(["lock", "--url", url, name], ["lock", "--url", url, name, "--json"])
    assert (free.returncode, free.stdout) == (EXIT_OK, b"free\n")
    assert json.loads(free_json.stdout) == {"lock": name, "held": False, "value": None}

    done = sskv("lock", "--url", url, name, "--", "sh", "-c", script, sys.executable)
    assert done.returncode == EXIT_OK, done
    assert done.stdout.startswith(b"OK\t(version ") and done.stdout.count(b"\n") == 1  # COMMAND's output alone
    assert done.stderr.decode().splitlines()[-1] == f"released {name}"
    acquired = done.stderr.decode().splitlines()[0]
    assert acquired.startswith(f"acquired {name} (fencing token ")
    token = HybridLogicalClock.parse(acquired.removesuffix(")").rsplit(" ", 1)[1])
    entry = store.get(protected)
    assert entry is not None and entry.value == name.encode()  # written under the lock, fenced
    assert store.get(name) is None  # released
    stale = HybridLogicalClock(token.wall_ms - 1, 0, token.node_id)
    assert sskv("set", "--url", url, "--fencing-token", str(stale), protected, "x").returncode == EXIT_SERVICE

    # options after NAME, the command's exit code, and the command's own "--" kept
    show_argv = "import sys; print(sys.argv[1:]); sys.exit(7)"
    done = sskv("lock", "--url", url, name, "--json", "--wait", "0", "--", sys.executable, "-c", show_argv, "--", "a")
    assert done.returncode == 7, done
    assert done.stdout.decode().splitlines() == ["['--', 'a']"]  # COMMAND's stdout alone
    acquired, record = (json.loads(line) for line in done.stderr.decode().splitlines())  # sskv's own, on stderr
    assert acquired["acquired"] is True and HybridLogicalClock.parse(acquired["fencing_token"])
    assert record["exit_code"] == 7 and record["lock"] == name
    assert store.get(name) is None
    store.delete(protected, fencing_token=token)


def test_lock_busy_timeout_and_a_command_that_cannot_run(url: str, store: StateStoreClient) -> None:
    name = new_key("-lock")
    holder = LeasedLock(store, name, lease=60)
    assert holder.try_acquire() is not None
    try:
        busy, busy_json, shown, timed_out = run_all(
            ["lock", "--url", url, "--wait", "0", name, "--", "sh", "-c", "echo RAN"],
            ["lock", "--url", url, "--json", "--wait", "0", name, "--", "sh", "-c", "echo RAN"],
            ["lock", "--url", url, name],
            ["lock", "--url", url, "--wait", "0.2", name, "--", "sh", "-c", "echo RAN"],
        )
        assert (busy.returncode, busy.stdout, busy.stderr) == (EXIT_MISS, b"", f"lock {name} is busy\n".encode())
        assert json.loads(busy_json.stderr) == {"lock": name, "acquired": False}
        assert (shown.returncode, shown.stdout) == (EXIT_OK, b"held by " + holder.holder + b"\n")
        waiting, error = timed_out.stderr.decode().splitlines()  # a status line, then the error
        assert waiting == f"waiting for {name} (held by someone else)"
        assert timed_out.returncode == 6 and error.startswith("sskv: LockError: timed out")
        for done in (busy, busy_json, timed_out):
            assert b"RAN" not in done.stdout  # the command never ran
        entry = store.get(name)
        assert entry is not None and entry.value == holder.holder  # still ours
    finally:
        holder.release()

    missing = sskv("lock", "--url", url, name, "--", f"/nonexistent/{uuid.uuid4().hex}")
    assert missing.returncode == 127
    no_traceback(missing)
    assert b"cannot run" in missing.stderr and b"No such file" in missing.stderr
    assert store.get(name) is None  # released even so


def test_lock_waits_for_the_holder_to_release(url: str, store: StateStoreClient) -> None:
    name = new_key("-lock")
    holder = LeasedLock(store, name, lease=60)
    first = holder.try_acquire()
    assert first is not None
    with subprocess.Popen(
        [*SSKV, "lock", "--url", url, "--wait", "20", name, "--", "true"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    ) as waiter:
        try:
            holder.release()  # before or after the CLI's first try: it gets the lock either way
            out, err = waiter.communicate(timeout=TIMEOUT)
        finally:
            if waiter.poll() is None:
                waiter.kill()
    assert waiter.returncode == EXIT_OK, err
    (acquired,) = [line for line in err.decode().splitlines() if line.startswith("acquired ")]
    token = HybridLogicalClock.parse(acquired.removesuffix(")").rsplit(" ", 1)[1])
    assert token > first and out == b"" and err.decode().splitlines()[-1] == f"released {name}"


# -- passwords ------------------------------------------------------------------------------------------------


def _password_line(username: str, password: str) -> str:
    """A mosquitto 2 password file line: ``$7$`` = PBKDF2-SHA512, 101 iterations, 12-byte salt."""
    salt = os.urandom(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 101, 64)
    return f"{username}:$7$101${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


@pytest.fixture
def password_url(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A mosquitto whose second listener needs user ``alice`` and a password (the emulator uses the
    anonymous first one); yields ``(url of the password listener, password)``."""
    password = f"pw-{uuid.uuid4().hex}"
    (tmp_path / "passwd").write_text(_password_line("alice", password) + "\n")
    for attempt in range(3):  # the extra listener's free port may be taken before mosquitto binds it
        port = free_port()
        broker = MosquittoBroker(
            extra_config=[
                "per_listener_settings true",
                f"listener {port} 127.0.0.1",
                "allow_anonymous false",
                f"password_file {tmp_path / 'passwd'}",
            ]
        )
        try:
            broker.start()
            break
        except MosquittoStartError as exc:
            if attempt == 2 or "Address already in use" not in str(exc):
                raise
    try:
        with start_emulator(broker.host, broker.port):
            yield f"mqtt://127.0.0.1:{port}", password
    finally:
        broker.stop()


def test_password_is_read_from_the_environment_and_never_printed(password_url: tuple[str, str]) -> None:
    url, password = password_url
    k = new_key()
    good, other_var, wrong, none = (
        clean_env(SSKV_PASSWORD=password),
        clean_env(MY_SECRET=password, SSKV_PASSWORD="wrong-" + password),
        clean_env(SSKV_PASSWORD="wrong-" + password),
        clean_env(),
    )

    def call(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
        return sskv(*args, env=env)

    calls: list[tuple[list[str], dict[str, str]]] = [
        (["set", "--url", url, "--username", "alice", k, "secret-kept"], good),
        (["get", "--url", url, "--username", "alice", "--json", "-v", new_key()], good),
        (["get", "--url", url, "--username", "alice", "--password-env", "MY_SECRET", new_key()], other_var),
        (["get", "--url", url.replace("//", "//alice@"), new_key()], good),  # user in the URL
        (["get", "--url", url, "--username", "alice", new_key()], wrong),
        (["get", "--url", url, "--username", "alice", "--json", new_key()], wrong),
        (["get", "--url", url, "--username", "alice", new_key()], none),
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: call(*c), calls))
    for done in results:
        assert password.encode() not in done.stdout + done.stderr
        no_traceback(done)
    stored, *authorised, wrong_human, wrong_json, missing = results
    assert stored.returncode == EXIT_OK, stored
    for done in authorised:
        # connected, key absent (a JSON record on stdout, a human line on stderr)
        assert done.returncode == EXIT_MISS and b"found" in done.stdout + done.stderr, done
    for done in (wrong_human, wrong_json, missing):
        assert done.returncode == EXIT_CONNECTION, done
    # refused credentials: the BrokerConnectError that says which (CredentialsRefusedError), exit 3 as any
    assert "CredentialsRefusedError" in one_line_error(wrong_human)
    assert json.loads(wrong_json.stdout)["error"] == "CredentialsRefusedError"
    check = sskv("get", "--url", url, "--username", "alice", k, env=good)
    assert check.stdout == b"secret-kept\n"


# -- configured from the environment, as an Azure IoT Operations app is -----------------------------------------


def test_from_env_reads_the_aio_variables(mosquitto: MosquittoBroker, store: StateStoreClient) -> None:
    k = new_key("env")
    aio = clean_env(
        AIO_BROKER_HOSTNAME=mosquitto.host, AIO_BROKER_TCP_PORT=str(mosquitto.port), AIO_MQTT_USE_TLS="false"
    )
    done = sskv("set", "--from-env", k, "from the environment", env=aio)
    assert done.returncode == EXIT_OK, done.stderr
    no_traceback(done)
    assert (entry := store.get(k)) is not None and entry.value == b"from the environment"
    assert sskv("get", "--from-env", k, env=aio).stdout == b"from the environment\n"
    # a connection string where the URL goes works the same
    cs = f"HostName={mosquitto.host};TcpPort={mosquitto.port};UseTls=false"
    assert sskv("get", "--url", cs, k).stdout == b"from the environment\n"


def test_from_env_with_a_bad_variable_is_a_usage_error_naming_it() -> None:
    bad = clean_env(AIO_BROKER_HOSTNAME="127.0.0.1", AIO_BROKER_TCP_PORT="not-a-port", AIO_MQTT_USE_TLS="false")
    done = sskv("get", "--from-env", "k", env=bad)
    assert done.returncode == EXIT_USAGE
    assert "AIO_BROKER_TCP_PORT" in one_line_error(done)
    missing = sskv("get", "--from-env", "k", env={k: v for k, v in bad.items() if not k.startswith("AIO_")})
    assert missing.returncode == EXIT_USAGE and "AIO_BROKER_HOSTNAME is required" in one_line_error(missing)
