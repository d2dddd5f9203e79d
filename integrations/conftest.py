"""What the example apps' end-to-end tests share beside sskv-mapping's pytest plugin (docs/testing.md): a private
mosquitto and emulator process per test module, for the apps served by uvicorn processes (their counters start at 0).
The checks both ASGI examples pass are in ``tests/_support/example_apps.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._support.procs import private_store


@pytest.fixture(scope="module")
def private_store_url() -> Iterator[str]:
    """A private mosquitto with the emulator process serving it (stopped with the module)."""
    with private_store() as url:
        yield url
