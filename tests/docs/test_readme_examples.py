"""The README's examples run as written: each ``python`` block, run as its own process against a real emulator on a
private mosquitto (the only change: the README's broker address becomes the test broker's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sskv_mapping.emulator.broker import MosquittoBroker

README = Path(__file__).resolve().parents[2] / "README.md"
ALL_BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
#: a block of pytest tests (the plugin's taste) runs under pytest, as a user's test file would
TEST_BLOCKS = [block for block in ALL_BLOCKS if "def test_" in block]
BLOCKS = [block for block in ALL_BLOCKS if "def test_" not in block]
README_BROKER = "mqtt://127.0.0.1:1883"

pytestmark = pytest.mark.broker


def test_the_readme_has_a_taste_of_each_face() -> None:
    faces = ["StateStoreDict", "StateStoreCache", "AsyncStateStoreClient"]
    assert [face for face in faces if not any(face in block for block in BLOCKS)] == []
    assert all(README_BROKER in block for block in BLOCKS)  # so the substitution below reaches every block


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_a_readme_example_runs(index: int, mosquitto: MosquittoBroker, emulator: object) -> None:
    source = BLOCKS[index].replace(README_BROKER, mosquitto.url)
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("index", range(len(TEST_BLOCKS)), ids=[f"tests{i + 1}" for i in range(len(TEST_BLOCKS))])
def test_a_readme_test_example_passes_under_pytest(index: int, tmp_path: Path) -> None:
    (tmp_path / "test_readme_taste.py").write_text(TEST_BLOCKS[index], encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"\b[1-9]\d* passed\b", done.stdout), done.stdout[-2000:]
