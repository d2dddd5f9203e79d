"""The ``sskv get|set|del|vdel|keys|watch|lock|leader`` commands (registered by ``cli/_main.py``).

Human output by default, one JSON object per line with ``--json``. Exit codes by error class:

====  ==========================================================
0     success
1     key not found / SET not applied / VDEL mismatch / lock busy
2     usage error (bad arguments)
3     connection problem (broker unreachable, lost, timed out)
4     the service answered an error (``-ERR ...``)
5     protocol error (a reply that does not parse)
6     lock error
126   ``lock``: COMMAND could not be run (127: not found)
130   interrupted (Ctrl-C)
====  ==========================================================

Arguments are checked before connecting: a bad one exits 2 whether or not the broker is reachable.

Must not import aiomqtt/paho directly.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from .._keys import scan_pattern, store_key
from .._protocol.commands import SetCondition, VDeleteResult
from .._protocol.hlc import HybridLogicalClock
from .._protocol.notifications import KeyEvent
from .._transport.settings import ConnectionSettings, TlsSettings
from .._ttl import ttl_to_ms
from ..client._client import UNSET, AsyncStateStoreClient
from ..errors import (
    ConfigurationError,
    LockError,
    ProtocolError,
    ServiceError,
    StateStoreError,
    TransportError,
)

__all__ = ["EXIT_CODES", "add_client_parsers", "exit_code_for"]

EXIT_OK, EXIT_MISS, EXIT_USAGE, EXIT_CONNECTION, EXIT_SERVICE, EXIT_PROTOCOL, EXIT_LOCK = range(7)
EXIT_INTERRUPTED = 130
EXIT_CANNOT_RUN, EXIT_NOT_FOUND = 126, 127  # `lock -- COMMAND` that cannot be started (as shells do)

EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (ConfigurationError, EXIT_USAGE),
    (TransportError, EXIT_CONNECTION),
    (ServiceError, EXIT_SERVICE),
    (ProtocolError, EXIT_PROTOCOL),
    (LockError, EXIT_LOCK),
    (StateStoreError, EXIT_SERVICE),
]


def exit_code_for(exc: BaseException) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return 1


DEFAULT_URL = "mqtt://127.0.0.1:1883"


def _connection_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection")
    g.add_argument(
        "--url",
        default=os.environ.get("SSKV_URL", DEFAULT_URL),
        # not %(default)s: SSKV_URL may carry a password, and --help must not print it
        help=f"broker URL, mqtt://host:port or mqtts://host:port (default: env SSKV_URL, else {DEFAULT_URL}, "
        "the local emulator stack)",
    )
    g.add_argument(
        "--from-env",
        action="store_true",
        help="configure the connection from the AIO_* environment variables, as Azure IoT Operations apps are "
        "(AIO_BROKER_HOSTNAME, AIO_BROKER_TCP_PORT, AIO_MQTT_USE_TLS, AIO_SAT_FILE...); the options below "
        "still override them. --url also takes a connection string (HostName=...;TcpPort=...;UseTls=false)",
    )
    g.add_argument("--client-id", help="MQTT client id (default: a random sskv-… id)")
    g.add_argument("--username", default=os.environ.get("SSKV_USERNAME"), help="username (env SSKV_USERNAME)")
    g.add_argument(
        "--password-env",
        default="SSKV_PASSWORD",
        metavar="VAR",
        help="read the password from this environment variable (default %(default)s); never pass it on the "
        "command line",
    )
    g.add_argument("--ca-file", help="CA bundle to verify the broker (implies TLS)")
    g.add_argument("--cert-file", help="X.509 client certificate (implies TLS)")
    g.add_argument("--key-file", help="private key of the client certificate")
    g.add_argument("--insecure", action="store_true", help="TLS without verifying the broker (tests only)")
    g.add_argument("--sat-token-file", help="K8S-SAT token file for MQTT 5 enhanced authentication")
    g.add_argument("--timeout", type=float, default=10.0, help="per-request timeout in seconds (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output, one JSON object per line")


def _client(args: argparse.Namespace) -> AsyncStateStoreClient:
    if args.from_env:
        return AsyncStateStoreClient(settings=_env_settings(args), timeout=args.timeout, reconnect=False)
    tls = None
    if args.ca_file or args.cert_file or args.insecure or args.url.startswith(("mqtts:", "ssl:")):
        tls = TlsSettings(
            ca_file=args.ca_file, cert_file=args.cert_file, key_file=args.key_file, verify=not args.insecure
        )
    overrides: dict[str, Any] = {"tls": tls} if tls else {}
    if args.client_id:
        overrides["client_id"] = args.client_id
    if args.username:
        overrides["username"] = args.username
    if args.username or urlsplit(args.url).username:  # a user from --username, SSKV_USERNAME or the URL
        password = os.environ.get(args.password_env)
        if password:
            overrides["password"] = password
    if args.sat_token_file:
        overrides["sat_token_file"] = args.sat_token_file
    settings = ConnectionSettings.from_url(args.url, **overrides)
    return AsyncStateStoreClient(settings=settings, timeout=args.timeout, reconnect=False)


def _env_settings(args: argparse.Namespace) -> ConnectionSettings:
    """``--from-env``: the AIO_* variables, then what the command line gives explicitly."""
    settings = ConnectionSettings.from_environment()
    overrides: dict[str, Any] = {}
    if args.client_id:
        overrides["client_id"] = args.client_id
    if args.username:
        overrides["username"] = args.username
        password = os.environ.get(args.password_env)
        if password:
            overrides["password"] = password
    if args.sat_token_file:
        overrides["sat_token_file"] = args.sat_token_file
    if args.ca_file or args.cert_file or args.key_file or args.insecure:
        base = settings.tls or TlsSettings()
        overrides["tls"] = TlsSettings(
            ca_file=args.ca_file or base.ca_file,
            cert_file=args.cert_file or base.cert_file,
            key_file=args.key_file or base.key_file,
            key_password=base.key_password if not args.key_file else None,
            verify=base.verify and not args.insecure,
            server_hostname=base.server_hostname,
        )
    return settings.replace(**overrides) if overrides else settings


def _argv_bytes(text: str) -> bytes:
    """The exact bytes given on the command line: bytes that are not UTF-8 reach Python as lone surrogates
    (surrogateescape) and go back to what they were, so keys and values from argv are binary-safe."""
    return os.fsencode(text)


def _key(text: str) -> bytes:
    return _argv_bytes(text)


def _fencing_token(text: str | None) -> HybridLogicalClock | None:
    if not text:
        return None
    try:
        return HybridLogicalClock.parse(text)
    except ProtocolError as exc:  # the user's argument, not the service's reply: a usage error
        raise ConfigurationError(f"--fencing-token: {exc}") from None


def _check_args(args: argparse.Namespace) -> None:
    """Refuse bad arguments before connecting (:class:`ConfigurationError`, exit 2), so that a usage error
    never looks like a connection problem and nothing is sent."""
    names = [getattr(args, "key", None), getattr(args, "name", None), *(getattr(args, "keys", None) or ())]
    for name in names:
        if name is not None:
            store_key(_key(name))
    for option, seconds in (("--ttl", getattr(args, "ttl", None)), ("--lease", getattr(args, "lease", None))):
        if seconds is None:
            continue
        if not (math.isfinite(seconds) and seconds > 0):
            raise ConfigurationError(f"{option} must be a positive, finite number of seconds, not {seconds}")
        try:
            ttl_to_ms(seconds)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{option}: {exc}") from None
    wait = getattr(args, "wait", None)
    if wait is not None and not (math.isfinite(wait) and wait >= 0):
        raise ConfigurationError(f"--wait must be 0 (try once) or a positive number of seconds, not {wait}")
    pattern = getattr(args, "pattern", None)
    if pattern is not None:
        scan_pattern(_argv_bytes(pattern))
    listing = getattr(args, "listing_timeout", None)
    if listing is not None and not (math.isfinite(listing) and listing > 0):
        raise ConfigurationError(f"--listing-timeout must be a positive, finite number of seconds, not {listing}")
    count = getattr(args, "count", None)
    if count is not None and count < 1:
        raise ConfigurationError(f"--count must be at least 1, not {count}")
    _fencing_token(getattr(args, "fencing_token", None))


def _show_key(text: str | bytes, field: str = "key") -> dict[str, Any]:
    """A key for JSON output: text if it is UTF-8, else ``<field>_base64`` (the output stays valid UTF-8)."""
    data = _argv_bytes(text) if isinstance(text, str) else text
    try:
        return {field: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{field}_base64": base64.b64encode(data).decode()}


def _show_value(value: bytes | None) -> dict[str, Any]:
    if value is None:
        return {"value": None}
    try:
        return {"value": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"value_base64": base64.b64encode(value).decode()}


def _emit(args: argparse.Namespace, record: dict[str, Any], human: str) -> None:
    print(json.dumps(record, ensure_ascii=False) if args.json else human, flush=True)


def _human_value(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode()


async def _cmd_get(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    entry = await client.get(_key(args.key))
    if entry is None:
        _emit(args, {**_show_key(args.key), "found": False}, f"(not found) {args.key}")
        return EXIT_MISS
    record = {**_show_key(args.key), "found": True, **_show_value(entry.value), "version": str(entry.version)}
    _emit(args, record, _human_value(entry.value) + (f"\t(version {entry.version})" if args.verbose else ""))
    return EXIT_OK


def _read_value(text: str) -> bytes:
    return sys.stdin.buffer.read() if text == "-" else _argv_bytes(text)


async def _cmd_set(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    condition = SetCondition.NX if args.nx else SetCondition.NEX if args.nex else None
    token = _fencing_token(args.fencing_token)
    result = await client.set(
        _key(args.key),
        _read_value(args.value),
        condition=condition,
        ttl=args.ttl,
        fencing_token=token,
        persist=args.persist,
    )
    record = {**_show_key(args.key), "applied": result.applied, "version": str(result.version)}
    human = f"OK\t(version {result.version})" if result.applied else "(not applied: condition not met)"
    _emit(args, record, human)
    return EXIT_OK if result.applied else EXIT_MISS


async def _cmd_del(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    token = _fencing_token(args.fencing_token)
    deleted = await client.delete(_key(args.key), fencing_token=token)
    _emit(args, {**_show_key(args.key), "deleted": deleted}, "deleted" if deleted else f"(not found) {args.key}")
    return EXIT_OK if deleted else EXIT_MISS


async def _cmd_vdel(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    token = _fencing_token(args.fencing_token)
    result = await client.vdelete(_key(args.key), _read_value(args.value), fencing_token=token)
    human = {
        VDeleteResult.DELETED: "deleted",
        VDeleteResult.NOT_FOUND: f"(not found) {args.key}",
        VDeleteResult.VALUE_MISMATCH: "(not deleted: the value differs)",
    }[result]
    _emit(args, {**_show_key(args.key), "result": result.name.lower()}, human)
    return EXIT_OK if result is VDeleteResult.DELETED else EXIT_MISS


async def _cmd_keys(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    """Every key matching the glob, one a line (as its exact bytes), or only their number with ``--count``.
    An empty listing is an answer, not a miss: exit 0."""
    listed = 0
    listing = UNSET if args.listing_timeout is None else args.listing_timeout
    async for page in client.scan_pages(_argv_bytes(args.pattern), timeout=listing):
        listed += len(page)
        if not args.count_only:
            for key in page:
                _emit(args, _show_key(key), os.fsdecode(key))  # stdout writes it back with surrogateescape
    if args.count_only:
        _emit(args, {**_show_key(args.pattern, "pattern"), "count": listed}, str(listed))
    return EXIT_OK


async def _cmd_watch(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    queue: asyncio.Queue[KeyEvent] = asyncio.Queue()
    subs = [await client.subscribe_key(_key(k), queue.put_nowait) for k in args.keys]
    # on stderr in both modes (stdout stays pure JSON): the watches are registered from this line on
    print(f"watching {', '.join(args.keys)} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    seen = 0
    try:
        while args.count is None or seen < args.count:
            event = await queue.get()
            seen += 1
            key = os.fsdecode(event.key)  # printed as the exact bytes (stdout uses surrogateescape)
            record = {
                **_show_key(event.key),
                "op": event.op.value,
                **_show_value(event.value),
                "version": str(event.version),
            }
            value = "" if event.value is None else " " + _human_value(event.value)
            _emit(args, record, f"{event.op.value} {key}{value}\t(version {event.version})")
    finally:
        for sub in subs:
            await sub.close()
    return EXIT_OK


async def _cmd_lock(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    from ..lock import AsyncLeasedLock

    lock = AsyncLeasedLock(client, _key(args.name), lease=args.lease, auto_renew=True)
    command = args.command
    if not command:
        holder = await lock.holder_of()
        record = {**_show_key(args.name, "lock"), "held": holder is not None, **_show_value(holder)}
        _emit(args, record, f"held by {_human_value(holder)}" if holder is not None else "free")
        return EXIT_OK
    if args.wait == 0:
        token = await lock.try_acquire()
        if token is None:
            _emit(args, {**_show_key(args.name, "lock"), "acquired": False}, f"lock {args.name} is busy")
            return EXIT_MISS
    else:
        token = await lock.acquire(timeout=args.wait)
    if not args.json:
        print(f"acquired {args.name} (fencing token {token})", file=sys.stderr, flush=True)
    try:
        env = {**os.environ, "SSKV_LOCK": args.name, "SSKV_FENCING_TOKEN": str(token)}
        try:
            proc = await asyncio.create_subprocess_exec(*command, env=env)
        except OSError as exc:
            print(f"sskv: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            rc = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_CANNOT_RUN
        else:
            rc = await proc.wait()
    finally:
        await lock.release()
    record = {**_show_key(args.name, "lock"), "fencing_token": str(token), "exit_code": rc}
    _emit(args, record, f"released {args.name}")
    return rc


async def _cmd_leader(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    from ..election import AsyncLeaderElection

    election = AsyncLeaderElection(client, _key(args.name), term=args.term, candidate=args.candidate)
    if args.status or not args.command:
        leader = await election.leader()
        record = {**_show_key(args.name, "position"), "leader": leader}
        _emit(args, record, f"led by {leader}" if leader is not None else "no leader")
        return EXIT_OK if leader is not None else EXIT_MISS
    while True:
        token = await election.campaign()
        # on stderr in both modes (stdout stays for --json records and COMMAND's own output)
        print(f"leading {args.name} as {election.candidate} (fencing token {token})", file=sys.stderr, flush=True)
        if args.json:
            record = {**_show_key(args.name, "position"), "elected": election.candidate, "fencing_token": str(token)}
            print(json.dumps(record), flush=True)
        env = {**os.environ, "SSKV_LEADER": args.name, "SSKV_FENCING_TOKEN": str(token)}
        try:
            proc = await asyncio.create_subprocess_exec(*args.command, env=env)
        except OSError as exc:
            await election.resign()
            print(f"sskv: cannot run {args.command[0]}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            return EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_CANNOT_RUN
        exited = asyncio.ensure_future(proc.wait())
        lost = asyncio.ensure_future(election.lost.wait())
        try:
            await asyncio.wait({exited, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if exited.done():  # the command ended by itself: give the position up and end with its code
            await election.resign()
            rc = exited.result()
            _emit(args, {**_show_key(args.name, "position"), "exit_code": rc}, f"resigned {args.name}")
            return rc
        # leadership lost: stop the command at once (SIGTERM, then SIGKILL after the grace period)
        print(f"lost {args.name}: {election.lost_reason}; stopping the command", file=sys.stderr, flush=True)
        proc.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(exited), args.grace)
        except TimeoutError:
            proc.kill()
            await exited
        _emit(args, {**_show_key(args.name, "position"), "lost": election.lost_reason}, "campaigning again")


def _split_leader_command(args: argparse.Namespace) -> None:
    _split_command(args, "leader", _leader_options)


def _split_lock_command(args: argparse.Namespace) -> None:
    _split_command(args, "lock", _lock_options)


def _split_command(args: argparse.Namespace, verb: str, options_of: Callable[[argparse.ArgumentParser], None]) -> None:
    """``lock NAME [OPTIONS] -- COMMAND...``: argparse's REMAINDER also swallows the options after NAME
    (``--json``, ``--wait 0``), so parse those here; only the first ``--`` separates, later ones are
    COMMAND's own. Without ``--`` the rest is COMMAND (``lock NAME cmd args``) unless it starts with an
    option."""
    rest: list[str] = args.command
    if not rest or not rest[0].startswith("-"):
        return
    if "--" in rest:
        split = rest.index("--")
        options, args.command = rest[:split], rest[split + 1 :]
    else:
        options, args.command = rest, []
    parser = argparse.ArgumentParser(
        prog=f"sskv {verb}", usage=f"sskv {verb} [OPTIONS] NAME [OPTIONS] [-- COMMAND [ARGS...]]", add_help=False
    )
    options_of(parser)
    _connection_args(parser)
    parser.parse_args(options, namespace=args)  # only options are accepted here; an error exits 2


def _runner(
    handler: Callable[[argparse.Namespace, AsyncStateStoreClient], Awaitable[int]],
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        async def main() -> int:
            async with _client(args) as client:
                return await handler(args, client)

        prepare: Callable[[argparse.Namespace], None] | None = getattr(args, "prepare", None)
        if prepare is not None:
            prepare(args)
        try:
            _check_args(args)
            return asyncio.run(main())
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except StateStoreError as exc:
            message = f"{type(exc).__name__}: {exc}"
            if args.json:
                print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
            print(f"sskv: {message}", file=sys.stderr)
            return exit_code_for(exc)

    return run


def add_client_parsers(sub: Any) -> None:
    """Register get/set/del/vdel/keys/watch/lock/leader on an argparse subparsers object."""
    p = sub.add_parser("get", help="print a key's value", description="Print a key's value (exit 1 if missing).")
    p.add_argument("key")
    p.add_argument("-v", "--verbose", action="store_true", help="also print the version")
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_get))

    p = sub.add_parser("set", help="store a value", description="Store a value. VALUE '-' reads standard input.")
    p.add_argument("key")
    p.add_argument("value")
    cond = p.add_mutually_exclusive_group()
    cond.add_argument("--nx", action="store_true", help="only if the key does not exist")
    cond.add_argument("--nex", action="store_true", help="only if absent or equal to VALUE (lease renewal)")
    p.add_argument("--ttl", type=float, help="expire after this many seconds")
    p.add_argument("--fencing-token", help="HLC fencing token for a key protected by a lock")
    p.add_argument("--persist", action="store_true", help="ask the broker to persist the entry")
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_set))

    p = sub.add_parser("del", help="delete a key", description="Delete a key (exit 1 if it did not exist).")
    p.add_argument("key")
    p.add_argument("--fencing-token", help="HLC fencing token for a key protected by a lock")
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_del))

    p = sub.add_parser(
        "vdel", help="delete a key if its value matches", description="Delete KEY only if its value is VALUE."
    )
    p.add_argument("key")
    p.add_argument("value")
    p.add_argument("--fencing-token", help="HLC fencing token for a key protected by a lock")
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_vdel))

    p = sub.add_parser(
        "keys",
        help="list the keys matching a glob pattern",
        description="Print every key matching PATTERN, one a line (SCAN: the whole key must match; '*' any "
        "run of characters, '?' one character, '[abc]', '[a-z]', '[!abc]'; '[*]', '[?]', '[[]' stand for the "
        "characters themselves, there is no backslash escape). Quote the pattern from the shell. No order. "
        "Exit 4 (UnsupportedCommandError) if the service has no SCAN.",
    )
    p.add_argument("pattern")
    p.add_argument("--count", dest="count_only", action="store_true", help="print only the number of keys")
    p.add_argument(
        "--listing-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="give up if the whole listing takes longer (default: 6 x --timeout; each page has --timeout)",
    )
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_keys))

    p = sub.add_parser("watch", help="print changes of keys", description="Print every change of the keys.")
    p.add_argument("keys", nargs="+", metavar="KEY")
    p.add_argument("--count", type=int, help="stop after this many events")
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_watch))

    p = sub.add_parser(
        "lock",
        help="run a command while holding a leased lock",
        description="Without COMMAND: show who holds the lock. With COMMAND: wait for the lock, run COMMAND "
        "with SSKV_FENCING_TOKEN set (the lease is renewed meanwhile), release it, exit with COMMAND's code "
        "(127 if it is not found, 126 if it cannot be run).",
    )
    p.add_argument("name")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    _lock_options(p)
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_lock), prepare=_split_lock_command)

    p = sub.add_parser(
        "leader",
        help="run a command only while this process leads",
        description="Campaign for the leadership position NAME; while leading, run COMMAND with SSKV_LEADER and "
        "SSKV_FENCING_TOKEN set (the term is renewed meanwhile). If the leadership is lost, COMMAND is stopped "
        "(SIGTERM, then SIGKILL after --grace) and the campaign starts again; when COMMAND ends by itself, the "
        "position is resigned and its exit code returned. --status (or no COMMAND): print the current leader.",
    )
    p.add_argument("name")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    _leader_options(p)
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_leader), prepare=_split_leader_command)


def _leader_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--term", type=float, default=10.0, help="term length in seconds, renewed while leading (default 10)"
    )
    p.add_argument("--candidate", help="this candidate's name (default: the MQTT client id)")
    p.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL (default 5)")
    p.add_argument("--status", action="store_true", help="print the current leader and exit (1: none)")


def _lock_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lease", type=float, default=10.0, help="lease length in seconds (default 10)")
    p.add_argument("--wait", type=float, default=None, help="give up after this many seconds (0: try once)")
