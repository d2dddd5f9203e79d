"""A process holding a blocking cache with a local cache, driven by JSON lines on stdin (one reply line each).

``python tests/cache/_cache_worker.py HOST PORT NAMESPACE``; commands:

* ``{"op": "get", "key": k}`` -> ``{"value": v, "generation": g, "local_hits": n}``
* ``{"op": "wait_gone", "key": k, "timeout": s}`` -> ``{"gone": bool}``: reads ``k`` until it is absent (each
  read is answered by the local cache or the store: whatever the process would serve)
* ``{"op": "quit"}``
"""

from __future__ import annotations

import json
import sys
import time

from sskv_mapping.cache import StateStoreCache
from sskv_mapping.client import StateStoreClient


def main() -> None:
    host, port, namespace = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with StateStoreClient(host, port, timeout=5) as client:
        cache: StateStoreCache[object] = StateStoreCache(client, namespace=namespace, local_cache_size=100)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "quit":
                break
            if op == "get":
                value = cache.get(command["key"])
                local = cache.stats().local
                reply = {
                    "value": value,
                    "generation": cache.async_cache.generation,
                    "local_hits": local.hits if local else 0,
                }
            elif op == "wait_gone":
                deadline = time.monotonic() + command["timeout"]
                gone = cache.get(command["key"]) is None
                while not gone and time.monotonic() < deadline:
                    gone = cache.get(command["key"]) is None
                reply = {"gone": gone}
            else:
                reply = {"error": f"unknown op {op!r}"}
            print(json.dumps(reply), flush=True)
        cache.close()


if __name__ == "__main__":
    main()
