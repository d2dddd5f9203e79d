"""docs/testing.md's async examples pass as written under pytest-asyncio's default (strict) mode, in a project of
its own (a user's suite: the plugin's fixtures, no configuration of ours)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _section(title: str) -> str:
    return PAGE.read_text(encoding="utf-8").split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("test", ["test_async_writer", "test_on_my_loop"])
def test_the_async_examples_pass_in_strict_mode(tmp_path: Path, test: str) -> None:
    blocks = re.findall(r"```python\n(.*?)```", _section("Async tests"), re.S)
    example = next(block for block in blocks if f"async def {test}(" in block)
    (tmp_path / "test_page_example.py").write_text(example, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=strict", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"\b1 passed\b", done.stdout), done.stdout[-2000:]
