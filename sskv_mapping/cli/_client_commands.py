"""The ``sskv get|set|del|vdel|keys|watch|lock|leader`` commands (registered by ``cli/_main.py``).

Output, exit codes and reconnects: docs/cli.md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._keys import scan_pattern, store_key
from .._protocol.commands import SetCondition, VDeleteResult
from .._protocol.hlc import HybridLogicalClock
from .._protocol.notifications import KeyEvent, KeyOperation
from .._transport.settings import DEFAULT_URL, ENV_LOCATION, ConnectionSettings, settings_from_options
from .._ttl import ttl_to_ms
from ..client._client import UNSET, AsyncStateStoreClient, ConnectionState, KeySubscription
from ..errors import (
    ConfigurationError,
    ConnectionLostError,
    LockError,
    ProtocolError,
    ServiceError,
    StateStoreError,
    TransportError,
)
from ._child import exit_status, forward_signals, start_in_group, stop_group

if TYPE_CHECKING:
    from ..lock import AsyncLeasedLock

__all__ = ["EXIT_CODES", "add_client_parsers", "exit_code_for"]

EXIT_OK, EXIT_MISS, EXIT_USAGE, EXIT_CONNECTION, EXIT_SERVICE, EXIT_PROTOCOL, EXIT_LOCK = range(7)
EXIT_INTERRUPTED = 130
EXIT_CANNOT_RUN, EXIT_NOT_FOUND = 126, 127  # `lock -- COMMAND` that cannot be started (as shells do)
#: the shortest --lease / --term: a round trip and a renewal must fit in it many times over
MIN_LEASE_S = 0.1
EXIT_LEASE_LOST = EXIT_LOCK  # `lock -- COMMAND`: the lease was lost while COMMAND ran, and COMMAND was stopped

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
    # reconnects with backoff after a drop, as the library does: a watch is restored and goes on, a lease is
    # renewed across a blip (a first connect that fails still fails at once)
    return AsyncStateStoreClient(settings=_settings(args), timeout=args.timeout)


def _settings(args: argparse.Namespace) -> ConnectionSettings:
    """Where to connect: ``--from-env`` (the AIO_* variables) or ``--url``, and on top what the command line
    gives explicitly, through the package's one path (``settings_from_options``)."""
    options: dict[str, Any] = {
        "client_id": args.client_id or None,
        "username": args.username or None,
        "sat_token_file": args.sat_token_file or None,
    }
    # the password only from the environment, for a user from --username, SSKV_USERNAME or the URL
    if args.username or (not args.from_env and _url_names_user(args.url)):
        options["password"] = os.environ.get(args.password_env) or None
    # TLS fields over the TLS the location says (a TLS option alone turns TLS on)
    tls: dict[str, Any] = {
        name: value
        for name, value in (("ca_file", args.ca_file), ("cert_file", args.cert_file), ("key_file", args.key_file))
        if value
    }
    if args.key_file:
        tls["key_password"] = None  # the location's pass phrase is for the location's key
    if args.insecure:
        tls["verify"] = False
    if tls:
        options["tls"] = tls
    return settings_from_options(ENV_LOCATION if args.from_env else args.url, options)


def _url_names_user(url: str) -> bool:
    """Whether ``url`` carries a user name (a malformed URL is refused by ``settings_from_options`` after)."""
    try:
        return bool(urlsplit(url).username)
    except ValueError:
        return False


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
    timed = (("--ttl", getattr(args, "ttl", None)), ("--lease", getattr(args, "lease", None)))
    for option, seconds in (*timed, ("--term", getattr(args, "term", None))):
        if seconds is None:
            continue
        if not (math.isfinite(seconds) and seconds > 0):
            raise ConfigurationError(f"{option} must be a positive, finite number of seconds, not {seconds}")
        try:
            ttl_to_ms(seconds)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{option}: {exc}") from None
        if option != "--ttl" and seconds < MIN_LEASE_S:
            raise ConfigurationError(
                f"{option} must be at least {MIN_LEASE_S} s, not {seconds}: a shorter one ends before it can be renewed"
            )
    grace = getattr(args, "grace", None)
    if grace is not None and not (math.isfinite(grace) and grace >= 0):
        raise ConfigurationError(f"--grace must be 0 or a positive number of seconds, not {grace}")
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


def _answer_or_status(args: argparse.Namespace, record: dict[str, Any], human: str) -> None:
    """A negative answer (not found, not applied): the JSON record is data (stdout); the human line is a status
    (stderr), so that ``sskv get KEY > file`` writes only a value. The exit code says it too."""
    if args.json:
        _emit(args, record, human)
    else:
        print(human, file=sys.stderr, flush=True)


