"""The emulator's SCAN (docs/design/protocol.md §8) in-process, injected clock: glob rules, pages and tokens, keys
added and removed mid-listing, expiry, empty pages, invalid tokens and ``scan=False``.

Nothing here sleeps or touches a socket.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sskv_mapping._protocol.commands import Scan, ScanPage
from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping.emulator.core import EmulatorCore
from sskv_mapping.emulator.scan import INVALID_TOKEN_TEXT, KeySpace, compile_glob, glob_match
from sskv_mapping.errors import RequestSyntaxError, ServiceError, UnsupportedCommandError

T0 = 1_700_000_000_000
TS = {"__ts": f"{T0}:0:tester"}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def make(**options: Any) -> tuple[EmulatorCore, Clock]:
    clock = Clock()
    return EmulatorCore(now_ms=clock, **options), clock


def put(core: EmulatorCore, *keys: bytes, px: int | None = None) -> None:
    for k in keys:
        args = [b"SET", k, b"v"] + ([b"PX", b"%d" % px] if px else [])
        assert core.handle("tester", encode_request(*args), TS).payload == b"+OK\r\n"


def drop(core: EmulatorCore, *keys: bytes) -> None:
    for k in keys:
        core.handle("tester", encode_request(b"DEL", k), TS)


def page(core: EmulatorCore, pattern: bytes, token: bytes | None = None) -> ScanPage:
    cmd = Scan(pattern, token)
    return cmd.decode(core.handle("tester", cmd.encode(), TS).payload)


def listing(core: EmulatorCore, pattern: bytes) -> tuple[list[bytes], int]:
    """Every key of a whole listing, and how many pages it took."""
    keys: list[bytes] = []
    token = None
    pages = 0
    while True:
        p = page(core, pattern, token)
        pages += 1
        keys += p.keys
        if p.token is None:
            return keys, pages
        token = p.token


# ---------------------------------------------------------------------------------------------------------
# glob rules


@pytest.mark.parametrize(
    ("pattern", "hits", "misses"),
    [
        (b"*", [b"a", b"a/b/c", b"\x00", b"*"], []),
        (b"key*", [b"key", b"key1", b"key/x"], [b"ke", b"Key1", b"akey"]),
        (b"*1", [b"1", b"key1", b"a/1"], [b"10", b"key"]),
        (b"k?y", [b"key", b"k y", "kéy".encode()], [b"ky", b"keey", b"KEY"]),
        (b"a**b", [b"ab", b"axxb"], [b"a", b"ba"]),
        (b"[abc]x", [b"ax", b"cx"], [b"dx", b"x", b"abx", b"Ax"]),
        (b"[a-c][0-9]", [b"a0", b"b5", b"c9"], [b"d0", b"a", b"aa", b"-5"]),
        (b"[!abc]x", [b"dx", b"Ax", b"!x"], [b"ax", b"x"]),
        (b"[!a-y]", [b"z", b"A"], [b"a", b"m", b"y"]),
        (b"ns[*]", [b"ns*"], [b"ns", b"nsx"]),
        (b"ns[?]", [b"ns?"], [b"nsx"]),
        (b"ns[[]1]", [b"ns[1]"], [b"ns1", b"ns[1"]),
        (b"[]]", [b"]"], [b"["]),
        (b"[!]]", [b"a"], [b"]"]),
        (b"[-a]", [b"-", b"a"], [b"b"]),
        (b"[a-]", [b"-", b"a"], [b"b"]),
        (b"a\\*", [b"a\\", b"a\\zz"], [b"a*"]),  # no backslash escape: a literal backslash, then a star
        (b"]x", [b"]x"], [b"x"]),
        ("clé-?".encode(), ["clé-ü".encode()], ["cle-ü".encode()]),
        (b"[\xff]", [b"\xff"], [b"\xfe"]),  # a byte that is not UTF-8 counts as one character
    ],
)
def test_glob_rules(pattern: bytes, hits: list[bytes], misses: list[bytes]) -> None:
    for key in hits:
        assert glob_match(pattern, key), (pattern, key)
    for key in misses:
        assert not glob_match(pattern, key), (pattern, key)


@pytest.mark.parametrize("pattern", [b"[", b"a[bc", b"[!", b"[]", b"[!]", b""])
def test_invalid_patterns(pattern: bytes) -> None:
    with pytest.raises(RequestSyntaxError):
        compile_glob(pattern)


def _reference(pattern: str) -> re.Pattern[str]:
    """An independent translation of the same rules to a regular expression (the test's oracle)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = i + 1
            neg = j < len(pattern) and pattern[j] == "!"
            j += neg
            k = pattern.index("]", j + 1)  # the first "]" after the first member
            body = pattern[j:k]
            out.append("[" + ("^" if neg else "") + "".join("\\" + c if c in "\\^[]" else c for c in body) + "]")
            i = k
        else:
            out.append(re.escape(ch))
        i += 1
    with warnings.catch_warnings():  # "--" inside a class: Python warns of a future set syntax; it is a range here
        warnings.simplefilter("ignore", FutureWarning)
        return re.compile("".join(out), re.DOTALL)


_ALPHABET = "ab-!*?[]x"


@settings(max_examples=300, deadline=None)
@given(pattern=st.text(_ALPHABET, min_size=1, max_size=8), key=st.text(_ALPHABET, min_size=1, max_size=8))
def test_matcher_agrees_with_a_regex_translation(pattern: str, key: str) -> None:
    try:
        ref = _reference(pattern)
    except ValueError:  # no closing "]"
        with pytest.raises(RequestSyntaxError):
            compile_glob(pattern.encode())
        return
    except re.error:  # a reversed range such as "[b-a]": the regex engine refuses it, the glob matches nothing
        return
    got = glob_match(pattern.encode(), key.encode())
    assert got == (ref.fullmatch(key) is not None), (pattern, key)


# ---------------------------------------------------------------------------------------------------------
# pages and tokens


def test_every_matching_key_once_over_many_pages() -> None:
    core, _ = make(scan_page_size=3)
    keys = [b"ns/%03d" % i for i in range(20)]
    put(core, *keys, b"other/1", b"ns", b"nt/1")
    got, pages = listing(core, b"ns/*")
    assert sorted(got) == keys and len(got) == len(set(got))
    assert pages >= 7
    assert sorted(listing(core, b"*")[0]) == sorted([*keys, b"other/1", b"ns", b"nt/1"])


def test_first_page_and_empty_store() -> None:
    core, _ = make()
    assert page(core, b"*") == ScanPage([], None)
    put(core, b"a")
    assert page(core, b"*") == ScanPage([b"a"], None)
    assert page(core, b"b*") == ScanPage([], None)


def test_keys_added_and_removed_mid_scan() -> None:
    core, _ = make(scan_page_size=4)
    stay = [b"k%02d" % i for i in range(0, 40, 2)]
    removable = [b"k%02d" % i for i in range(1, 40, 2)]
    put(core, *stay, *removable)
    seen: list[bytes] = []
    p = page(core, b"k*")
    seen += p.keys
    n = 0
    while p.token is not None:
        # between pages: remove a key (seen or not, the last one returned included) and add new keys anywhere
        victim = seen[-1] if seen and seen[-1] in removable else removable[-1] if removable else None
        if victim is not None:
            drop(core, victim)
            removable.remove(victim)
        put(core, b"k%02d-new%d" % (n * 7 % 40, n))
        n += 1
        p = page(core, b"k*", p.token)
        seen += p.keys
    assert n >= 5
    for k in stay:
        assert seen.count(k) == 1, k  # present for the whole listing: listed exactly once
    assert len(seen) == len(set(seen))


def test_a_removed_last_key_does_not_break_the_token() -> None:
    core, _ = make(scan_page_size=2)
    put(core, b"a", b"b", b"c", b"d")
    p = page(core, b"*")
    assert p.keys == [b"a", b"b"] and p.token is not None
    drop(core, b"b", b"a")
    rest = page(core, b"*", p.token)
    assert rest.keys == [b"c", b"d"]


def test_an_expired_key_is_never_listed() -> None:
    core, clock = make()
    put(core, b"short", px=1000)
    put(core, b"long")
    assert sorted(listing(core, b"*")[0]) == [b"long", b"short"]
    clock.now += 1000
    assert listing(core, b"*")[0] == [b"long"]


def test_a_key_past_its_time_is_skipped_even_before_the_purge() -> None:
    ks = KeySpace(page_size=10)
    for k in (b"a", b"b"):
        ks.added(k)
    reply = ks.answer(Scan(b"*"), lambda key: key != b"a")
    assert Scan(b"*").decode(reply) == ScanPage([b"b"], None)


def test_empty_pages_before_every_page_of_keys() -> None:
    core, _ = make(scan_page_size=2, scan_empty_pages=2)
    put(core, b"a", b"b", b"c")
    shapes = []
    token = None
    while True:
        p = page(core, b"*", token)
        shapes.append(len(p.keys))
        if p.token is None:
            break
        token = p.token
    assert shapes == [0, 0, 2, 0, 0, 1]


def test_a_sparse_pattern_gives_empty_pages_with_more_to_come() -> None:
    core, _ = make(scan_page_size=1)  # examines at most 64 keys per page
    put(core, *(b"k%03d" % i for i in range(200)), b"k150x")
    got, pages = listing(core, b"*x")
    assert got == [b"k150x"] and pages >= 3


def test_a_page_costs_what_it_examines_not_the_store() -> None:
    core, _ = make(scan_page_size=10)
    put(core, *(b"p%05d" % i for i in range(5000)))
    # a literal prefix jumps straight to its range: a one-key listing in a 5,000-key store is one page
    assert listing(core, b"p04999*") == ([b"p04999"], 1)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1],
        lambda t: t + b"x",
        lambda t: bytes([t[0] ^ 1]) + t[1:],
        lambda t: t[:5] + bytes([t[5] ^ 0x40]) + t[6:],
        lambda t: b"\x00" * len(t),
        lambda t: b"x",
    ],
)
def test_an_altered_token_is_refused(mangle: Callable[[bytes], bytes]) -> None:
    core, _ = make(scan_page_size=1)
    put(core, b"a", b"b")
    token = page(core, b"*").token
    assert token is not None
    with pytest.raises(ServiceError) as info:
        page(core, b"*", mangle(token))
    assert info.value.text == INVALID_TOKEN_TEXT


