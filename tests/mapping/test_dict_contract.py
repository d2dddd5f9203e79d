"""StateStoreDict behaves like ``dict`` — on the loopback store and over a real broker + emulator."""

from __future__ import annotations

import threading
from collections.abc import Callable, KeysView
from typing import Any

import pytest

from sskv_mapping import ConfigurationError, EncodeError, FencingTokenRequiredError, KeyOperation
from sskv_mapping.lock import LeasedLock
from sskv_mapping.mapping import StateStoreDict

DictFactory = Callable[..., StateStoreDict[Any]]


def test_set_get_delete_like_dict(d: StateStoreDict[Any]) -> None:
    d["a"] = 1
    d["b"] = {"nested": [1, 2, None]}
    assert d["a"] == 1 and d["b"] == {"nested": [1, 2, None]}
    d["a"] = 2
    assert d["a"] == 2
    del d["a"]
    with pytest.raises(KeyError):
        d["a"]
    with pytest.raises(KeyError):
        del d["a"]
    assert d.get("a") is None and d.get("a", 5) == 5


def test_stored_none_is_not_missing(d: StateStoreDict[Any]) -> None:
    d["n"] = None
    assert "n" in d and d["n"] is None and d.get("n", "default") is None
    assert "m" not in d and d.get("m", "default") == "default"


def test_non_str_keys_read_as_missing_and_refuse_writes(d: StateStoreDict[Any]) -> None:
    assert 1 not in d and d.get(1, "x") == "x"  # type: ignore[comparison-overlap, call-overload]  # a non-str key
    with pytest.raises(KeyError):
        d[1]  # type: ignore[index]
    with pytest.raises(ConfigurationError):
        d[1] = "x"  # type: ignore[index]
    with pytest.raises(ConfigurationError):
        d[""] = "x"


def test_keys_that_are_not_utf8_encodable_are_typed_errors(d: StateStoreDict[Any]) -> None:
    """A lone surrogate is a valid ``str`` but no UTF-8 key: reads miss (like any key that cannot be stored),
    writes raise ConfigurationError — never a UnicodeEncodeError, also on the cache-hit fast path."""
    d["ok"] = 1
    assert d["ok"] == 1  # warms the local cache (when there is one): the next read takes the fast path
    bad = "bad-\ud800"
    assert bad not in d and d.get(bad, "x") == "x"
    with pytest.raises(KeyError):
        d[bad]
    with pytest.raises(ConfigurationError, match="UTF-8"):
        d[bad] = "x"
    with pytest.raises(ConfigurationError, match="UTF-8"):
        d.update({bad: 1, "other": 2})
    assert "other" not in d and len(d) == 1


def test_unencodable_value_raises_before_anything_is_written(d: StateStoreDict[Any]) -> None:
    with pytest.raises(EncodeError):
        d["x"] = object()
    assert "x" not in d and len(d) == 0


def test_len_iter_views_and_copy(d: StateStoreDict[Any]) -> None:
    d.update({"a": 1, "b": 2})
    d["c"] = 3
    assert len(d) == 3
    assert sorted(d) == ["a", "b", "c"]
    assert isinstance(d.keys(), KeysView) and "a" in d.keys() and len(d.keys()) == 3  # noqa: SIM118 - the view
    assert sorted(d.values()) == [1, 2, 3]
    assert sorted(d.items()) == [("a", 1), ("b", 2), ("c", 3)]
    c = d.copy()
    assert type(c) is dict and c == {"a": 1, "b": 2, "c": 3}
    assert d == {"a": 1, "b": 2, "c": 3} and d != {"a": 1}
    assert repr(d) == repr(c)
    with pytest.raises(TypeError):
        hash(d)


def test_update_accepts_every_argument_form(d: StateStoreDict[Any]) -> None:
    class KeysOnly:
        def keys(self) -> list[str]:
            return ["k"]

        def __getitem__(self, key: str) -> str:
            return "from-keys-object"

    d.update({"m": 1})
    d.update([("p", 2)])
    d.update(iter([("g", 3)]))
    d.update(kw=4)
    d.update({"m": 10}, kw=40)
    d.update(KeysOnly())
    assert d.copy() == {"m": 10, "p": 2, "g": 3, "kw": 40, "k": "from-keys-object"}
    with pytest.raises(ValueError):
        d.update([("only-one",)])


