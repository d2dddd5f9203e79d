"""What every framework adapter shares (``sskv_mapping.integrations._common``): one process-wide registry of
connections and of the objects built on them, forgotten in a forked child through the package's one fork hook
(``sskv_mapping._fork``)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sskv_mapping
import sskv_mapping.integrations

INTEGRATIONS = Path(sskv_mapping.integrations.__file__).parent
PACKAGE = Path(sskv_mapping.__file__).parent


def _register_at_fork_calls(path: Path) -> list[int]:
    """Lines of ``os.register_at_fork(...)`` / ``register_at_fork(...)`` calls in one module."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "register_at_fork":
                lines.append(node.lineno)
    return lines


def test_the_package_has_exactly_one_fork_hook_and_it_is_fork_py() -> None:
    """Every face, the loop thread and the adapters' registry register with ``_fork.in_child_after_fork``;
    ``os.register_at_fork`` is called once, there."""
    found = {
        p.relative_to(PACKAGE).as_posix(): lines
        for p in sorted(PACKAGE.rglob("*.py"))
        if (lines := _register_at_fork_calls(p))
    }
    assert list(found) == ["_fork.py"], found
    assert len(found["_fork.py"]) == 1
    assert "in_child_after_fork(_after_fork)" in (INTEGRATIONS / "_common.py").read_text(encoding="utf-8")


def test_the_count_sees_a_hook_where_there_is_one(tmp_path: Path) -> None:
    """The AST count above finds both spellings (a check that could not fail would prove nothing)."""
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom os import register_at_fork\nos.register_at_fork(after_in_child=f)\n")
    assert _register_at_fork_calls(module) == [3]
    module.write_text("from os import register_at_fork\nregister_at_fork(after_in_child=f)\n")
    assert _register_at_fork_calls(module) == [2]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_forgets_the_shared_connections_and_objects(broker_url: str) -> None:
    """In a child process, the parent's shared clients and the caches built on them are gone from the one
    registry (they belong to the parent's connection and loop thread), and the child builds its own."""
    code = textwrap.dedent(
        f"""
        import os, sys
        from sskv_mapping.cache import StateStoreCache
        from sskv_mapping.integrations import _common
        from sskv_mapping._transport.settings import ConnectionSettings

        settings = ConnectionSettings.from_url({broker_url!r})
        client = _common.shared_client(settings)
        cache = _common.shared_object(client, ("fork test",), lambda: StateStoreCache(client, namespace="forktest"))
        assert _common.shared_object(client, ("fork test",), lambda: None) is cache
        assert _common._clients and _common._objects
        pid = os.fork()
        if pid == 0:
            ok = not _common._clients and not _common._objects
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert _common._objects  # the parent keeps its own
        _common.close_shared_objects()
        assert not _common._objects and client.state.value == "closed"
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