def test_a_token_is_bound_to_its_pattern_and_to_the_emulator_instance() -> None:
    core, _ = make(scan_page_size=1)
    put(core, b"a1", b"a2")
    token = page(core, b"a*").token
    assert token is not None
    with pytest.raises(ServiceError, match=INVALID_TOKEN_TEXT):
        page(core, b"a?", token)
    other, _ = make(scan_page_size=1)
    put(other, b"a1", b"a2")
    with pytest.raises(ServiceError, match=INVALID_TOKEN_TEXT):
        page(other, b"a*", token)  # a restarted emulator: the listing starts over


def test_service_side_errors() -> None:
    core, _ = make()
    for payload, text in [
        (encode_request(b"SCAN", b"a[b"), b"-ERR syntax error\r\n"),
        (encode_request(b"SCAN", b""), b"-ERR syntax error\r\n"),
        (encode_request(b"SCAN"), b"-ERR wrong number of arguments\r\n"),
    ]:
        assert core.handle("tester", payload, TS).payload == text


def test_no_scan_answers_unknown_command_like_an_older_service() -> None:
    core, _ = make(scan=False)
    put(core, b"a")
    reply = core.handle("tester", Scan(b"*").encode(), TS).payload
    assert reply == b"-ERR unknown command\r\n"
    with pytest.raises(UnsupportedCommandError):
        Scan(b"*").decode(reply)
    assert core.keyspace is None


def test_scan_replies_carry_no_version_and_change_nothing() -> None:
    core, _ = make()
    put(core, b"a")
    clock_before = core.clock
    result = core.handle("tester", Scan(b"*").encode(), {})
    assert result.version is None and result.notifications == []
    assert core.clock == clock_before and len(core) == 1


def test_persistence_reload_keeps_the_key_space() -> None:
    core, _ = make()
    core.handle("tester", encode_request(b"SET", b"p", b"v"), {**TS, "aio-persistence": "true"})
    again, _ = make()
    assert again.load_persistent(core.dump_persistent()) == 1
    assert listing(again, b"*")[0] == [b"p"]


def test_key_space_options_are_checked() -> None:
    for bad in ({"page_size": 0}, {"page_size": True}, {"empty_pages": -1}, {"empty_pages": 256}):
        with pytest.raises(ValueError):
            KeySpace(**bad)
