"""A writer process for tests/mapping/test_changes_faults.py: ``d[key] = i`` for i = 1..COUNT, round-robin over KEYS.

Run:  python tests/mapping/_change_writer.py HOST PORT NAMESPACE LISTING COUNT KEY...

Each write is retried until the service acknowledges it (a broker restart fails some), so every key's values grow.
Prints one JSON line per 25 acknowledged writes, ``{"acked": n}``, and ``{"done": COUNT}`` at the end.
"""

from __future__ import annotations

import json
import sys
from typing import cast

from sskv_mapping.errors import StateStoreError
from sskv_mapping.mapping import StateStoreDict
from sskv_mapping.mapping._listing import ListingMode


def main(host: str, port: str, namespace: str, listing: str, count: str, *keys: str) -> None:
    mode = cast(ListingMode, listing)  # the test passes "scan" or "index"
    with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace=namespace, listing=mode, timeout=2.0) as d:
        for i in range(1, int(count) + 1):
            key = keys[i % len(keys)]
            while True:
                try:
                    d[key] = i
                    break
                except StateStoreError:
                    continue  # the client reconnects by itself; the write is tried again
            if i % 25 == 0:
                print(json.dumps({"acked": i}), flush=True)
        print(json.dumps({"done": int(count)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
