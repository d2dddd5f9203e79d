"""What an elected ``sskv leader`` runs in the election fault tests: write fenced values until fenced out.

``python _acting.py URL KEY CANDIDATE`` with ``SSKV_FENCING_TOKEN`` set by ``sskv leader``. Every 20 ms it writes
``CANDIDATE|TOKEN|N`` to KEY with the token; prints one JSON line per accepted write; exits 3 when the service
refuses its token (a successor wrote with a newer one), 0 on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from sskv_mapping import HybridLogicalClock, StateStoreClient
from sskv_mapping.errors import FencingTokenLowerVersionError, TransportError


def main() -> int:
    url, key, candidate = sys.argv[1], sys.argv[2], sys.argv[3]
    token = HybridLogicalClock.parse(os.environ["SSKV_FENCING_TOKEN"])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with StateStoreClient.from_url(url, timeout=5) as client:
        n = 0
        while True:
            n += 1
            try:
                client.set(key, f"{candidate}|{token}|{n}".encode(), fencing_token=token)
            except FencingTokenLowerVersionError:
                print(json.dumps({"ev": "fenced", "t": time.monotonic()}), flush=True)
                return 3
            except TransportError:
                continue
            print(json.dumps({"ev": "wrote", "n": n, "t": time.monotonic()}), flush=True)
            time.sleep(0.02)  # pacing: a bounded write rate, not synchronisation


if __name__ == "__main__":
    sys.exit(main())
