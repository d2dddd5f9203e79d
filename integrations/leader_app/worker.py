"""An active/passive worker pair on the state store: every replica runs this; exactly one works at a time.

    python integrations/leader_app/worker.py mqtt://127.0.0.1:1883 [NAME]

The replica campaigns for the position ``orders-worker``; the elected one processes "jobs" -- here it moves a
cursor ``orders/cursor`` forward every 50 ms, each write fenced with its leader token -- until it loses the
position; the others wait on KEYNOTIFY (no polling) and the first to win takes over where the cursor stands.
A paused or partitioned former leader cannot move the cursor back: its token is older than the successor's.
"""

from __future__ import annotations

import json
import sys
import time

from sskv_mapping import LeaderElection, StateStoreClient
from sskv_mapping.errors import FencingTokenLowerVersionError, LockError, TransportError

POSITION = "orders-worker"
CURSOR = "orders/cursor"


def work(client: StateStoreClient, election: LeaderElection, name: str) -> None:
    """Process jobs while leading: advance the cursor, fenced with the leader's token."""
    while election.is_leader:
        try:
            new = election.update(CURSOR, lambda old: str(int(old or b"0") + 1).encode())
        except (LockError, FencingTokenLowerVersionError):
            return  # not leading any more (or a successor wrote): stop at once
        except TransportError:
            continue
        print(json.dumps({"worker": name, "cursor": int(new or b"0"), "t": time.monotonic()}), flush=True)
        time.sleep(0.05)  # one job every 50 ms


def main() -> int:
    url = sys.argv[1]
    with StateStoreClient.from_url(url) as client:
        election = LeaderElection(client, POSITION, term=2.0, candidate=sys.argv[2] if len(sys.argv) > 2 else None)
        name = election.candidate
        print(json.dumps({"worker": name, "state": "standby"}), flush=True)
        while True:
            election.campaign()
            print(json.dumps({"worker": name, "state": "active"}), flush=True)
            work(client, election, name)
            print(json.dumps({"worker": name, "state": "standby"}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
