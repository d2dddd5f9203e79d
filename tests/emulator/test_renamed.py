"""The emulator's names that issue 29 renamed keep their old spelling for one release, with a DeprecationWarning."""

from __future__ import annotations

import pytest

from sskv_mapping._protocol.hlc import HybridLogicalClock
from sskv_mapping._protocol.resp3 import encode_request
from sskv_mapping.emulator import core
from sskv_mapping.emulator.core import EmulatorCore, KeyRecord


def test_stored_entry_is_key_record_under_its_old_name_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="StoredEntry is now KeyRecord"):
        old = core.StoredEntry
    assert old is KeyRecord
    emulator = EmulatorCore(now_ms=lambda: 1_700_000_000_000)
    ts = str(HybridLogicalClock(1_700_000_000_000, 0, "c1"))
    assert emulator.handle("c1", encode_request(b"SET", b"k", b"v"), {"__ts": ts}).payload == b"+OK\r\n"
    record = emulator.entry(b"k")
    assert isinstance(record, old) and record.value == b"v"


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        core.no_such_name  # noqa: B018