def test_pop_and_popitem(d: StateStoreDict[Any]) -> None:
    d["a"] = 1
    assert d.pop("a") == 1
    with pytest.raises(KeyError):
        d.pop("a")
    assert d.pop("a", "dflt") == "dflt"
    assert d.pop("a", None) is None
    d["x"] = 1
    d["y"] = 2
    key, value = d.popitem()
    assert (key, value) in {("x", 1), ("y", 2)} and key not in d
    d.popitem()
    with pytest.raises(KeyError):
        d.popitem()


def test_setdefault_and_clear(d: StateStoreDict[Any]) -> None:
    assert d.setdefault("s", [1]) == [1]
    assert d.setdefault("s", [2]) == [1]
    assert d.setdefault("none") is None and "none" in d
    d["t"] = 1
    d.clear()
    assert len(d) == 0 and list(d) == [] and d == {}


def test_other_instance_sees_writes_and_deletes(make_dict: DictFactory) -> None:
    a, b = make_dict(), make_dict()
    a["k"] = "v1"
    assert b["k"] == "v1"
    changed = threading.Event()
    b.client.subscribe_key(b"" + f"{b.namespace}/k".encode(), lambda ev: changed.set())
    a["k"] = "v2"
    assert changed.wait(5)
    assert b["k"] == "v2"  # the notification updated b's cache
    changed.clear()
    del a["k"]
    assert changed.wait(5)  # b learns of the delete by notification, not at once: wait for it as for the write
    assert "k" not in b and len(b) == 0


def test_setdefault_is_atomic_across_instances(make_dict: DictFactory) -> None:
    a, b = make_dict(), make_dict()
    assert a.setdefault("k", "first") == "first"
    assert b.setdefault("k", "second") == "first"


def test_pop_never_deletes_a_value_another_instance_just_wrote(make_dict: DictFactory) -> None:
    a, b = make_dict(local_cache_size=0), make_dict()
    a["k"] = "old"
    assert a.pop("k") == "old" and "k" not in b
    a["k"] = "x"
    result = b.pop("k")
    assert result == "x"


def test_entry_exposes_version_and_fence(make_dict: DictFactory) -> None:
    d = make_dict()
    d["k"] = 1
    first = d.entry("k")
    d["k"] = 2
    second = d.entry("k")
    assert first.version is not None and second.version is not None and second.version > first.version
    assert second.value == 2 and second.fencing_token is None
    with pytest.raises(KeyError):
        d.entry("missing")


def test_fenced_writes_carry_the_lock_token(make_dict: DictFactory) -> None:
    d = make_dict()
    lock = LeasedLock(d.client, f"{d.namespace}-lock", lease=10)
    token = lock.acquire(timeout=5)
    fenced = d.fenced(lock)
    fenced["guarded"] = "v"
    e = d.entry("guarded")
    assert e.fencing_token == token and e.value == "v"
    with pytest.raises(FencingTokenRequiredError):
        d["guarded"] = "unfenced write"
    assert d["guarded"] == "v"
    lock.release()


def test_expired_keys_disappear_from_iteration(make_dict: DictFactory) -> None:
    d = make_dict()
    gone = threading.Event()

    def on_event(ev: Any) -> None:
        if ev.op is KeyOperation.DELETE:
            gone.set()

    d["stays"] = 1
    d.set("short", 2, ttl=0.2)
    assert sorted(d) == ["short", "stays"]
    d.client.subscribe_key(f"{d.namespace}/short", on_event)
    assert gone.wait(5)
    assert list(d) == ["stays"] and len(d) == 1 and "short" not in d


def test_the_injected_monotonic_clock_drives_the_local_cache(make_dict: DictFactory) -> None:
    now = [7.0]
    d = make_dict(monotonic=lambda: now[0])
    assert d.local_cache is not None and d.local_cache.deadline(1.0) == 8.0
    d["k"] = 3
    assert d["k"] == 3
