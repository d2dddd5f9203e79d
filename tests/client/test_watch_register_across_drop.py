"""A KEYNOTIFY in flight when the connection drops: the service applied it on the connection that ended and dropped it
with that connection, while its reply (kept in the session) arrives on the next one. The watch must register again
on the new connection, not take that reply for a live registration (the relay and toxic tests' silent watch: the
emulator saw the old connection's "disconnected" line before the new one's requests every time). Forced order,
in-process, no broker."""

from __future__ import annotations

import asyncio

from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.commands import Get, KeyNotify
from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._transport.backoff import Backoff
from sskv_mapping.client._watches import Watches

KEY = b"watched"


class Link:
    """The client's side as Watches sees it: which connection is up, and every request sent, in order."""

    def __init__(self) -> None:
        self.conn: object | None = object()
        self.sent: list[tuple[object, str]] = []  # (the connection it went out on, the command's name)
        self.hold = asyncio.Event()  # the first KEYNOTIFY's reply is held back until set
        self.held = asyncio.Event()  # set once that KEYNOTIFY was sent
        self.keynotifies = 0

    async def request(self, cmd: object, *, timeout: float | None) -> tuple[bytes, HybridLogicalClock | None]:
        self.sent.append((self.conn, type(cmd).__name__))
        if isinstance(cmd, KeyNotify):
            self.keynotifies += 1
            if self.keynotifies == 1:
                self.held.set()
                await self.hold.wait()
            return b"+OK\r\n", None
        assert isinstance(cmd, Get)
        return resp3.encode_bulk(b"1"), HybridLogicalClock(1, 0, "node")

    def watches(self) -> Watches:
        return Watches(
            self.request,
            connected=lambda: self.conn is not None,
            connection=lambda: self.conn,
            timeout=lambda: 1.0,
            backoff=lambda: Backoff(0.001, 0.001, jitter=False),
        )


def keynotifies_on(link: Link, conn: object) -> int:
    return sum(1 for on, name in link.sent if on is conn and name == "KeyNotify")


async def drop_and_reconnect(link: Link, watches: Watches) -> object:
    """The connection ends while the first KEYNOTIFY waits for its reply; a new one comes up; the reply arrives."""
    await link.held.wait()
    link.conn = None
    watches.dropped()
    link.conn = new = object()
    restore = asyncio.get_running_loop().create_task(watches.restore())  # what the client's on_reconnect starts
    link.hold.set()
    await restore
    return new


async def test_a_watch_added_as_the_connection_drops_registers_again() -> None:
    link = Link()
    watches = link.watches()
    adding = asyncio.get_running_loop().create_task(watches.add(KEY, lambda event: None, timeout=1.0))
    new = await drop_and_reconnect(link, watches)
    await adding
    assert keynotifies_on(link, new) == 1, link.sent
    assert watches.active(KEY)


async def test_a_restore_cut_short_by_a_drop_registers_again() -> None:
    link = Link()
    link.hold.set()  # the first watch's KEYNOTIFY: answered at once
    watches = link.watches()
    await watches.add(KEY, lambda event: None, timeout=1.0)
    link.hold.clear()
    link.held.clear()
    link.keynotifies = 0  # hold the next one: the restore's
    first_drop = object()
    link.conn = None
    watches.dropped()
    link.conn = first_drop
    restoring = asyncio.get_running_loop().create_task(watches.restore())
    new = await drop_and_reconnect(link, watches)
    await restoring
    assert keynotifies_on(link, new) == 1, link.sent
    assert watches.active(KEY)
