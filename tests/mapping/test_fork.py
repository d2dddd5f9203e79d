"""Fork safety (issue 27, point 5): a child made by ``os.fork()`` never serves the parent's cached values, never
writes into the parent's connection, and reads what another process changed through a face it connects itself.

The parent holds a dict and a cache with local caches full of ``"old"``, forks, then changes the value; the child
reports over a pipe what each face gave it. Over a real mosquitto and the emulator process.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import pytest

from sskv_mapping import (
    ClientStateError,
    StateStoreCache,
    StateStoreClient,
    StateStoreDict,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

DEADLINE = 30.0


def _outcome(call: Any) -> str:
    try:
        return f"value:{call()}"
    except ClientStateError as exc:
        return f"ClientStateError:{exc}"
    except BaseException as exc:
        return f"{type(exc).__name__}:{exc}"


def _in_child(go: int, report: int, url: str, namespace: str, d: Any, cache: Any, client: Any) -> None:
    """The child: wait for the parent's change, then say what each face gives (never raises: it reports)."""
    try:
        os.read(go, 1)  # the parent changed the value
        out = {
            "inherited dict": _outcome(lambda: d["k"]),
            "inherited dict, in": _outcome(lambda: "k" in d),
            "inherited cache": _outcome(lambda: cache.get("k")),
            "inherited async client": _outcome(lambda: asyncio.run(client.async_client.get(f"{namespace}/k"))),
        }
        with StateStoreDict.connect(url, namespace=namespace) as fresh:
            out["fresh dict"] = _outcome(lambda: fresh["k"])
        os.write(report, json.dumps(out).encode())
    finally:
        os._exit(0)


def test_a_forked_child_reads_the_new_value_never_the_parents_cached_one(broker_address: tuple[str, int]) -> None:
    host, port = broker_address
    url = f"mqtt://{host}:{port}"
    namespace = f"t{uuid.uuid4().hex[:10]}"
    with StateStoreClient(host, port) as client:
        d: StateStoreDict[Any] = StateStoreDict(client, namespace=namespace)
        cache: StateStoreCache[Any] = StateStoreCache(client, namespace=namespace + "c")
        d["k"] = "old"
        cache.set("k", "old")
        assert d["k"] == "old" and cache.get("k") == "old"
        assert d.local_cache is not None and d.local_cache.peek(f"{namespace}/k".encode()) is not None  # cached
        go_r, go_w = os.pipe()
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports over the pipe
            _in_child(go_r, report_w, url, namespace, d, cache, client)
        os.close(go_r)
        os.close(report_w)
        try:
            d["k"] = "new"  # another process (the parent) changes it
            cache.set("k", "new")
            os.write(go_w, b"x")
            chunks = []
            while chunk := os.read(report_r, 65536):
                chunks.append(chunk)
        finally:
            _, status = os.waitpid(pid, 0)
            os.close(go_w)
            os.close(report_r)
        assert os.waitstatus_to_exitcode(status) == 0
        report = json.loads(b"".join(chunks))
        # the inherited faces never serve the parent's "old": they say the fork is the reason
        for face in ("inherited dict", "inherited dict, in", "inherited cache"):
            assert report[face].startswith("ClientStateError:"), report
            assert "fork" in report[face], report
        assert report["inherited async client"].startswith("ClientStateError:"), report
        assert report["fresh dict"] == "value:new", report
        # the child wrote nothing into the parent's connection: the parent's faces go on as before
        assert d["k"] == "new" and cache.get("k") == "new"
        d["after"] = 1
        assert d["after"] == 1
