"""anyio's pytest plugin runs an ``@pytest.mark.anyio`` test once per installed backend, trio too; the library's
async clients are asyncio-only. A test that uses the plugin's fixtures is skipped on trio with a message saying how
to pin the backend, and with the backend pinned as docs/testing.md says it runs once, on asyncio (issue 37)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("anyio")

USER_TEST = """
import pytest


@pytest.mark.anyio
async def test_async_writer(statestore):
    async with statestore.async_client() as client:
        await client.set("k", b"v")
        assert statestore.client.get("k").value == b"v"
"""

PINNED = """
import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
"""


def _pytest(project: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "-p", "no:randomly", str(project)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=project,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout


def test_on_trio_the_test_is_skipped_saying_how_to_pin_the_backend(tmp_path: Path) -> None:
    pytest.importorskip("trio")  # anyio parametrizes over trio only where it is installed
    (tmp_path / "test_user.py").write_text(USER_TEST)
    out = _pytest(tmp_path)
    assert "test_async_writer[asyncio] PASSED" in out
    assert "test_async_writer[trio] SKIPPED" in out
    assert "asyncio only, not on trio" in out and "anyio_backend" in out
    assert "1 passed, 1 skipped" in out


def test_with_the_backend_pinned_as_the_docs_say_it_runs_once_on_asyncio(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(USER_TEST)
    (tmp_path / "conftest.py").write_text(PINNED)
    out = _pytest(tmp_path)
    assert "test_async_writer PASSED" in out or "test_async_writer[asyncio] PASSED" in out
    assert "trio" not in out
    assert "1 passed" in out and "skipped" not in out
