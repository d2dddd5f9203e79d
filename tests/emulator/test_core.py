"""EmulatorCore in-process with an injected clock: docs/design/protocol.md §2-§6 row by row, plus a stateful model test.

Nothing here sleeps or touches a socket: time is a number the test moves.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sskv_mapping import errors
from sskv_mapping._protocol import resp3
from sskv_mapping._protocol.commands import Scan
from sskv_mapping._protocol.hlc import HlcClock, HybridLogicalClock
from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping._protocol.topics import NOTIFY_PREFIX
from sskv_mapping.emulator.core import SERVICE_NODE_ID, CoreResult, EmulatorCore, Notification
from sskv_mapping.emulator.scan import glob_match
from tests._support.clocks import ManualClock

T0 = 1_700_000_000_000
SET_NOTE = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n"
DELETE_NOTE = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"


def set_note(value: bytes) -> bytes:
    return SET_NOTE + b"$%d\r\n%s\r\n" % (len(value), value)


def err(cls: type[errors.ServiceError]) -> bytes:
    return b"-ERR " + cls.TEXT.encode() + b"\r\n"


class Store:
    """An EmulatorCore plus SDK-like clients: every request carries a freshly ticked ``__ts``."""

    def __init__(self, max_keys: int | None = None) -> None:
        self.clock = ManualClock(T0)
        self.core = EmulatorCore(now_ms=self.clock, max_keys=max_keys)
        self._client_clocks: dict[str, HlcClock] = {}

    def hlc(self, client: str) -> HlcClock:
        if client not in self._client_clocks:
            self._client_clocks[client] = HlcClock(client, now_ms=self.clock)
        return self._client_clocks[client]

    def call(
        self,
        *args: bytes,
        client: str | None = "client-a",
        ts: str | bool | None = True,
        ft: HybridLogicalClock | str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> CoreResult:
        props: dict[str, str] = {}
        if ts is True:
            props["__ts"] = str(self.hlc(client or "anon").tick())
        elif isinstance(ts, str):
            props["__ts"] = ts
        if ft is not None:
            props["__ft"] = str(ft)
        if extra:
            props.update(extra)
        result = self.core.handle(client, encode_request(*args), props)
        if result.version is not None and client is not None:
            self.hlc(client).update(result.version)
        return result


@pytest.fixture
def s() -> Store:
    return Store()


# -- §2: every response row -----------------------------------------------------------------------------


def test_set_applied_answers_ok_with_the_new_version(s: Store) -> None:
    r = s.call(b"SET", b"k", b"v")
    assert r.payload == b"+OK\r\n"
    assert r.version is not None and r.version.node_id == SERVICE_NODE_ID
    assert s.call(b"GET", b"k").version == r.version


def test_set_nx_skipped_answers_minus_one_with_the_stored_version(s: Store) -> None:
    first = s.call(b"SET", b"k", b"v1")
    r = s.call(b"SET", b"k", b"v2", b"NX")
    assert r.payload == b":-1\r\n" and r.version == first.version
    assert s.call(b"GET", b"k").payload == b"$2\r\nv1\r\n"


def test_set_nx_applies_when_absent(s: Store) -> None:
    assert s.call(b"SET", b"k", b"v", b"NX").payload == b"+OK\r\n"


def test_set_nex_applies_when_absent_or_equal_and_skips_otherwise(s: Store) -> None:
    a = s.call(b"SET", b"lock", b"holder-1", b"NEX", b"PX", b"1000")
    assert a.payload == b"+OK\r\n"
    renewed = s.call(b"SET", b"lock", b"holder-1", b"NEX", b"PX", b"1000")
    assert renewed.payload == b"+OK\r\n"
    assert a.version is not None and renewed.version is not None and renewed.version > a.version
    other = s.call(b"SET", b"lock", b"holder-2", b"NEX", b"PX", b"1000")
    assert other.payload == b":-1\r\n" and other.version == renewed.version


def test_get_hit_returns_the_value_and_its_version(s: Store) -> None:
    v = s.call(b"SET", b"k", b"hello").version
    r = s.call(b"GET", b"k")
    assert r.payload == b"$5\r\nhello\r\n" and r.version == v


def test_get_of_an_empty_value(s: Store) -> None:
    assert s.call(b"SET", b"k", b"").payload == b"+OK\r\n"
    assert s.call(b"GET", b"k").payload == b"$0\r\n\r\n"


def test_get_miss_has_no_version(s: Store) -> None:
    r = s.call(b"GET", b"missing")
    assert r.payload == b"$-1\r\n" and r.version is None


def test_del_deleted_and_missing(s: Store) -> None:
    s.call(b"SET", b"k", b"v")
    assert s.call(b"DEL", b"k").payload == b":1\r\n"
    assert s.call(b"DEL", b"k").payload == b":0\r\n"
    assert s.call(b"GET", b"k").payload == b"$-1\r\n"


def test_vdel_deleted_missing_and_mismatch(s: Store) -> None:
    s.call(b"SET", b"k", b"v")
    assert s.call(b"VDEL", b"k", b"other").payload == b":-1\r\n"
    assert s.call(b"GET", b"k").payload == b"$1\r\nv\r\n"  # a mismatch deletes nothing
    assert s.call(b"VDEL", b"k", b"v").payload == b":1\r\n"
    assert s.call(b"VDEL", b"k", b"v").payload == b":0\r\n"


def test_keynotify_registers_even_when_the_key_does_not_exist(s: Store) -> None:
    r = s.call(b"KEYNOTIFY", b"nothing-here")
    assert r.payload == b"+OK\r\n" and r.version is None
    assert s.core.watchers(b"nothing-here") == ["client-a"]


def test_keynotify_stop_answers_ok_if_registered_else_zero(s: Store) -> None:
    assert s.call(b"KEYNOTIFY", b"k", b"STOP").payload == b":0\r\n"
    s.call(b"KEYNOTIFY", b"k")
    assert s.call(b"KEYNOTIFY", b"k", b"STOP").payload == b"+OK\r\n"
    assert s.call(b"KEYNOTIFY", b"k", b"STOP").payload == b":0\r\n"


def test_delete_responses_carry_the_delete_version_and_no_ops_carry_none(s: Store) -> None:
    s.call(b"SET", b"k", b"v")
    s.call(b"KEYNOTIFY", b"k")
    r = s.call(b"DEL", b"k")
    assert r.version is not None and r.notifications[0].version == r.version
    assert s.call(b"DEL", b"k").version is None
    s.call(b"SET", b"k", b"v")
    assert s.call(b"VDEL", b"k", b"x").version is None


def test_lower_case_verbs_and_options_are_accepted(s: Store) -> None:
    assert s.call(b"set", b"k", b"v", b"nx", b"px", b"100").payload == b"+OK\r\n"
    assert s.call(b"get", b"k").payload == b"$1\r\nv\r\n"


def test_the_request_is_not_changed_by_an_expired_key_being_read(s: Store) -> None:
    s.call(b"SET", b"k", b"v", b"PX", b"100")
    s.clock.advance(99)
    assert s.call(b"GET", b"k").payload == b"$1\r\nv\r\n"
    s.clock.advance(1)
    assert s.call(b"GET", b"k").payload == b"$-1\r\n"


# -- §3: every error text --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", errors.RequestSyntaxError),
        (b"garbage", errors.RequestSyntaxError),
        (b"*1\r\n$3\r\nGET\r\n\r\n", errors.RequestSyntaxError),  # trailing bytes
        (b"*2\r\n$3\r\nGET\r\n$5\r\nk\r\n", errors.RequestSyntaxError),  # wrong length
        (b"*0\r\n", errors.RequestSyntaxError),
        (b"*1\r\n:1\r\n", errors.RequestSyntaxError),
        (encode_request(b"SET", b"k", b"v", b"PX", b"soon"), errors.RequestSyntaxError),
        (encode_request(b"SET", b"k", b"v", b"PX"), errors.RequestSyntaxError),
        (encode_request(b"SET", b"k", b"v", b"PX", b"10", b"NX"), errors.RequestSyntaxError),
        (encode_request(b"SET", b"k", b"v", b"XX"), errors.RequestSyntaxError),
        (encode_request(b"KEYNOTIFY", b"k", b"GO"), errors.RequestSyntaxError),
        (encode_request(b"FLUSHALL"), errors.UnknownCommandError),
        (encode_request(b"HGET", b"k", b"f"), errors.UnknownCommandError),
        (encode_request(b"GET"), errors.WrongNumberOfArgumentsError),
        (encode_request(b"GET", b"a", b"b"), errors.WrongNumberOfArgumentsError),
        (encode_request(b"SET", b"k"), errors.WrongNumberOfArgumentsError),
        (encode_request(b"VDEL", b"k"), errors.WrongNumberOfArgumentsError),
        (encode_request(b"DEL", b"a", b"b"), errors.WrongNumberOfArgumentsError),
        (encode_request(b"GET", b""), errors.KeyLengthZeroError),
        (encode_request(b"SET", b"", b"v"), errors.KeyLengthZeroError),
        (encode_request(b"DEL", b""), errors.KeyLengthZeroError),
        (encode_request(b"KEYNOTIFY", b""), errors.KeyLengthZeroError),
    ],
)
def test_malformed_requests_get_the_service_error_text(
    s: Store, payload: bytes, expected: type[errors.ServiceError]
) -> None:
    r = s.core.handle("client-a", payload, {"__ts": str(s.hlc("client-a").tick())})
    assert r.payload == err(expected)
    assert r.version is None and r.notifications == []


def test_set_without_timestamp_is_refused(s: Store) -> None:
    assert s.call(b"SET", b"k", b"v", ts=None).payload == err(errors.MissingTimestampError)
    assert s.call(b"GET", b"k").payload == b"$-1\r\n"


@pytest.mark.parametrize("verb", [(b"GET", b"k"), (b"DEL", b"k"), (b"VDEL", b"k", b"v"), (b"KEYNOTIFY", b"k")])
def test_other_commands_do_not_need_a_timestamp(s: Store, verb: tuple[bytes, ...]) -> None:
    assert not s.call(*verb, ts=None).payload.startswith(b"-ERR")


@pytest.mark.parametrize("bad", ["", "nonsense", "1:2", "1:2:3:4", "-1:0:n", "x:0:n", "1:y:n", "1 :0:n"])
@pytest.mark.parametrize("verb", [(b"SET", b"k", b"v"), (b"GET", b"k"), (b"DEL", b"k")])
def test_malformed_timestamp(s: Store, bad: str, verb: tuple[bytes, ...]) -> None:
    assert s.call(*verb, ts=bad).payload == err(errors.MalformedTimestampError)


@pytest.mark.parametrize("bad", ["", "garbage", "1:2", "99999999999999999999999:0:n"])
def test_malformed_fencing_token(s: Store, bad: str) -> None:
    assert s.call(b"SET", b"k", b"v", ft=bad).payload == err(errors.MalformedTimestampError)
    assert s.call(b"DEL", b"k", ft=bad).payload == err(errors.MalformedTimestampError)


def test_timestamp_more_than_60s_ahead_is_refused_and_exactly_60s_is_fine(s: Store) -> None:
    ahead = str(HybridLogicalClock(T0 + 60_001, 0, "client-a"))
    assert s.call(b"SET", b"k", b"v", ts=ahead).payload == err(errors.TimestampSkewError)
    assert s.call(b"GET", b"k", ts=ahead).payload == err(errors.TimestampSkewError)
    edge = str(HybridLogicalClock(T0 + 60_000, 7, "client-a"))
    assert s.call(b"SET", b"k", b"v", ts=edge).payload == b"+OK\r\n"


def test_timestamps_in_the_past_never_fail(s: Store) -> None:
    old = str(HybridLogicalClock(1, 0, "client-a"))
    assert s.call(b"SET", b"k", b"v", ts=old).payload == b"+OK\r\n"


def test_fencing_token_more_than_60s_ahead_is_refused(s: Store) -> None:
    ahead = HybridLogicalClock(T0 + 60_001, 0, "client-a")
    assert s.call(b"SET", b"k", b"v", ft=ahead).payload == err(errors.FencingTokenSkewError)
    assert s.call(b"SET", b"k", b"v", ft=HybridLogicalClock(T0 + 60_000, 0, "c")).payload == b"+OK\r\n"


def test_quota(s: Store) -> None:
    q = Store(max_keys=2)
    assert q.call(b"SET", b"a", b"1").payload == b"+OK\r\n"
    assert q.call(b"SET", b"b", b"1", b"PX", b"50").payload == b"+OK\r\n"
    assert q.call(b"SET", b"c", b"1").payload == err(errors.QuotaExceededError)
    assert q.call(b"SET", b"a", b"2").payload == b"+OK\r\n"  # overwriting needs no new slot
    assert q.call(b"GET", b"c").payload == b"$-1\r\n"
    q.clock.advance(50)  # b expires: its slot is free again
    assert q.call(b"SET", b"c", b"1").payload == b"+OK\r\n"
    assert q.call(b"DEL", b"a").payload == b":1\r\n"
    assert q.call(b"SET", b"d", b"1").payload == b"+OK\r\n"


def test_quota_zero_refuses_every_new_key() -> None:
    assert Store(max_keys=0).call(b"SET", b"a", b"1").payload == err(errors.QuotaExceededError)


def test_keynotify_without_a_known_client_is_not_authorized(s: Store) -> None:
    assert s.call(b"KEYNOTIFY", b"k", client=None).payload == err(errors.NotAuthorizedError)


# -- §4: notifications ------------------------------------------------------------------------------------


def test_set_and_delete_notifications_go_to_every_registered_client_including_the_writer(s: Store) -> None:
    s.call(b"KEYNOTIFY", b"k", client="a")
    s.call(b"KEYNOTIFY", b"k", client="b")
    s.call(b"KEYNOTIFY", b"other", client="c")
    r = s.call(b"SET", b"k", b"v1", client="a")
    assert [(n.client_id, n.key, n.payload, n.version) for n in r.notifications] == [
        ("a", b"k", set_note(b"v1"), r.version),
        ("b", b"k", set_note(b"v1"), r.version),
    ]
    d = s.call(b"DEL", b"k", client="c")
    assert [(n.client_id, n.payload, n.version) for n in d.notifications] == [
        ("a", DELETE_NOTE, d.version),
        ("b", DELETE_NOTE, d.version),
    ]


def test_notification_of_an_empty_value_carries_value(s: Store) -> None:
    s.call(b"KEYNOTIFY", b"k")
    assert (
        s.call(b"SET", b"k", b"").notifications[0].payload == b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n"
        b"$5\r\nVALUE\r\n$0\r\n\r\n"
    )


def test_vdel_notifies_delete(s: Store) -> None:
    s.call(b"SET", b"k", b"v")
    s.call(b"KEYNOTIFY", b"k")
    assert s.call(b"VDEL", b"k", b"x").notifications == []
    assert [n.payload for n in s.call(b"VDEL", b"k", b"v").notifications] == [DELETE_NOTE]


def test_nothing_is_sent_for_changes_that_did_not_happen(s: Store) -> None:
    s.call(b"SET", b"k", b"v")
    s.call(b"KEYNOTIFY", b"k")
    s.call(b"KEYNOTIFY", b"gone")
    assert s.call(b"SET", b"k", b"w", b"NX").notifications == []
    assert s.call(b"SET", b"k", b"w", b"NEX").notifications == []
    assert s.call(b"DEL", b"gone").notifications == []
    assert s.call(b"GET", b"k").notifications == []
    assert s.call(b"SET", b"k", b"w", ts=None).notifications == []  # error: nothing changed


def test_nothing_before_keynotify_and_nothing_after_stop(s: Store) -> None:
    assert s.call(b"SET", b"k", b"before").notifications == []
    s.call(b"KEYNOTIFY", b"k")
    assert len(s.call(b"SET", b"k", b"during").notifications) == 1
    s.call(b"KEYNOTIFY", b"k", b"STOP")
    assert s.call(b"SET", b"k", b"after").notifications == []
    assert s.core.registrations("client-a") == set()


def test_registering_twice_gives_one_notification(s: Store) -> None:
    s.call(b"KEYNOTIFY", b"k")
    s.call(b"KEYNOTIFY", b"k")
    assert len(s.call(b"SET", b"k", b"v").notifications) == 1


def test_drop_client_removes_only_its_registrations(s: Store) -> None:
    s.call(b"KEYNOTIFY", b"k1", client="a")
    s.call(b"KEYNOTIFY", b"k2", client="a")
    s.call(b"KEYNOTIFY", b"k1", client="b")
    assert s.core.drop_client("a") == 2
    assert s.core.drop_client("a") == 0
    assert s.core.drop_client("never-seen") == 0
    assert [n.client_id for n in s.call(b"SET", b"k1", b"v").notifications] == ["b"]
    assert s.call(b"SET", b"k2", b"v").notifications == []
    assert s.call(b"KEYNOTIFY", b"k1", b"STOP", client="a").payload == b":0\r\n"


def test_notification_topic_is_upper_case_hex_of_client_and_key() -> None:
    n = Notification("client-id1", b"SOMEKEY", DELETE_NOTE, HybridLogicalClock(1, 0, "StateStore"))
    assert n.topic == NOTIFY_PREFIX + "636C69656E742D696431/command/notify/534F4D454B4559"


# -- expiry -------------------------------------------------------------------------------------------------


def test_expiry_via_expire_due_notifies_watchers_without_anyone_touching_the_key(s: Store) -> None:
    set_r = s.call(b"SET", b"k", b"v", b"PX", b"200")
    s.call(b"KEYNOTIFY", b"k", client="w")
    assert s.core.next_expiry() == T0 + 200
    assert s.core.expire_due(T0 + 199) == []
    notes = s.core.expire_due(T0 + 200)
    assert [(n.client_id, n.key, n.payload) for n in notes] == [("w", b"k", DELETE_NOTE)]
    assert set_r.version is not None and notes[0].version > set_r.version
    assert s.core.next_expiry() is None
    assert b"k" not in s.core


def test_expire_due_defaults_to_the_injected_clock(s: Store) -> None:
    s.call(b"SET", b"k", b"v", b"PX", b"10")
    s.call(b"KEYNOTIFY", b"k")
    s.clock.advance(9)
    assert s.core.expire_due() == []
    s.clock.advance(1)
    assert [n.payload for n in s.core.expire_due()] == [DELETE_NOTE]


def test_lazy_expiry_on_access_sends_the_delete_before_the_next_change(s: Store) -> None:
    s.call(b"SET", b"k", b"v", b"PX", b"100")
    s.call(b"KEYNOTIFY", b"k")
    s.clock.advance(150)
    r = s.call(b"SET", b"k", b"new")
    assert r.payload == b"+OK\r\n"
    assert [n.payload for n in r.notifications] == [DELETE_NOTE, set_note(b"new")]
    assert r.notifications[0].version < r.notifications[1].version


def test_lazy_expiry_is_reported_even_with_an_error_reply(s: Store) -> None:
    s.call(b"SET", b"k", b"v", b"PX", b"100")
    s.call(b"KEYNOTIFY", b"k")
    s.clock.advance(100)
    r = s.core.handle("client-a", b"garbage", {})
    assert r.payload == err(errors.RequestSyntaxError)
    assert [n.payload for n in r.notifications] == [DELETE_NOTE]


def test_set_without_px_makes_the_key_persistent_again(s: Store) -> None:
    s.call(b"SET", b"k", b"v", b"PX", b"100")
    s.call(b"SET", b"k", b"v2")
    assert s.core.next_expiry() is None
    s.clock.advance(1_000)
    assert s.call(b"GET", b"k").payload == b"$2\r\nv2\r\n"


def test_renewal_extends_the_expiry(s: Store) -> None:
    s.call(b"SET", b"lock", b"me", b"NEX", b"PX", b"100")
    s.clock.advance(80)
    s.call(b"SET", b"lock", b"me", b"NEX", b"PX", b"100")
    assert s.core.next_expiry() == T0 + 180
    s.clock.advance(80)
    assert s.call(b"GET", b"lock").payload == b"$2\r\nme\r\n"
    assert s.core.expire_due(T0 + 180) == [] and b"lock" not in s.core


def test_next_expiry_is_the_earliest_and_many_rewrites_stay_correct(s: Store) -> None:
    for i in range(5_000):  # enough stale heap entries to force a rebuild
        s.call(b"SET", b"hot", b"%d" % i, b"PX", b"100000")
    s.call(b"SET", b"soon", b"x", b"PX", b"5")
    assert s.core.next_expiry() == T0 + 5
    s.clock.advance(5)
    s.core.expire_due()
    assert s.core.next_expiry() == T0 + 100_000
    assert len(s.core._expiries) < 2_000


# -- §5: versions ----------------------------------------------------------------------------------------


def test_versions_strictly_increase_per_key_even_when_the_wall_clock_stands_still_or_goes_back(
    s: Store,
) -> None:
    seen = []
    for step in (0, 0, 5, -1_000, 0, 3):
        s.clock.advance(step)
        v = s.call(b"SET", b"k", b"v").version
        assert v is not None
        seen.append(v)
    assert all(a < b for a, b in itertools.pairwise(seen))


@pytest.mark.parametrize(
    "ts",
    [
        pytest.param(HybridLogicalClock(T0 + 59_000, 42, "zzz-client"), id="from-the-future"),
        pytest.param(HybridLogicalClock(T0 + 10_000, 3, SERVICE_NODE_ID), id="carrying-the-service-node-id"),
        pytest.param(HybridLogicalClock(T0 + 1_000, 2**64 - 1, "client-a"), id="counter-at-its-maximum"),
        pytest.param(HybridLogicalClock(T0 + 1_000, 2**64 - 1, SERVICE_NODE_ID), id="service-counter-at-its-maximum"),
    ],
)
def test_version_is_newer_than_the_request_timestamp(s: Store, ts: HybridLogicalClock) -> None:
    r = s.call(b"SET", b"k", b"v", ts=str(ts))
    assert r.payload == b"+OK\r\n" and r.version is not None and r.version > ts
    assert r.version.node_id == SERVICE_NODE_ID
    later = s.call(b"SET", b"other", b"v", ts=str(HybridLogicalClock(T0, 0, "c"))).version
    assert later is not None and later > r.version  # the service clock keeps the merged value
    last = s.call(b"SET", b"k", b"w").version  # the writer's own clock has seen r.version
    assert last is not None and last > later


def test_version_after_delete_is_newer_than_everything_before(s: Store) -> None:
    v1 = s.call(b"SET", b"k", b"v").version
    d = s.call(b"DEL", b"k").version
    v2 = s.call(b"SET", b"k", b"v").version
    assert v1 is not None and d is not None and v2 is not None and v1 < d < v2


def test_versions_use_the_wall_clock_when_it_moves_on(s: Store) -> None:
    s.clock.advance(1234)
    v = s.call(b"SET", b"k", b"v").version
    assert v is not None and v.wall_ms == T0 + 1234
    assert str(v) == f"00{T0 + 1234}:{v.counter:05d}:StateStore"


# -- §6: fencing ------------------------------------------------------------------------------------------


def token(ms_after: int, counter: int = 0) -> HybridLogicalClock:
    return HybridLogicalClock(T0 + ms_after, counter, "holder")


def test_set_with_a_token_fences_the_key(s: Store) -> None:
    assert s.call(b"SET", b"k", b"v", ft=token(0)).payload == b"+OK\r\n"
    entry = s.core.entry(b"k")
    assert entry is not None and entry.fencing_token == token(0)
    required = err(errors.FencingTokenRequiredError)
    assert s.call(b"SET", b"k", b"v2").payload == required
    assert s.call(b"DEL", b"k").payload == required
    assert s.call(b"VDEL", b"k", b"v").payload == required
    assert s.call(b"SET", b"k", b"v2", b"NX").payload == required
    assert s.call(b"GET", b"k").payload == b"$1\r\nv\r\n"  # GET never needs a token


def test_older_token_is_refused_equal_and_newer_accepted_and_newer_stored(s: Store) -> None:
    s.call(b"SET", b"k", b"v", ft=token(10, 5))
    lower = err(errors.FencingTokenLowerVersionError)
    assert s.call(b"SET", b"k", b"x", ft=token(10, 4)).payload == lower
    assert s.call(b"SET", b"k", b"x", ft=token(9, 99)).payload == lower
    assert s.call(b"DEL", b"k", ft=token(10, 4)).payload == lower
    assert s.call(b"VDEL", b"k", b"v", ft=token(10, 4)).payload == lower
    assert s.call(b"SET", b"k", b"equal", ft=token(10, 5)).payload == b"+OK\r\n"
    assert s.call(b"SET", b"k", b"newer", ft=token(11)).payload == b"+OK\r\n"
    assert s.call(b"SET", b"k", b"x", ft=token(10, 5)).payload == lower  # the newer one is stored now
    assert s.call(b"GET", b"k").payload == b"$5\r\nnewer\r\n"


def test_node_id_breaks_ties_between_tokens(s: Store) -> None:
    s.call(b"SET", b"k", b"v", ft=HybridLogicalClock(T0, 0, "b"))
    assert s.call(b"SET", b"k", b"v", ft=HybridLogicalClock(T0, 0, "a")).payload == err(
        errors.FencingTokenLowerVersionError
    )
    assert s.call(b"SET", b"k", b"v", ft=HybridLogicalClock(T0, 0, "c")).payload == b"+OK\r\n"


def test_newer_token_deletes_and_the_token_goes_with_the_key(s: Store) -> None:
    s.call(b"SET", b"k", b"v", ft=token(0))
    assert s.call(b"DEL", b"k", ft=token(1)).payload == b":1\r\n"
    assert s.call(b"SET", b"k", b"plain").payload == b"+OK\r\n"  # no token needed any more
    assert s.call(b"DEL", b"k").payload == b":1\r\n"


def test_vdel_with_token(s: Store) -> None:
    s.call(b"SET", b"k", b"v", ft=token(0))
    assert s.call(b"VDEL", b"k", b"other", ft=token(0)).payload == b":-1\r\n"
    assert s.call(b"VDEL", b"k", b"v", ft=token(0)).payload == b":1\r\n"
    assert s.call(b"SET", b"k", b"v").payload == b"+OK\r\n"


def test_expiry_drops_the_token(s: Store) -> None:
    s.call(b"SET", b"k", b"v", b"PX", b"100", ft=token(0))
    s.clock.advance(100)
    assert s.call(b"SET", b"k", b"v").payload == b"+OK\r\n"


def test_token_on_an_unfenced_existing_key_is_stored(s: Store) -> None:
    s.call(b"SET", b"k", b"v")
    assert s.call(b"SET", b"k", b"v2", ft=token(0)).payload == b"+OK\r\n"
    assert s.call(b"SET", b"k", b"v3").payload == err(errors.FencingTokenRequiredError)


def test_token_on_delete_of_a_missing_or_unfenced_key_is_fine(s: Store) -> None:
    assert s.call(b"DEL", b"nothing", ft=token(0)).payload == b":0\r\n"
    s.call(b"SET", b"k", b"v")
    assert s.call(b"DEL", b"k", ft=token(0)).payload == b":1\r\n"


def test_skipped_set_does_not_store_its_token(s: Store) -> None:
    s.call(b"SET", b"k", b"v")
    assert s.call(b"SET", b"k", b"w", b"NX", ft=token(0)).payload == b":-1\r\n"
    assert s.call(b"SET", b"k", b"w").payload == b"+OK\r\n"


def test_leased_lock_pattern_rejects_a_stale_holder(s: Store) -> None:
    first = s.call(b"SET", b"lock", b"A", b"NEX", b"PX", b"1000", client="A")
    assert first.payload == b"+OK\r\n" and first.version is not None
    token_a = first.version  # the response __ts is the fencing token
    assert s.call(b"SET", b"data", b"by A", ft=token_a, client="A").payload == b"+OK\r\n"
    assert s.call(b"SET", b"lock", b"B", b"NEX", b"PX", b"1000", client="B").payload == b":-1\r\n"
    s.clock.advance(1000)  # A pauses, its lease runs out
    second = s.call(b"SET", b"lock", b"B", b"NEX", b"PX", b"1000", client="B")
    assert second.payload == b"+OK\r\n" and second.version is not None and second.version > token_a
    assert s.call(b"SET", b"data", b"by B", ft=second.version, client="B").payload == b"+OK\r\n"
    assert s.call(b"SET", b"data", b"stale A", ft=token_a, client="A").payload == err(
        errors.FencingTokenLowerVersionError
    )
    assert s.call(b"VDEL", b"lock", b"B", client="B").payload == b":1\r\n"


# -- binary-safe keys and values, sizes ----------------------------------------------------------------


@pytest.mark.parametrize("key", [b"a\r\nb", b"\x00", b"\r\n", b"\x00\r\n\xff$3\r\n", "ключ".encode()])
def test_binary_keys(s: Store, key: bytes) -> None:
    s.call(b"KEYNOTIFY", key)
    r = s.call(b"SET", key, b"v\r\n\x00")
    assert r.payload == b"+OK\r\n" and r.notifications[0].key == key
    assert s.call(b"GET", key).payload == b"$4\r\nv\r\n\x00\r\n"
    assert s.call(b"DEL", key).payload == b":1\r\n"


def test_large_key_and_value(s: Store) -> None:
    key = bytes(range(256)) * 25 + b"k" * 100  # 6,500 bytes
    value = b"\r\n\x00" * 21_666 + b"xy"  # 65,000 bytes
    assert len(key) == 6_500 and len(value) == 65_000
    assert s.call(b"SET", key, value).payload == b"+OK\r\n"
    assert s.call(b"GET", key).payload == b"$65000\r\n" + value + b"\r\n"


# -- persistence ------------------------------------------------------------------------------------------


def test_persistent_entries_round_trip(s: Store) -> None:
    on = {"aio-persistence": "true"}
    s.call(b"SET", b"p1", b"\x00kept", extra=on)
    s.call(b"SET", b"p2", b"kept", b"PX", b"10000", ft=token(0), extra=on)
    s.call(b"SET", b"p3", b"dies", b"PX", b"10", extra=on)
    s.call(b"SET", b"volatile", b"lost")
    data = s.core.dump_persistent()
    assert {json.loads(data)["format"]} == {1}
    s.clock.advance(10)
    other = EmulatorCore(now_ms=s.clock)
    assert other.load_persistent(data) == 2
    assert sorted(other.keys()) == [b"p1", b"p2"]
    p2 = other.entry(b"p2")
    original = s.core.entry(b"p2")
    assert p2 is not None and original is not None
    assert (p2.value, p2.version, p2.fencing_token, p2.expires_at_ms) == (
        b"kept",
        original.version,
        token(0),
        T0 + 10_000,
    )
    assert other.next_expiry() == T0 + 10_000
    # new versions stay newer than anything restored
    v = other.handle("c", encode_request(b"SET", b"p1", b"x"), {"__ts": str(HybridLogicalClock(1, 0, "c"))})
    assert v.version is not None and v.version > original.version


def test_persistence_generation_tracks_persistent_changes_only(s: Store) -> None:
    g0 = s.core.persistence_generation
    s.call(b"SET", b"v", b"x")
    assert s.core.persistence_generation == g0
    s.call(b"SET", b"p", b"x", extra={"aio-persistence": "true"})
    g1 = s.core.persistence_generation
    assert g1 > g0
    s.call(b"SET", b"p", b"y")  # overwritten without persistence: no longer persisted
    assert s.core.persistence_generation > g1
    assert json.loads(s.core.dump_persistent())["entries"] == []


@pytest.mark.parametrize("data", [b"", b"{}", b"[]", b'{"format": 1}', b'{"format": 1, "clock": "x"}'])
def test_loading_garbage_raises_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        EmulatorCore().load_persistent(data)


# -- hypothesis: the core against a simple model -------------------------------------------------------

KEYS = (b"a", b"b\r\n", b"\x00")
VALUES = (b"", b"x", b"y")
CLIENTS = ("c1", "c2")


@dataclass
class ModelEntry:
    value: bytes
    expires_at: int | None
    token: HybridLogicalClock | None
    version: HybridLogicalClock


class CoreModel(RuleBasedStateMachine):
    """Runs random commands on the core and a dict-based model side by side."""

    @initialize()
    def setup(self) -> None:
        self.now = T0
        self.core = EmulatorCore(now_ms=lambda: self.now, scan_page_size=1)  # SCAN: many pages
        self.model: dict[bytes, ModelEntry] = {}
        self.watch: dict[str, set[bytes]] = {c: set() for c in CLIENTS}
        self.client_clock = {c: HlcClock(c, now_ms=lambda: self.now) for c in CLIENTS}
        self.last_version: HybridLogicalClock | None = None

    def _expire_model(self) -> list[tuple[str, bytes, bytes]]:
        expected = []
        for key, e in sorted(self.model.items(), key=lambda kv: kv[1].expires_at or 0):
            if e.expires_at is not None and e.expires_at <= self.now:
                del self.model[key]
                expected += [(c, key, DELETE_NOTE) for c in CLIENTS if key in self.watch[c]]
        return expected

    def _call(
        self, client: str, props: dict[str, str], *args: bytes
    ) -> tuple[CoreResult, list[tuple[str, bytes, bytes]]]:
        props["__ts"] = str(self.client_clock[client].tick())
        expired = self._expire_model()
        r = self.core.handle(client, encode_request(*args), props)
        got = [(n.client_id, n.key, n.payload) for n in r.notifications]
        # expiry notifications first, in any order among keys expiring in the same step
        assert sorted(got[: len(expired)]) == sorted(expired)
        if r.version is not None:
            if self.last_version is not None and r.payload in (b"+OK\r\n", b":1\r\n"):
                assert r.version > self.last_version  # every change gets a newer version
            if r.payload in (b"+OK\r\n", b":1\r\n"):
                self.last_version = r.version
        return r, got[len(expired) :]

    def _fence_error(self, entry: ModelEntry | None, ft: HybridLogicalClock | None) -> bytes | None:
        if entry is None or entry.token is None:
            return None
        if ft is None:
            return err(errors.FencingTokenRequiredError)
        if ft < entry.token:
            return err(errors.FencingTokenLowerVersionError)
        return None

    @rule(
        client=st.sampled_from(CLIENTS),
        key=st.sampled_from(KEYS),
        value=st.sampled_from(VALUES),
        cond=st.sampled_from([None, b"NX", b"NEX"]),
        px=st.none() | st.integers(1, 300),
        ft=st.none() | st.integers(0, 4),
    )
    def set(self, client: str, key: bytes, value: bytes, cond: bytes | None, px: int | None, ft: int | None) -> None:
        args = [b"SET", key, value]
        if cond:
            args.append(cond)
        if px is not None:
            args += [b"PX", b"%d" % px]
        token_ = None if ft is None else HybridLogicalClock(T0, ft, "holder")
        props = {} if token_ is None else {"__ft": str(token_)}
        r, notes = self._call(client, props, *args)
        entry = self.model.get(key)
        fence = self._fence_error(entry, token_)
        if fence is not None:
            assert (r.payload, notes) == (fence, [])
            return
        if entry is not None and (cond == b"NX" or (cond == b"NEX" and entry.value != value)):
            assert (r.payload, r.version, notes) == (b":-1\r\n", entry.version, [])
            return
        assert r.payload == b"+OK\r\n" and r.version is not None
        stored = entry.token if entry is not None else None
        if token_ is not None and (stored is None or token_ > stored):
            stored = token_
        self.model[key] = ModelEntry(value, None if px is None else self.now + px, stored, r.version)
        assert sorted(notes) == [(c, key, set_note(value)) for c in CLIENTS if key in self.watch[c]]

    @rule(client=st.sampled_from(CLIENTS), key=st.sampled_from(KEYS))
    def get(self, client: str, key: bytes) -> None:
        r, notes = self._call(client, {}, b"GET", key)
        entry = self.model.get(key)
        assert notes == []
        if entry is None:
            assert (r.payload, r.version) == (b"$-1\r\n", None)
        else:
            assert r.payload == b"$%d\r\n%s\r\n" % (len(entry.value), entry.value)
            assert r.version == entry.version

    @rule(
        client=st.sampled_from(CLIENTS),
        key=st.sampled_from(KEYS),
        value=st.none() | st.sampled_from(VALUES),
        ft=st.none() | st.integers(0, 4),
    )
    def delete(self, client: str, key: bytes, value: bytes | None, ft: int | None) -> None:
        token_ = None if ft is None else HybridLogicalClock(T0, ft, "holder")
        props = {} if token_ is None else {"__ft": str(token_)}
        args = [b"DEL", key] if value is None else [b"VDEL", key, value]
        r, notes = self._call(client, props, *args)
        entry = self.model.get(key)
        if entry is None:
            assert (r.payload, notes) == (b":0\r\n", [])
            return
        fence = self._fence_error(entry, token_)
        if fence is not None:
            assert (r.payload, notes) == (fence, [])
            return
        if value is not None and value != entry.value:
            assert (r.payload, notes) == (b":-1\r\n", [])
            return
        assert r.payload == b":1\r\n"
        del self.model[key]
        assert sorted(notes) == [(c, key, DELETE_NOTE) for c in CLIENTS if key in self.watch[c]]

    @rule(client=st.sampled_from(CLIENTS), key=st.sampled_from(KEYS), stop=st.booleans())
    def keynotify(self, client: str, key: bytes, stop: bool) -> None:
        r, notes = self._call(client, {}, b"KEYNOTIFY", key, *([b"STOP"] if stop else []))
        assert notes == []
        if stop:
            assert r.payload == (b"+OK\r\n" if key in self.watch[client] else b":0\r\n")
            self.watch[client].discard(key)
        else:
            assert r.payload == b"+OK\r\n"
            self.watch[client].add(key)

    @rule(client=st.sampled_from(CLIENTS))
    def disconnect(self, client: str) -> None:
        assert self.core.drop_client(client) == len(self.watch[client])
        self.watch[client].clear()

    @rule(ms=st.integers(1, 200))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule(client=st.sampled_from(CLIENTS), pattern=st.sampled_from([b"*", b"a*", b"?", b"[!a]*", b"b[\r]?"]))
    def scan(self, client: str, pattern: bytes) -> None:
        # SCAN lists exactly the live keys the glob matches, once each, however the pages fall
        listed: list[bytes] = []
        token: bytes | None = None
        while True:
            cmd = Scan(pattern, token)
            r, notes = self._call(client, {}, *resp3.parse_request(cmd.encode()))
            assert notes == [] and r.version is None
            page = cmd.decode(r.payload)
            listed += page.keys
            if page.token is None:
                break
            token = page.token
        live = [k for k, e in self.model.items() if e.expires_at is None or e.expires_at > self.now]
        assert sorted(listed) == sorted(k for k in live if glob_match(pattern, k))

    @precondition(lambda self: self.core.next_expiry() is not None)
    @rule()
    def timer_fires(self) -> None:
        due = self.core.next_expiry()
        assert due is not None
        self.now = max(self.now, due)
        expected = self._expire_model()
        got = [(n.client_id, n.key, n.payload) for n in self.core.expire_due()]
        assert sorted(got) == sorted(expected)

    @invariant()
    def same_keys(self) -> None:
        live = {k for k, e in self.model.items() if e.expires_at is None or e.expires_at > self.now}
        stored = {
            k
            for k in self.core
            if (e := self.core.entry(k)) is not None and (e.expires_at_ms is None or e.expires_at_ms > self.now)
        }
        assert stored == live
        expiring = [e.expires_at for e in self.model.values() if e.expires_at is not None]
        assert self.core.next_expiry() == (min(expiring) if expiring else None)


TestCoreModel = CoreModel.TestCase
TestCoreModel.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
