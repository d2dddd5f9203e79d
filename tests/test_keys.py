"""Key rules, once (``sskv_mapping._keys``), as a table: every API that takes a key agrees on it."""

from __future__ import annotations

from typing import Any

import pytest

from sskv_mapping._keys import check_namespace, is_text_key, store_key, text_key, text_keys, utf8
from sskv_mapping.errors import ConfigurationError

LONE_SURROGATE = "a\udcff"

#: (key, as the client stores it or None if refused, a dict/cache key?)
ROWS: list[tuple[Any, bytes | None, bool]] = [
    ("k", b"k", True),
    ("ключ", "ключ".encode(), True),
    ("a/b#c", b"a/b#c", True),
    (b"raw\x00\xff", b"raw\x00\xff", False),
    (bytearray(b"ba"), b"ba", False),
    (memoryview(b"mv"), b"mv", False),
    ("", None, False),
    (b"", None, False),
    (LONE_SURROGATE, None, False),
    (1, None, False),
    (None, None, False),
    (("t",), None, False),
]


@pytest.mark.parametrize(("key", "stored", "text"), ROWS, ids=[repr(r[0])[:20] for r in ROWS])
def test_key_rules(key: Any, stored: bytes | None, text: bool) -> None:
    if stored is None:
        with pytest.raises(ConfigurationError):
            store_key(key)
    else:
        assert store_key(key) == stored
    assert is_text_key(key) is text
    if text:
        assert text_key(key) == key
    else:
        with pytest.raises(ConfigurationError):
            text_key(key, "cache key")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (1, "cache keys are str, not int"),
        ("", "cache keys may not be empty"),
        (LONE_SURROGATE, "cache key is not valid UTF-8 text"),
    ],
)
def test_text_key_says_why(key: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        text_key(key, "cache key")


def test_text_keys_keeps_order_drops_duplicates_and_refuses_a_single_str() -> None:
    assert text_keys(["b", "a", "b"]) == ["b", "a"]
    with pytest.raises(ConfigurationError, match="not a single str"):
        text_keys("abc")
    with pytest.raises(ConfigurationError):
        text_keys(["ok", ""])


@pytest.mark.parametrize(
    ("namespace", "ok"),
    [
        ("config", True),
        ("app.cache", True),
        ("", False),
        ("a/b", False),
        ("a#b", False),
        (LONE_SURROGATE, False),
        (3, False),
    ],
)
def test_namespaces(namespace: Any, ok: bool) -> None:
    if ok:
        assert check_namespace(namespace) == namespace.encode()
    else:
        with pytest.raises(ConfigurationError):
            check_namespace(namespace)


def test_utf8_names_what_was_wrong() -> None:
    with pytest.raises(ConfigurationError, match="namespace is not valid UTF-8"):
        utf8(LONE_SURROGATE, "namespace")
