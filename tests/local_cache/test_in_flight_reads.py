"""The book-keeping of a local cache's reads in flight (``_InFlightReads``), on its own: which verdict a read's
result gets, and that a key's book-keeping goes with its last ticket. ``LocalCache`` calls it under its lock; these
tests call it from one thread, so they need none."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sskv_mapping.errors import ConfigurationError
from sskv_mapping.local_cache import LocalCache, ReadTicket
from sskv_mapping.local_cache._reads import _InFlightReads, _Verdict

K = b"key"
REFUSE, RACED, UNDISTURBED = _Verdict.REFUSE, _Verdict.RACED, _Verdict.UNDISTURBED


@pytest.fixture
def owner() -> LocalCache[Any]:
    """The cache the tickets name as theirs (its own reads are not the ones under test)."""
    return LocalCache(maxsize=2)


@pytest.fixture
def reads(owner: LocalCache[Any]) -> _InFlightReads:
    return _InFlightReads(owner)


def test_a_ticket_names_its_owner_key_and_the_counts_when_it_began(
    reads: _InFlightReads, owner: LocalCache[Any]
) -> None:
    ticket = reads.begin(K)
    assert isinstance(ticket, ReadTicket)
    assert (ticket.owner, ticket.key, ticket.closed) == (owner, K, False)
    assert K in reads
    assert b"other" not in reads
    assert (len(reads), reads.tickets) == (1, 1)


def test_an_undisturbed_read_may_be_stored_once(reads: _InFlightReads) -> None:
    ticket = reads.begin(K)
    assert reads.finish(ticket) is UNDISTURBED
    assert ticket.closed
    assert reads.finish(ticket) is REFUSE  # closed: a second result of one read is never stored
    assert (len(reads), reads.tickets) == (0, 0)
    assert K not in reads


def test_a_change_of_the_key_refuses_every_read_of_it_in_flight(reads: _InFlightReads) -> None:
    first, second = reads.begin(K), reads.begin(K)
    reads.changed(K)
    later = reads.begin(K)  # began after the change: not refused for it
    assert reads.finish(first) is REFUSE
    assert reads.finish(second) is REFUSE
    assert reads.finish(later) is UNDISTURBED


def test_a_change_of_another_key_or_of_a_key_not_being_read_changes_nothing(reads: _InFlightReads) -> None:
    ticket = reads.begin(K)
    reads.changed(b"other")
    assert b"other" not in reads  # no book-keeping for a key nobody reads
    assert reads.finish(ticket) is UNDISTURBED


def test_a_new_epoch_refuses_every_read_begun_before_it(reads: _InFlightReads) -> None:
    a, b = reads.begin(b"a"), reads.begin(b"b")
    reads.new_epoch()
    c = reads.begin(b"a")
    assert reads.finish(a) is REFUSE
    assert reads.finish(b) is REFUSE
    assert reads.finish(c) is UNDISTURBED


def test_a_result_stored_meanwhile_makes_the_other_reads_of_the_key_raced(reads: _InFlightReads) -> None:
    first, second, other = reads.begin(K), reads.begin(K), reads.begin(b"other")
    assert reads.finish(first) is UNDISTURBED
    reads.stored(K)
    third = reads.begin(K)  # began after that store: nothing to order against
    assert reads.finish(second) is RACED
    assert reads.finish(third) is UNDISTURBED
    assert reads.finish(other) is UNDISTURBED


def test_the_last_store_of_a_key_leaves_no_book_keeping(reads: _InFlightReads) -> None:
    assert reads.finish(reads.begin(K)) is UNDISTURBED
    reads.stored(K)
    assert K not in reads
    assert reads.finish(reads.begin(K)) is UNDISTURBED  # a fresh start, not raced by the earlier store


def test_abandon_closes_once_and_a_closed_ticket_is_refused(reads: _InFlightReads) -> None:
    ticket, other = reads.begin(K), reads.begin(K)
    reads.abandon(ticket)
    reads.abandon(ticket)  # idempotent: the second does not release the other ticket's count
    assert (len(reads), reads.tickets) == (1, 1)
    assert reads.finish(ticket) is REFUSE
    assert reads.finish(other) is UNDISTURBED
    assert (len(reads), reads.tickets) == (0, 0)


def test_a_ticket_of_another_owner_is_refused_and_left_open(reads: _InFlightReads) -> None:
    stranger = _InFlightReads(LocalCache(maxsize=2))
    ticket = stranger.begin(K)
    mine = reads.begin(K)
    with pytest.raises(ConfigurationError, match="another LocalCache"):
        reads.finish(ticket)
    with pytest.raises(ConfigurationError, match="another LocalCache"):
        reads.abandon(ticket)
    assert not ticket.closed
    assert reads.tickets == 1  # our own ticket's count was not released by the stranger's
    assert stranger.finish(ticket) is UNDISTURBED
    assert reads.finish(mine) is UNDISTURBED


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["begin", "finish", "abandon", "changed", "stored", "new_epoch"]),
        st.sampled_from([b"a", b"b", b"c"]),
        st.integers(min_value=0, max_value=50),
    ),
    max_size=80,
)


@given(_OPS)
def test_model_verdicts_follow_what_happened_to_each_ticket_since_it_began(
    ops: list[tuple[str, bytes, int]],
) -> None:
    """A ticket is refused iff its key changed or a new epoch began since it opened, else raced iff a result of its
    key was stored since; counts match the open tickets, and book-keeping is kept only for keys with one."""
    reads = _InFlightReads(LocalCache(maxsize=2))
    open_tickets: list[tuple[ReadTicket, dict[str, bool]]] = []
    closed: list[ReadTicket] = []

    def mark(flag: str, key: bytes | None) -> None:
        for ticket, seen in open_tickets:
            if key is None or ticket.key == key:
                seen[flag] = True

    for op, key, pick in ops:
        if op == "begin":
            open_tickets.append((reads.begin(key), {"changed": False, "raced": False}))
        elif op in ("finish", "abandon") and open_tickets:
            ticket, seen = open_tickets.pop(pick % len(open_tickets))
            if op == "finish":
                expected = REFUSE if seen["changed"] else RACED if seen["raced"] else UNDISTURBED
                assert reads.finish(ticket) is expected
            else:
                reads.abandon(ticket)
            closed.append(ticket)
        elif op in ("finish", "abandon") and closed:
            ticket = closed[pick % len(closed)]  # closing again: refused, and no count moves
            if op == "finish":
                assert reads.finish(ticket) is REFUSE
            else:
                reads.abandon(ticket)
        elif op == "changed":
            reads.changed(key)
            mark("changed", key)
        elif op == "stored":
            reads.stored(key)
            mark("raced", key)
        elif op == "new_epoch":
            reads.new_epoch()
            mark("changed", None)
        assert reads.tickets == len(open_tickets)
        assert len(reads) == len({t.key for t, _ in open_tickets})
        assert all((k in reads) == any(t.key == k for t, _ in open_tickets) for k in (b"a", b"b", b"c"))
