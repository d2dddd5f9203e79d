"""A request sent twice is applied once: EmulatorCore with its correlation data, and RecentAnswers' window.

Pure: an injected clock, no sockets, no sleeps. The same over a real mosquitto with the emulator as a process is
in test_duplicates_over_broker.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from sskv_mapping._protocol.hlc import HlcClock, HybridLogicalClock
from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping.emulator.core import CoreResult, EmulatorCore
from sskv_mapping.emulator.duplicates import DEFAULT_MAX_AGE_MS, RecentAnswers
from tests._support.clocks import ManualClock

T0 = 1_700_000_000_000
OK = b"+OK\r\n"


@dataclass
class Sent:
    """One request as it went on the wire: resending it replays exactly these bytes and headers."""

    client: str | None
    payload: bytes
    props: dict[str, str]
    correlation: bytes
    first: CoreResult


@dataclass
class Store:
    clock: ManualClock[int] = field(default_factory=lambda: ManualClock(T0))
    core: EmulatorCore = field(init=False)
    window: int = 50_000
    window_ms: int = DEFAULT_MAX_AGE_MS

    def __post_init__(self) -> None:
        self.core = EmulatorCore(now_ms=self.clock, duplicate_window=self.window, duplicate_window_ms=self.window_ms)

    def send(
        self, *args: bytes, client: str | None = "client-a", ft: HybridLogicalClock | None = None, corr: bytes = b""
    ) -> Sent:
        props = {"__ts": str(HlcClock(client or "anon", now_ms=self.clock).tick())}
        if ft is not None:
            props["__ft"] = str(ft)
        correlation = corr or os.urandom(16)
        payload = encode_request(*args)
        return Sent(client, payload, props, correlation, self.core.handle(client, payload, props, correlation))

    def resend(self, sent: Sent, client: str | None = None) -> CoreResult:
        return self.core.handle(client or sent.client, sent.payload, dict(sent.props), sent.correlation)

    def value(self, key: bytes) -> bytes | None:
        entry = self.core.entry(key)
        return None if entry is None else entry.value


def assert_first_answer(copy: CoreResult, sent: Sent) -> None:
    assert copy.duplicate and not sent.first.duplicate
    assert (copy.payload, copy.version) == (sent.first.payload, sent.first.version)
    assert copy.notifications == []


@pytest.fixture
def s() -> Store:
    return Store()


def test_set_nx_sent_twice_is_applied_once(s: Store) -> None:
    s.core.handle("watcher", encode_request(b"KEYNOTIFY", b"k"), {})
    sent = s.send(b"SET", b"k", b"v1", b"NX")
    assert sent.first.payload == OK and len(sent.first.notifications) == 1
    s.send(b"DEL", b"k")  # the key is gone again: a copy applied anew would set it
    copy = s.resend(sent)
    assert_first_answer(copy, sent)
    assert s.value(b"k") is None


def test_set_nx_copy_after_another_write_is_not_answered_not_set(s: Store) -> None:
    sent = s.send(b"SET", b"k", b"mine", b"NX")
    s.send(b"SET", b"k", b"theirs", client="client-b")
    copy = s.resend(sent)  # applied anew it would answer :-1, "not set", for a SET NX that did set
    assert_first_answer(copy, sent)
    assert copy.payload == OK and s.value(b"k") == b"theirs"


@pytest.mark.parametrize(
    ("delete", "again"), [((b"VDEL", b"k", b"v"), b"v"), ((b"DEL", b"k"), b"again")], ids=["vdel", "del"]
)
def test_a_delete_sent_twice_is_applied_once(s: Store, delete: tuple[bytes, ...], again: bytes) -> None:
    s.send(b"SET", b"k", b"v")
    sent = s.send(*delete)
    assert sent.first.payload == b":1\r\n"
    s.send(b"SET", b"k", again)  # set anew (for VDEL the same value): a copy applied anew would delete it
    assert_first_answer(s.resend(sent), sent)
    assert s.value(b"k") == again


def test_lock_acquire_sent_twice_takes_the_lock_once(s: Store) -> None:
    acquire = s.send(b"SET", b"lock", b"holder-1", b"NEX", b"PX", b"10000")
    assert acquire.first.payload == OK
    s.send(b"VDEL", b"lock", b"holder-1")  # released
    # applied anew, the late copy would take the lock again for a holder that believes it released it
    assert_first_answer(s.resend(acquire), acquire)
    assert s.value(b"lock") is None
    assert s.send(b"SET", b"lock", b"holder-2", b"NEX", b"PX", b"10000", client="client-b").first.payload == OK


def test_fenced_set_sent_twice_is_applied_once(s: Store) -> None:
    token = HybridLogicalClock(T0, 0, "holder")
    sent = s.send(b"SET", b"k", b"old", ft=token)
    assert sent.first.payload == OK
    s.send(b"SET", b"k", b"new", ft=token)
    assert_first_answer(s.resend(sent), sent)
    assert s.value(b"k") == b"new"  # the copy did not write the older value over it


def test_an_error_answer_is_repeated_too(s: Store) -> None:
    token = HybridLogicalClock(T0 + 5, 0, "holder")
    s.send(b"SET", b"k", b"v", ft=token)
    sent = s.send(b"SET", b"k", b"x", ft=HybridLogicalClock(T0, 0, "holder"))
    assert sent.first.payload.startswith(b"-ERR")
    assert_first_answer(s.resend(sent), sent)


def test_keynotify_sent_again_after_a_disconnect_registers_again(s: Store) -> None:
    sent = s.send(b"KEYNOTIFY", b"k")
    assert s.core.drop_client("client-a") == 1  # the client went away: the service forgot its registration
    copy = s.resend(sent)  # re-sent after the reconnect: must register again, not answer from memory
    assert not copy.duplicate and copy.payload == OK
    assert s.core.watchers(b"k") == ["client-a"]
    assert len(s.core.answers) == 0


def test_another_client_with_the_same_correlation_data_is_served(s: Store) -> None:
    sent = s.send(b"SET", b"k", b"v", b"NX")
    other = s.resend(sent, client="client-b")
    assert not other.duplicate and other.payload == b":-1\r\n"


def test_another_request_with_the_same_correlation_data_is_served(s: Store) -> None:
    sent = s.send(b"SET", b"k", b"v1")
    again = s.send(b"SET", b"k", b"v2", corr=sent.correlation)
    assert not again.first.duplicate and again.first.payload == OK
    assert s.value(b"k") == b"v2"
    assert_first_answer(s.resend(again), again)  # the newest request is the one remembered


def test_reads_are_answered_afresh(s: Store) -> None:
    s.send(b"SET", b"k", b"v1")
    get = s.send(b"GET", b"k")
    s.send(b"SET", b"k", b"v2")
    copy = s.resend(get)
    assert not copy.duplicate and copy.payload == b"$2\r\nv2\r\n"
    assert len(s.core.answers) == 2  # the two SETs; GETs, whose answers may be large, are not kept


def test_without_a_client_id_or_correlation_data_nothing_is_remembered(s: Store) -> None:
    sent = s.send(b"SET", b"k", b"v", b"NX", client=None)
    assert not s.resend(sent).duplicate
    props = {"__ts": str(HlcClock("x", now_ms=s.clock).tick())}
    s.core.handle("client-a", encode_request(b"SET", b"j", b"v"), props)
    assert len(s.core.answers) == 0


def test_the_window_is_bounded_in_time() -> None:
    s = Store(window_ms=1_000)
    sent = s.send(b"SET", b"k", b"v", b"NX")
    s.send(b"DEL", b"k")
    s.clock.now += 999
    assert s.resend(sent).duplicate
    s.clock.now += 1
    copy = s.resend(sent)  # forgotten: applied as a new request
    assert not copy.duplicate and copy.payload == OK and s.value(b"k") == b"v"


def test_the_window_is_bounded_in_count() -> None:
    s = Store(window=3)
    first = s.send(b"SET", b"k0", b"v")
    for i in range(1, 4):
        s.send(b"SET", b"k%d" % i, b"v")
    assert len(s.core.answers) == 3
    assert not s.resend(first).duplicate  # the oldest went first
    assert len(s.core.answers) == 3


def test_a_window_of_zero_keeps_nothing() -> None:
    s = Store(window=0)
    sent = s.send(b"SET", b"k", b"v", b"NX")
    assert s.resend(sent).payload == b":-1\r\n"
    assert len(s.core.answers) == 0


def test_recent_answers_forgets_old_entries_when_remembering_new_ones() -> None:
    answers = RecentAnswers(max_entries=100, max_age_ms=1_000)
    for i in range(10):
        answers.remember(("c", b"%d" % i), b"req", b"+OK\r\n", None, now=i * 100)
    assert len(answers) == 10
    answers.remember(("c", b"late"), b"req", b"+OK\r\n", None, now=1_450)  # entries from before 450 are too old
    assert len(answers) == 6
    assert answers.answer(("c", b"4"), b"req", now=1_450) is None
    assert answers.answer(("c", b"5"), b"req", now=1_450) == (b"+OK\r\n", None)


def test_recent_answers_refuses_negative_bounds() -> None:
    with pytest.raises(ValueError):
        RecentAnswers(max_entries=-1)
    with pytest.raises(ValueError):
        RecentAnswers(max_age_ms=-1)
