"""A plain ``dict`` is the oracle: hypothesis drives two ``StateStoreDict`` instances of one namespace.

Each example opens a fresh namespace through two dicts on two clients (two cache + watch sets, as two
processes would have) and runs random operations on either; a single ``dict`` records what the namespace
must hold. After every step both instances must agree with it: ``len``, the sorted keys, ``dict(items)``,
``==`` against the oracle and against each other.

The second instance learns of the first one's changes by notification, so it is only *eventually*
current. Before comparing, each client makes one round trip to the service (a "barrier"): the service
answers requests in order and publishes a change's notifications before it reads any later request, and
the broker keeps that order on the way to one client, so once the barrier's reply is in, every
notification of an earlier, acknowledged change has been applied. The comparison after it is exact; a
mismatch is a real divergence, not a notification still on its way. The acting instance is also checked
right after its own write, without a barrier (read-your-writes).

A small key alphabet (with a non-ASCII key and one containing ``/``) and small values make collisions,
overwrites of equal and unequal values and deletes of missing keys common.

Runs on the loopback store (many examples, fast) and over mosquitto + the emulator process (bounded), with the
namespace listed by SCAN and by the stored index.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from sskv_mapping.client import StateStoreClient
from sskv_mapping.mapping import StateStoreDict
from sskv_mapping.mapping._listing import ListingMode
from tests._support.store_backend import StoreBackend

KEYS = ("a", "b", "ü", "x/y")
keys = st.sampled_from(KEYS)
values = st.one_of(
    st.integers(min_value=-2, max_value=2),
    st.none(),
    st.text(alphabet="xyé", max_size=3),
    st.lists(st.integers(min_value=0, max_value=2), max_size=3),
)
instances = st.sampled_from((0, 1))
#: what ``get``/``pop`` are given as their default: never a value a key can hold, so a default is visible
defaults = st.sampled_from(("<default>", -99))

EXAMPLES = {"loopback": 100, "broker": 25}
STEPS = {"loopback": 30, "broker": 25}


class DictMachine(RuleBasedStateMachine):
    """Two dicts over one namespace, one oracle."""

    def __init__(self, clients: list[StateStoreClient], listing: ListingMode) -> None:
        super().__init__()
        self.namespace = f"h{uuid.uuid4().hex[:12]}"
        self.clients = clients
        self.dicts: list[StateStoreDict[Any]] = []
        for client in clients:
            self.dicts.append(StateStoreDict(client, namespace=self.namespace, listing=listing))
        self.oracle: dict[str, Any] = {}

    def teardown(self) -> None:
        for d in self.dicts:
            d.close()

    # -- rules --------------------------------------------------------------------------------------------

    @rule(i=instances, key=keys, value=values)
    def setitem(self, i: int, key: str, value: Any) -> None:
        d = self.dicts[i]
        d[key] = value
        self.oracle[key] = value
        assert d[key] == value  # read-your-writes, no barrier

    @rule(i=instances, key=keys)
    def delitem(self, i: int, key: str) -> None:
        d = self.dicts[i]
        if key in self.oracle:
            del d[key]
            del self.oracle[key]
        else:
            with pytest.raises(KeyError):
                del d[key]
        assert key not in d

    @rule(i=instances, key=keys, default=defaults)
    def get(self, i: int, key: str, default: Any) -> None:
        assert self.dicts[i].get(key, default) == self.oracle.get(key, default)
        assert self.dicts[i].get(key) == self.oracle.get(key)

    @rule(i=instances, key=keys)
    def getitem(self, i: int, key: str) -> None:
        if key in self.oracle:
            assert self.dicts[i][key] == self.oracle[key]
        else:
            with pytest.raises(KeyError):
                self.dicts[i][key]

    @rule(i=instances, key=keys)
    def contains(self, i: int, key: str) -> None:
        assert (key in self.dicts[i]) == (key in self.oracle)

    @rule(i=instances, key=keys)
    def pop_without_default(self, i: int, key: str) -> None:
        d = self.dicts[i]
        if key in self.oracle:
            assert d.pop(key) == self.oracle.pop(key)
        else:
            with pytest.raises(KeyError):
                d.pop(key)
        assert key not in d

    @rule(i=instances, key=keys, default=defaults)
    def pop_with_default(self, i: int, key: str, default: Any) -> None:
        d = self.dicts[i]
        assert d.pop(key, default) == self.oracle.pop(key, default)
        assert key not in d

    @precondition(lambda self: not self.oracle)
    @rule(i=instances)
    def popitem_empty(self, i: int) -> None:
        with pytest.raises(KeyError):
            self.dicts[i].popitem()

    @precondition(lambda self: bool(self.oracle))
    @rule(i=instances)
    def popitem(self, i: int) -> None:
        # which pair comes out is the namespace's business (the most recently listed); it must be a real one
        key, value = self.dicts[i].popitem()
        assert key in self.oracle and self.oracle.pop(key) == value
        assert key not in self.dicts[i]

    @rule(i=instances, key=keys, value=values)
    def setdefault(self, i: int, key: str, value: Any) -> None:
        d = self.dicts[i]
        assert d.setdefault(key, value) == self.oracle.setdefault(key, value)
        assert d[key] == self.oracle[key]

    @rule(i=instances, other=st.dictionaries(keys, values, max_size=3))
    def update_mapping(self, i: int, other: dict[str, Any]) -> None:
        self.dicts[i].update(other)
        self.oracle.update(other)

    @rule(i=instances, pairs=st.lists(st.tuples(keys, values), max_size=3))
    def update_pairs(self, i: int, pairs: list[tuple[str, Any]]) -> None:
        # repeated keys: the last pair wins, as with dict
        self.dicts[i].update(pairs)
        self.oracle.update(pairs)

    @rule(
        i=instances, other=st.dictionaries(keys, values, max_size=2), kwargs=st.dictionaries(keys, values, max_size=2)
    )
    def update_kwargs(self, i: int, other: dict[str, Any], kwargs: dict[str, Any]) -> None:
        # "ü" and "x/y" go through ** as well: a mapping's update takes any str keyword
        self.dicts[i].update(other, **kwargs)
        self.oracle.update(other, **kwargs)
        for key, value in {**other, **kwargs}.items():
            assert self.dicts[i][key] == value

    @rule(i=instances)
    def clear(self, i: int) -> None:
        self.dicts[i].clear()
        self.oracle.clear()
        assert len(self.dicts[i]) == 0

    # -- what must hold after every step ------------------------------------------------------------------

    def _barrier(self) -> None:
        for client in self.clients:
            client.get(f"{self.namespace}#barrier")

    @invariant()
    def both_instances_agree_with_the_oracle(self) -> None:
        self._barrier()
        expected = self.oracle
        for n, d in enumerate(self.dicts):
            where = f"instance {n}"
            assert len(d) == len(expected), where
            assert sorted(d) == sorted(expected), where
            assert sorted(d.keys()) == sorted(expected), where
            assert dict(d.items()) == expected, where
            assert d == expected, where
            assert d.copy() == expected, where
        assert self.dicts[0] == self.dicts[1]


@pytest.mark.parametrize("listing", ["scan", "index"])
def test_two_dicts_agree_with_a_plain_dict(store_backend: StoreBackend, listing: ListingMode) -> None:
    which = store_backend.name
    clients = [store_backend.client(), store_backend.client()]
    run_state_machine_as_test(
        lambda: DictMachine(clients, listing),  # type: ignore[arg-type]  # hypothesis takes a factory, types a class
        settings=settings(
            max_examples=EXAMPLES[which],
            stateful_step_count=STEPS[which],
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
