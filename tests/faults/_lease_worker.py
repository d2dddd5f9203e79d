"""A lease-holding worker process for the fencing fault test (not a test module).

Run as ``python tests/faults/_lease_worker.py --port P --lock NAME --namespace NS --lease-ms MS``. It uses
the *blocking* API only (:class:`StateStoreClient`, :class:`LeasedLock`, :class:`StateStoreDict`), one
client for the whole run, and talks to the test through one JSON object per stdout line (``"ev"`` names
the kind) and one command per stdin line:

* ``acquire``: take the lock with two :class:`LeasedLock` objects sharing one holder value (the second
  ``SET NEX`` is a renewal, so both hold the same lease):

  - ``honest``: times the lease with ``time.monotonic`` (the default);
  - ``blind``: times it with a clock that stands still from its request until the stale attempts are done —
    a lease check that cannot see the pause (``CLOCK_MONOTONIC`` does not count a system or VM suspend;
    or the check simply ran before the pause). Its lock object keeps handing out its token, so only the
    service's fencing can stop it.

  Then emits ``armed`` ``{"token", "blind_token", "t"}`` (``t`` on ``time.monotonic``) and blocks reading
  stdin: the test SIGSTOPs the process here, lets another client take the lock over, and SIGCONTs it.
* ``go <taker value hex>``: the stale holder writes the protected key ``NS/protected`` with everything it
  has, and reports each outcome in ``attempts`` ``{"results": {name: outcome}, "blind_held"}``, outcome being
  ``fencing`` (:class:`FencingTokenLowerVersionError`), ``lock`` (:class:`LockError`: the lock object
  refused to hand out its token, nothing was sent), ``accepted`` or ``error:<type>: <message>``.
* ``stop`` (or EOF): close and emit ``done`` ``{"reconnects", "states"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from sskv_mapping import (
    FencingTokenLowerVersionError,
    HybridLogicalClock,
    LeasedLock,
    LockError,
    StateStoreClient,
    StateStoreDict,
)
from sskv_mapping.client import ConnectionState

_out_lock = threading.Lock()


def emit(ev: str, **fields: Any) -> None:
    line = json.dumps({"ev": ev, **fields}, separators=(",", ":"))
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class StandingClock:
    """``time.monotonic``, except that it stands still between :meth:`freeze` and :meth:`thaw`."""

    def __init__(self) -> None:
        self._frozen: float | None = None

    def __call__(self) -> float:
        return time.monotonic() if self._frozen is None else self._frozen

    def freeze(self) -> None:
        self._frozen = time.monotonic()

    def thaw(self) -> None:
        self._frozen = None


def outcome(attempt: Callable[[], object]) -> str:
    try:
        attempt()
    except FencingTokenLowerVersionError:
        return "fencing"
    except LockError:
        return "lock"
    except Exception as exc:  # reported to the test, which fails on it
        return f"error:{type(exc).__name__}: {exc}"
    return "accepted"


class LeaseWorker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.states: list[str] = []
        self.client = StateStoreClient(args.host, args.port, client_id=args.id, timeout=args.timeout)
        self.client.add_state_listener(lambda state: self.states.append(state.value))
        self.client.connect()
        self.dict: StateStoreDict[Any] = StateStoreDict(self.client, namespace=args.namespace, local_cache_size=0)
        self.key = f"{args.namespace}/protected".encode()
        self.clock = StandingClock()
        self.honest: LeasedLock | None = None
        self.blind: LeasedLock | None = None
        self.token: HybridLogicalClock | None = None

    def acquire(self) -> None:
        self.clock.thaw()
        holder = f"{self.client.client_id}/holder"
        lease = self.args.lease_ms / 1000
        self.blind = LeasedLock(self.client, self.args.lock, holder=holder, lease=lease, monotonic=self.clock)
        self.honest = LeasedLock(self.client, self.args.lock, holder=holder, lease=lease)
        self.clock.freeze()  # from its request on, the blind lock sees no time pass
        blind_token = self.blind.try_acquire()
        token = self.honest.try_acquire()  # the same holder: a renewal, a newer token
        if blind_token is None or token is None:
            emit("not_acquired")
            return
        self.token = token
        emit("armed", token=str(token), blind_token=str(blind_token), t=time.monotonic())

    def stale_attempts(self, taker_value: bytes) -> None:
        assert self.honest is not None and self.blind is not None and self.token is not None
        client, key, stale, honest, blind = self.client, self.key, self.token, self.honest, self.blind
        blind_held = blind.held
        results = {
            # the raw client with the token it got before the pause
            "SET": outcome(lambda: client.set(key, b'"stale SET"', fencing_token=stale)),
            "DEL": outcome(lambda: client.delete(key, fencing_token=stale)),
            "VDEL": outcome(lambda: client.vdelete(key, taker_value, fencing_token=stale)),
            # the lock API, its lease timed by a clock that did not see the pause: sent, refused by the service
            "blind lock.set": outcome(lambda: blind.set(key, b'"stale lock.set"')),
            "blind lock.delete": outcome(lambda: blind.delete(key)),
            "blind fenced dict set": outcome(lambda: self.dict.fenced(blind).__setitem__("protected", "stale")),
            "blind fenced dict del": outcome(lambda: self.dict.fenced(blind).__delitem__("protected")),
            # the lock API with an honest clock: the lock object itself refuses, nothing is sent
            "honest lock.set": outcome(lambda: honest.set(key, b'"stale lock.set"')),
            "honest fenced dict set": outcome(lambda: self.dict.fenced(honest).__setitem__("protected", "stale")),
        }
        self.clock.thaw()
        self.honest = self.blind = None
        self.token = None
        emit("attempts", results=results, blind_held=blind_held)

    def run(self) -> int:
        emit("ready", state=self.client.state.value)
        try:
            for line in sys.stdin:
                command, _, rest = line.strip().partition(" ")
                if command == "acquire":
                    self.acquire()
                elif command == "go":
                    self.stale_attempts(bytes.fromhex(rest))
                elif command == "stop":
                    break
            reconnects = self.client.async_client.reconnects
            connected = self.client.state is ConnectionState.CONNECTED
        finally:
            self.dict.close()
            self.client.close()
        emit("done", reconnects=reconnects, connected_at_end=connected, states=self.states)
        return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--id", required=True, help="MQTT client id")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lock", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--lease-ms", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=5.0, help="client call timeout")
    return LeaseWorker(parser.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
