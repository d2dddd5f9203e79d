"""The inspector's JSON over HTTP, against a real emulator process (``--inspect 0``) on a real mosquitto.

What the library writes (plain keys, a dict with a stored index, a cache, a leased lock, a watch) must show as what
it is; the prefix filter must filter; a read-only inspector refuses writes, a writable one serves them like a client
(watchers hear about them); the live feed carries the requests another client sends.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

pytest.importorskip("aiohttp", reason="the inspector needs the 'inspect' extra (aiohttp)")

from sskv_mapping import AsyncStateStoreCache, AsyncStateStoreDict
from sskv_mapping._protocol.notifications import KeyOperation
from sskv_mapping.client import AsyncStateStoreClient
from sskv_mapping.lock import AsyncLeasedLock

from .conftest import Inspected

pytestmark = pytest.mark.broker


def _ns() -> str:
    return f"i{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def http(inspected: Inspected) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=inspected.url, timeout=10) as h:
        yield h


@pytest.fixture
async def client(inspected: Inspected) -> AsyncIterator[AsyncStateStoreClient]:
    async with AsyncStateStoreClient(inspected.host, inspected.port) as c:
        yield c


async def _keys(http: httpx.AsyncClient, prefix: str) -> dict[str, Any]:
    r = await http.get("/api/keys", params={"prefix": prefix})
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


async def test_the_page_is_served_and_names_itself(http: httpx.AsyncClient) -> None:
    r = await http.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "<title>sskv emulator inspector</title>" in r.text
    assert 'new EventSource("/api/events")' in r.text


async def test_keys_show_value_version_ttl_and_fencing_token(
    http: httpx.AsyncClient, client: AsyncStateStoreClient
) -> None:
    p = _ns() + "-"
    text = await client.set(p + "text", b"hello world", ttl=30)
    doc = await client.set(p + "json", json.dumps({"a": [1, 2]}).encode())
    raw = await client.set(p + "bin", b"\x00\x01\xfe\xff")
    lock = AsyncLeasedLock(client, p + "lock", lease=20)
    token = await lock.acquire()
    await lock.set(p + "fenced", b"guarded")

    listed = {k["key"]: k for k in (await _keys(http, p))["keys"]}
    assert sorted(listed) == sorted(p + s for s in ("text", "json", "bin", "lock", "fenced"))
    assert listed[p + "text"]["value"] == {"as": "text", "text": "hello world", "size": 11, "cut": False}
    assert listed[p + "text"]["version"] == str(text.version)
    assert 0 < listed[p + "text"]["ttl_ms"] <= 30_000
    assert listed[p + "json"]["value"]["as"] == "json" and listed[p + "json"]["ttl_ms"] is None
    assert listed[p + "json"]["version"] == str(doc.version)
    assert listed[p + "bin"]["value"] == {"as": "hex", "text": "00 01 fe ff", "size": 4, "cut": False}
    assert listed[p + "bin"]["version"] == str(raw.version)
    assert listed[p + "fenced"]["fencing_token"] == str(token)
    assert listed[p + "text"]["fencing_token"] is None
    assert listed[p + "lock"]["lock"] is True and listed[p + "text"]["lock"] is False

    one = (await http.get("/api/key", params={"key_hex": (p + "bin").encode().hex()})).json()
    assert one["value"]["text"] == "00 01 fe ff"
    assert (await http.get("/api/key", params={"key": p + "missing"})).status_code == 404
    assert (await http.get("/api/key")).status_code == 400
    await lock.release()


async def test_the_prefix_filters_keys_namespaces_locks_and_watches(
    http: httpx.AsyncClient, client: AsyncStateStoreClient
) -> None:
    a, b = _ns(), _ns()
    for i in range(3):
        await client.set(f"{a}/k{i}", b"a")
    await client.set(f"{b}/k0", b"b")
    async with client.watch(f"{b}/k0"):
        only_a = await _keys(http, a + "/")
        assert [k["key"] for k in only_a["keys"]] == [f"{a}/k0", f"{a}/k1", f"{a}/k2"]
        assert only_a["matched"] == 3 and only_a["total"] >= 4
        state = (await http.get("/api/state", params={"prefix": a})).json()
        assert [n["namespace"] for n in state["namespaces"]] == [a]
        assert state["watches"]["keys"] == []
        watched = (await http.get("/api/watches", params={"prefix": b})).json()
        assert [(k["key"], k["clients"]) for k in watched["keys"]] == [(f"{b}/k0", [client.client_id])]
        limited = (await http.get("/api/keys", params={"prefix": a, "limit": "1"})).json()
        assert len(limited["keys"]) == 1 and limited["matched"] == 3
    # '²' and '٣' are digits to str.isdigit (and int() takes '٣'): only 0-9 make a limit
    for bad in ("x", "²", "٣", "1²", "-1", "10001", "9" * 40, ""):
        assert (await http.get("/api/keys", params={"limit": bad})).status_code == 400, bad
        assert (await http.get("/api/state", params={"limit": bad})).status_code == 400, bad


async def test_namespaces_of_a_dict_a_cache_and_a_lock_are_recognised(
    http: httpx.AsyncClient, client: AsyncStateStoreClient
) -> None:
    d_ns, c_ns = _ns(), _ns()
    d: AsyncStateStoreDict[object] = AsyncStateStoreDict(client, namespace=d_ns, listing="index")
    await d.set("alpha", {"n": 1})
    await d.set("beta", [1, 2, 3])
    cache: AsyncStateStoreCache[str] = AsyncStateStoreCache(client, namespace=c_ns)
    await cache.set("old", "x", ttl=None)
    await cache.clear()
    await cache.set("s1", "hello", ttl=60)
    await cache.set("s2", "bye", ttl=None)
    lock = AsyncLeasedLock(client, f"{d_ns}-leader", lease=15)
    token = await lock.acquire()
    try:
        spaces = {n["namespace"]: n for n in (await http.get("/api/namespaces")).json()}
        dict_ns = spaces[d_ns]
        assert dict_ns["face"] == "dict" and dict_ns["listing"] == "stored index"
        assert dict_ns["listed"] == 2 and dict_ns["data_keys"] == 2
        assert dict_ns["shards"] >= 1 and 1 <= len(dict_ns["shards_in_use"]) <= 2
        assert dict_ns["listed_without_data"] == [] and dict_ns["data_not_listed"] == []

        cache_ns = spaces[c_ns]
        gen_entry = await client.get(f"{c_ns}#gen".encode())
        assert gen_entry is not None
        gen = json.loads(gen_entry.value)["gen"]
        assert cache_ns["face"] == "cache" and cache_ns["generation"] == gen
        assert cache_ns["entries"] == 2
        # this emulator answers SCAN: a TTL-less entry is written without the ledger, and a clear's sweep scans
        assert cache_ns["ledger_shards"] == 0

        roles = {k["key"]: k["role"] for k in (await _keys(http, c_ns))["keys"]}
        assert roles[f"{c_ns}#g.{gen}/s1"] == {"namespace": c_ns, "face": "cache", "part": "entry", "detail": "s1"}
        assert roles[f"{c_ns}#gen"]["part"] == "generation"

        locks = {k["key"]: k for k in (await http.get("/api/locks", params={"prefix": d_ns})).json()}
        held = locks[f"{d_ns}-leader"]
        assert held["holder"]["text"] == lock.holder.decode()
        assert held["fencing_token"] == str(token)
        assert 0 < held["lease_left_ms"] <= 15_000
    finally:
        await lock.release()
        await cache.close()
        await d.close()
    after = {k["key"] for k in (await http.get("/api/locks", params={"prefix": d_ns})).json()}
    assert f"{d_ns}-leader" not in after


async def test_a_read_only_inspector_refuses_writes(http: httpx.AsyncClient, client: AsyncStateStoreClient) -> None:
    key = _ns()
    await client.set(key, b"kept")
    put = await http.put("/api/key", params={"key": key}, content=b"changed")
    delete = await http.delete("/api/key", params={"key": key})
    assert (put.status_code, delete.status_code) == (403, 403)
    assert "--inspect-writable" in put.text
    assert (await http.post("/api/key", params={"key": key}, content=b"x")).status_code == 405
    kept = await client.get(key)
    assert kept is not None and kept.value == b"kept"


async def test_a_foreign_host_header_is_refused(http: httpx.AsyncClient) -> None:
    # a page on another site that resolves its own name to 127.0.0.1 (DNS rebinding) gets nothing
    r = await http.get("/api/keys", headers={"Host": "attacker.example:80"})
    assert r.status_code == 403


async def test_a_writable_inspector_writes_like_a_client_and_watchers_hear_it(writable: Inspected) -> None:
    key = _ns()
    async with (
        AsyncStateStoreClient(writable.host, writable.port) as c,
        httpx.AsyncClient(base_url=writable.url, timeout=10) as http,
    ):
        async with c.watch(key) as watch:
            put = await http.put("/api/key", params={"key": key, "ttl_ms": "60000"}, content=b"from the page")
            assert put.status_code == 200, put.text
            event = await asyncio.wait_for(anext(watch), 5)
            assert (event.op, event.value) == (KeyOperation.SET, b"from the page")
            assert str(event.version) == put.json()["version"]
            entry = await c.get(key)
            assert entry is not None and entry.value == b"from the page"
            deleted = await http.delete("/api/key", params={"key": key})
            assert deleted.status_code == 200 and deleted.json()["reply"] == ":1"
            event = await asyncio.wait_for(anext(watch), 5)
            assert event.op is KeyOperation.DELETE
        assert await c.get(key) is None
        # a fenced key keeps its protection: the page has no token, so the service's error comes back
        lock = AsyncLeasedLock(c, key + "-lock", lease=10)
        async with lock:
            await lock.set(key, b"guarded")
            refused = await http.put("/api/key", params={"key": key}, content=b"x")
            assert refused.status_code == 409 and "fencing token" in refused.text
        for bad in ("soon", "²", "٣", "0", "-5"):
            assert (await http.put("/api/key", params={"key": key, "ttl_ms": bad})).status_code == 400, bad
        entry = await c.get(key)
        assert entry is not None and entry.value == b"guarded"  # nothing was written


async def _read_events(response: httpx.Response, wanted: Any) -> dict[str, Any]:
    event = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: ") and event == "batch":
            item: dict[str, Any]
            for item in json.loads(line[6:])["events"]:
                if wanted(item):
                    return item
    raise AssertionError("the stream ended")


async def test_the_live_feed_carries_requests_and_their_notifications(
    http: httpx.AsyncClient, inspected: Inspected
) -> None:
    key = _ns()
    async with (
        AsyncStateStoreClient(inspected.host, inspected.port) as writer,
        AsyncStateStoreClient(inspected.host, inspected.port) as watcher,
        http.stream("GET", "/api/events") as stream,
    ):
        assert stream.headers["content-type"] == "text/event-stream"
        async with watcher.watch(key):
            await writer.set(key, b"live", ttl=5)
            seen = await asyncio.wait_for(_read_events(stream, lambda e: e["op"] == "SET" and e.get("key") == key), 10)
    assert seen["client"] == writer.client_id
    assert seen["options"] == "PX 5000" and seen["reply"] == "OK"
    assert seen["value"]["text"] == "live"
    assert seen["notifications"] == [
        {"client": watcher.client_id, "key": key, "key_hex": key.encode().hex(), "key_is_text": True, "op": "SET"}
    ]
