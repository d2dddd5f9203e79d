"""The django-constance backend across clients, on mosquitto + the emulator process: a value set by one process's
backend is read by another's from its local cache within milliseconds (the contract itself: ``nox -s peer-constance``,
django-constance's own backend tests)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from typing import Any

import pytest

pytest.importorskip("constance")

from django.conf import settings

from sskv_mapping import StateStoreDict

pytestmark = pytest.mark.broker


@pytest.fixture
def backend(broker_url: str) -> Iterator[Any]:
    if not settings.configured:
        settings.configure(INSTALLED_APPS=[], USE_TZ=True)
    namespace = f"constance-{uuid.uuid4().hex[:8]}"
    for name, value in (("LOCATION", broker_url), ("NAMESPACE", namespace)):
        setattr(settings, f"CONSTANCE_SSKV_{name}", value)
    from sskv_mapping.integrations.constance import StateStoreBackend

    yield StateStoreBackend()
    for name in ("LOCATION", "NAMESPACE"):
        delattr(settings, f"CONSTANCE_SSKV_{name}")


def test_get_mget_set_round_trip_constance_types(backend: Any) -> None:
    assert backend.get("MISSING") is None
    backend.set("PRICE", Decimal("1.5"))
    backend.set("LAUNCH", date(2026, 1, 2))
    assert backend.get("PRICE") == Decimal("1.5")
    assert backend.mget(["PRICE", "LAUNCH", "MISSING"]) == {"PRICE": Decimal("1.5"), "LAUNCH": date(2026, 1, 2)}
    assert backend.mget([]) == {}


def test_a_change_in_another_process_is_seen_from_the_local_cache(backend: Any, broker_url: str) -> None:
    backend.set("FLAG", False)
    assert backend.get("FLAG") is False  # read once: cached and watched from now on
    cache = backend.state_store_dict.local_cache
    with StateStoreDict.connect(broker_url, namespace=backend.state_store_dict.namespace, codec="str") as admin:
        from constance.codecs import dumps

        misses = cache.stats().misses
        t0 = time.perf_counter()
        admin["FLAG"] = dumps(True)  # what another process's backend writes
        deadline = t0 + 5
        while backend.get("FLAG") is not True:  # the notification-kept cache answers; no request is sent
            assert time.perf_counter() < deadline, "the change was not seen"
        seen_ms = (time.perf_counter() - t0) * 1000
        assert cache.stats().misses == misses  # every read above was a local-cache hit
        print(f"\nseen by the other backend {seen_ms:.2f} ms after the write was sent")
