"""A request sent twice is applied once: the emulator as a real process on a real mosquitto.

A request re-sent after a reconnect (DUP=1) reaches the service twice: the broker forwards both copies. Here the
raw test client (tests/_support/miniclient) publishes one request twice with the same correlation data and the
same headers; the second copy must get the first answer, byte for byte, and change nothing. The window's bounds
are tested with an injected clock in test_duplicates.py.
"""

from __future__ import annotations

import uuid

import pytest

from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping.emulator.broker import MosquittoBroker
from tests._support.miniclient import MiniClient, Response
from tests._support.procs import start_emulator
from tests._support.waiting import eventually

from .conftest import Connect

pytestmark = pytest.mark.broker

OK = b"+OK\r\n"
SET_NOTE = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n"
DELETE_NOTE = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"


def key(prefix: str = "dup") -> bytes:
    return f"{prefix}-{uuid.uuid4().hex[:12]}".encode()


class Twice:
    """One request, its headers fixed once, so that it can be published again exactly as it was."""

    def __init__(self, client: MiniClient, *args: bytes, extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.client = client
        self.payload = encode_request(*args)
        self.props = [*client.sdk_props(), *extra]
        self.corr = uuid.uuid4().bytes

    async def send(self, via: MiniClient | None = None) -> Response:
        c = via or self.client
        props = self.props if via is None else [*via.sdk_props()]
        await c.send(self.payload, props, correlation=self.corr)
        return await c.response(self.corr)


async def get(c: MiniClient, k: bytes) -> bytes:
    return (await c.request(b"GET", k)).payload


async def test_a_request_sent_twice_set_nx_is_applied_once(connect: Connect) -> None:
    c = await connect()
    k = key()
    request = Twice(c, b"SET", k, b"mine", b"NX")
    first = await request.send()
    assert first.payload == OK and first.ts is not None
    assert (await c.request(b"DEL", k)).payload == b":1\r\n"  # applied anew, the copy would set it again
    second = await request.send()
    assert second == first  # payload, every header (the same __ts), content type, topic, correlation data
    assert await get(c, k) == b"$-1\r\n"


async def test_a_request_sent_twice_back_to_back_notifies_once(connect: Connect) -> None:
    """Both copies on the wire before the first answer, as a resend after a cut puts them: one change, one
    notification, two identical answers."""
    c, watcher = await connect(), await connect()
    k = key()
    assert (await watcher.request(b"KEYNOTIFY", k)).payload == OK
    request = Twice(c, b"SET", k, b"v", b"NX")
    await c.send(request.payload, request.props, correlation=request.corr)
    await c.send(request.payload, request.props, correlation=request.corr)
    first = await c.response(request.corr)
    await eventually(lambda: len(c.stray_responses) == 1)  # the second answer to the same correlation data
    assert c.stray_responses[0] == first and first.payload == OK
    # one notification of the change: the next one about the key is our DEL's (the emulator notifies in order)
    assert (await c.request(b"DEL", k)).payload == b":1\r\n"
    assert (await watcher.note(k)).payload.startswith(SET_NOTE)
    assert (await watcher.note(k)).payload == DELETE_NOTE


@pytest.mark.parametrize(("delete", "again"), [((b"VDEL", b"v"), b"v"), ((b"DEL",), b"again")], ids=["vdel", "del"])
async def test_a_request_sent_twice_delete_is_applied_once(
    connect: Connect, delete: tuple[bytes, ...], again: bytes
) -> None:
    c = await connect()
    k = key()
    await c.request(b"SET", k, b"v")
    request = Twice(c, delete[0], k, *delete[1:])
    first = await request.send()
    assert first.payload == b":1\r\n"
    await c.request(b"SET", k, again)  # set anew (for VDEL the same value): the copy would delete it
    assert await request.send() == first
    assert await get(c, k) == b"$%d\r\n%s\r\n" % (len(again), again)


async def test_a_request_sent_twice_lock_acquire_takes_the_lock_once(connect: Connect) -> None:
    c, rival = await connect(), await connect()
    lock = key("lock")
    request = Twice(c, b"SET", lock, b"holder-1", b"NEX", b"PX", b"10000")
    first = await request.send()
    assert first.payload == OK
    assert (await c.request(b"VDEL", lock, b"holder-1")).payload == b":1\r\n"  # released
    # applied anew, the late copy would take the lock again for a holder that believes it let it go
    assert await request.send() == first
    assert await get(c, lock) == b"$-1\r\n"
    assert (await rival.request(b"SET", lock, b"holder-2", b"NEX", b"PX", b"10000")).payload == OK


async def test_a_request_sent_twice_fenced_set_is_applied_once(connect: Connect) -> None:
    c = await connect()
    k = key()
    token = str(c.hlc.tick())
    request = Twice(c, b"SET", k, b"old", extra=(("__ft", token),))
    first = await request.send()
    assert first.payload == OK
    assert (await c.request(b"SET", k, b"new", extra=[("__ft", token)])).payload == OK
    assert await request.send() == first
    assert await get(c, k) == b"$3\r\nnew\r\n"  # the copy did not write the older value over it


async def test_the_same_correlation_data_from_another_client_is_not_a_copy(connect: Connect) -> None:
    a, b = await connect(), await connect()
    k = key()
    request = Twice(a, b"SET", k, b"a", b"NX")
    assert (await request.send()).payload == OK
    theirs = await request.send(via=b)  # same payload and correlation data, another client: served on its own
    assert theirs.payload == b":-1\r\n"
    assert await get(a, k) == b"$1\r\na\r\n"


async def test_no_dedup_applies_a_copy_again(fresh_mosquitto: MosquittoBroker) -> None:
    """``--no-dedup``: the emulator as a service that does not de-duplicate, to test an application both ways."""
    proc = start_emulator(fresh_mosquitto.host, fresh_mosquitto.port, "--no-dedup")
    try:
        async with MiniClient(fresh_mosquitto.host, fresh_mosquitto.port) as c:
            k = key()
            request = Twice(c, b"SET", k, b"v", b"NX")
            first = await request.send()
            assert first.payload == OK
            second = await request.send()
            assert second.payload == b":-1\r\n"  # applied again: "not set", for the SET NX that set the key
            assert (await c.request(b"DEL", k)).payload == b":1\r\n"
            assert (await request.send()).payload == OK  # and a late copy sets it again
            assert await get(c, k) == b"$1\r\nv\r\n"
    finally:
        proc.stop()