def _human_value(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode()


async def _cmd_get(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    entry = await client.get(_key(args.key))
    if entry is None:
        _answer_or_status(args, {**_show_key(args.key), "found": False}, f"(not found) {args.key}")
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
    if result.applied:
        _emit(args, record, f"OK\t(version {result.version})")
    else:
        _answer_or_status(args, record, "(not applied: condition not met)")
    return EXIT_OK if result.applied else EXIT_MISS


async def _cmd_del(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    token = _fencing_token(args.fencing_token)
    deleted = await client.delete(_key(args.key), fencing_token=token)
    record = {**_show_key(args.key), "deleted": deleted}
    if deleted:
        _emit(args, record, "deleted")
    else:
        _answer_or_status(args, record, f"(not found) {args.key}")
    return EXIT_OK if deleted else EXIT_MISS


async def _cmd_vdel(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    token = _fencing_token(args.fencing_token)
    result = await client.vdelete(_key(args.key), _read_value(args.value), fencing_token=token)
    human = {
        VDeleteResult.DELETED: "deleted",
        VDeleteResult.NOT_FOUND: f"(not found) {args.key}",
        VDeleteResult.VALUE_MISMATCH: "(not deleted: the value differs)",
    }[result]
    record = {**_show_key(args.key), "result": result.name.lower()}
    (_emit if result is VDeleteResult.DELETED else _answer_or_status)(args, record, human)
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


def _say_connection_changes(client: AsyncStateStoreClient, what: str) -> Callable[[], None]:
    """Status lines on stderr when the connection drops and comes back (the client reconnects by itself)."""

    def on_state(state: ConnectionState) -> None:
        if state is ConnectionState.TAKEOVER_SUSPECTED:
            print(
                f"sskv: the broker closed the connection right after each of the last connects: another process may "
                f"use the client id {client.settings.client_id!r}, or the network closes connections; reconnecting",
                file=sys.stderr,
                flush=True,
            )
        elif state is ConnectionState.RECONNECTING:
            print(f"sskv: connection to {client.settings.url} lost; reconnecting", file=sys.stderr, flush=True)
        elif state is ConnectionState.CONNECTED:
            print(f"sskv: reconnected to {client.settings.url}; {what}", file=sys.stderr, flush=True)

    return client.add_state_listener(on_state)


async def _cmd_watch(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    queue: asyncio.Queue[KeyEvent] = asyncio.Queue()
    subs = [await client.subscribe_key(_key(k), queue.put_nowait) for k in args.keys]
    # on stderr in both modes (stdout stays pure JSON): the watches are registered from this line on
    print(f"watching {', '.join(args.keys)} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    _say_connection_changes(client, "restoring the watches (a change missed meanwhile is printed as a resync)")
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
                "version": None if event.version is None else str(event.version),
                "synthetic": event.synthetic,
            }
            value = "" if event.value is None else " " + _human_value(event.value)
            # a synthetic event: the key changed while the connection was down (the client re-read it)
            note = f"version {event.version}" if event.version is not None else "no version"
            note += ", resync after a reconnect" if event.synthetic else ""
            _emit(args, record, f"{event.op.value} {key}{value}\t({note})")
    finally:
        for sub in subs:
            await sub.close()
    return EXIT_OK


def _status(args: argparse.Namespace, record: dict[str, Any], human: str) -> None:
    """A status line (acquired, released, lost...): on stderr in both modes, so that stdout carries only data
    (a command's own output, under ``lock``/``leader``)."""
    print(json.dumps(record, ensure_ascii=False) if args.json else human, file=sys.stderr, flush=True)


class _LeaseWatch:
    """Tells when the lease of a held lock is lost, and why.

    Lost means: another holder's value or a DELETE of the lock key was notified (a takeover, ``sskv del``, an
    expiry seen by the service), or the lease ran out by our own clock without being renewed (the lock's
    renewal retries across a reconnect until then). Our clock ends a lease no later than the service does (it
    starts before the request that grants it), so the command is told to stop before the service can grant the
    lock to anyone else. A notification is never trusted to arrive: the clock alone decides at the lease's end.
    """

    def __init__(self, lock: AsyncLeasedLock) -> None:
        self._lock = lock
        self._changed = asyncio.Event()
        self._sub: KeySubscription | None = None
        self.reason: str | None = None

    def _on_event(self, event: KeyEvent) -> None:
        if event.op is KeyOperation.DELETE:
            self._lose("the lock key was deleted (by someone else, or it expired)")
        elif event.value != self._lock.holder:
            self._lose("another holder took the lock")

    def _lose(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self._changed.set()

    async def start(self) -> None:
        """Watch the lock key (KEYNOTIFY), before COMMAND starts."""
        self._sub = await self._lock.client.subscribe_key(self._lock.name, self._on_event)

    async def lost(self) -> str:
        """Wait until the lease is lost; returns why."""
        while self.reason is None:
            left = self._lock.lease_deadline - time.monotonic()
            if left <= 0 or not self._lock.held:
                self._lose("the lease ran out before it could be renewed")
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        assert self.reason is not None
        return self.reason

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(StateStoreError, TimeoutError):
                async with asyncio.timeout(1.0):
                    await sub.close()


async def _cmd_lock(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    from ..lock import AsyncLeasedLock

    lock = AsyncLeasedLock(client, _key(args.name), lease=args.lease, auto_renew=True, renew_fraction=1 / 3)
    command = args.command
    lock_key = _show_key(args.name, "lock")
    if not command:
        holder = await lock.holder_of()
        record = {**lock_key, "held": holder is not None, **_show_value(holder)}
        _emit(args, record, f"held by {_human_value(holder)}" if holder is not None else "free")
        return EXIT_OK
    token = await lock.try_acquire()
    if token is None and args.wait == 0:
        _status(args, {**lock_key, "acquired": False}, f"lock {args.name} is busy")
        return EXIT_MISS
    if token is None:
        _status(args, {**lock_key, "waiting": True}, f"waiting for {args.name} (held by someone else)")
        token = await _acquire_across_drops(lock, args.wait)
    lease = _LeaseWatch(lock)
    proc: asyncio.subprocess.Process | None = None
    try:
        await lease.start()
        _say_connection_changes(client, f"renewing the lease on {args.name}")
        _status(
            args,
            {**lock_key, "acquired": True, "fencing_token": str(token)},
            f"acquired {args.name} (fencing token {token})",
        )
        env = {**os.environ, "SSKV_LOCK": args.name, "SSKV_FENCING_TOKEN": str(token)}
        try:
            proc = await start_in_group(command, env)
        except OSError as exc:
            print(f"sskv: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            await _release_quietly(lock, args.name, args.timeout)
            return EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_CANNOT_RUN
        with forward_signals(proc):
            exited = asyncio.ensure_future(proc.wait())
            watcher = asyncio.ensure_future(lease.lost())
            try:
                await asyncio.wait({exited, watcher}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                watcher.cancel()
            if not exited.done():
                # the lease is lost: stop COMMAND (and its process group) before anyone else may hold the lock
                _status(
                    args,
                    {**lock_key, "lost": lease.reason},
                    f"lost {args.name}: {lease.reason}; stopping the command (SIGTERM, then SIGKILL after "
                    f"{args.grace:g} s)",
                )
                rc = await stop_group(proc, args.grace)
                _status(
                    args,
                    {**lock_key, "exit_code": EXIT_LEASE_LOST, "command_exit_code": rc},
                    f"stopped the command (its exit status {rc}); sskv exits {EXIT_LEASE_LOST}",
                )
                # a courtesy: the lease is gone or about to be, and the connection may be too
                await _release_quietly(lock, args.name, min(args.timeout, 1.0))
                return EXIT_LEASE_LOST
            rc = exit_status(exited.result())
        if await _release_quietly(lock, args.name, args.timeout):
            _status(args, {**lock_key, "fencing_token": str(token), "exit_code": rc}, f"released {args.name}")
        return rc
    except BaseException:
        # interrupted or failed while COMMAND runs: it does not outlive sskv, nor keep running without the lock
        if proc is not None and proc.returncode is None:
            await asyncio.shield(stop_group(proc, args.grace))
        await _release_quietly(lock, args.name, min(args.timeout, 1.0))
        raise
    finally:
        await lease.close()


async def _acquire_across_drops(lock: AsyncLeasedLock, wait: float | None) -> HybridLogicalClock:
    """``lock.acquire(wait)``, begun again when the connection drops under it (its first attempt or its watch's
    registration can fail so): the same holder value re-takes a lock whose grant was lost with the reply."""
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            return await lock.acquire(timeout=left)
        except ConnectionLostError as exc:
            if deadline is not None and time.monotonic() >= deadline:
                raise LockError(f"timed out after {wait} s waiting for lock {lock.name!r}") from exc
            _say(f"connection lost while waiting for the lock ({exc}); waiting on")
            with contextlib.suppress(ConnectionLostError):
                await lock.client.wait_connected(left)


def _say(text: str) -> None:
    print(f"sskv: {text}", file=sys.stderr, flush=True)


async def _release_quietly(lock: AsyncLeasedLock, name: str, timeout: float) -> bool:
    """Release the lock (waiting up to ``timeout`` seconds); a failure (a connection that is gone) is said on
    stderr, not raised: the command's outcome is the result, and the lease ends by itself. True if released."""
    try:
        async with asyncio.timeout(timeout):
            await lock.release()
        return True
    except (StateStoreError, TimeoutError) as exc:
        why = str(exc) or f"no answer within {timeout:g} s"
        print(f"sskv: could not release {name} ({why}); it expires with its lease", file=sys.stderr, flush=True)
        return False


async def _cmd_leader(args: argparse.Namespace, client: AsyncStateStoreClient) -> int:
    from ..election import AsyncLeaderElection

    election = AsyncLeaderElection(client, _key(args.name), term=args.term, candidate=args.candidate)
    position = _show_key(args.name, "position")
    if args.status or not args.command:
        leader = await election.leader()
        record = {**position, "leader": leader}
        _emit(args, record, f"led by {leader}" if leader is not None else "no leader")
        return EXIT_OK if leader is not None else EXIT_MISS
    _say_connection_changes(client, "going on (a leader renews its term)")
    while True:
        token = await election.campaign()
        _status(
            args,
            {**position, "elected": election.candidate, "fencing_token": str(token)},
            f"leading {args.name} as {election.candidate} (fencing token {token})",
        )
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
            rc = exit_status(exited.result())
            _status(args, {**position, "exit_code": rc}, f"resigned {args.name}")
            return rc
        # leadership lost: stop the command at once (SIGTERM, then SIGKILL after the grace period)
        _status(
            args,
            {**position, "lost": election.lost_reason},
            f"lost {args.name}: {election.lost_reason}; stopping the command",
        )
        # the command may end by itself at the same moment (a term of a few ms): a signal to a process that is
        # gone already is nothing to report (asyncio raises ProcessLookupError for it)
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(exited), args.grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await exited
        _status(args, {**position, "campaigning": True}, "campaigning again")


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


def _log_warnings_as_status() -> None:
    """The library's warnings (a connection lost, a watch not restored yet, a lock lost) are status lines on
    stderr, prefixed like sskv's own; set up once per process, and only if the application configured nothing."""
    logger = logging.getLogger("sskv_mapping")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sskv: %(message)s"))
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)


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
        _log_warnings_as_status()
        try:
            _check_args(args)
            return asyncio.run(main())
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except StateStoreError as exc:
            message = f"{type(exc).__name__}: {exc}"
            if args.json:
                # under lock/leader with COMMAND, stdout is COMMAND's alone
                out = sys.stderr if getattr(args, "wraps_command", False) and args.command else sys.stdout
                print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), file=out, flush=True)
            print(f"sskv: {message}", file=sys.stderr, flush=True)
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
        "in its own process group with SSKV_LOCK and SSKV_FENCING_TOKEN set (the lease is renewed meanwhile, "
        "across reconnects), release it, exit with COMMAND's code (127 if it is not found, 126 if it cannot be "
        "run). If the lease is lost (another holder took it, the key was deleted, or it ran out unrenewed by "
        "sskv's clock, which ends it no later than the service does), COMMAND's process group gets SIGTERM, "
        "then SIGKILL after --grace, and sskv exits 6. SIGINT, SIGTERM and SIGHUP are passed on to COMMAND. "
        "stdout is COMMAND's alone; sskv's own lines go to stderr.",
    )
    p.add_argument("name")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    _lock_options(p)
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_lock), prepare=_split_lock_command, wraps_command=True)

    p = sub.add_parser(
        "leader",
        help="run a command only while this process leads",
        description="Campaign for the leadership position NAME; while leading, run COMMAND with SSKV_LEADER and "
        "SSKV_FENCING_TOKEN set (the term is renewed meanwhile). If the leadership is lost, COMMAND is stopped "
        "(SIGTERM, then SIGKILL after --grace) and the campaign starts again; when COMMAND ends by itself, the "
        "position is resigned and its exit code returned. --status (or no COMMAND): print the current leader. "
        "stdout is COMMAND's alone; sskv's own lines go to stderr.",
    )
    p.add_argument("name")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    _leader_options(p)
    _connection_args(p)
    p.set_defaults(func=_runner(_cmd_leader), prepare=_split_leader_command, wraps_command=True)


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
    p.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="if the lease is lost, seconds between SIGTERM and SIGKILL to COMMAND's process group (default 10)",
    )
