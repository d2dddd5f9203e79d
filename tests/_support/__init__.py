"""Test support code shared by the whole suite and the example apps, imported as ``tests._support...``.
Not a test package: nothing here is collected."""

from __future__ import annotations

from typing import Any

from sskv_mapping._namespace.store import NamespaceStore
from sskv_mapping._namespace.watches import KeyWatches


def watches_of(store: NamespaceStore[Any]) -> KeyWatches:
    """A namespace's per-key watches, which it keeps when it has a local cache."""
    assert store.watches is not None, "a namespace without a local cache keeps no per-key watches"
    return store.watches
