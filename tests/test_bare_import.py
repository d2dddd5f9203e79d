"""A bare install imports: `import sskv_mapping` needs no extra, and integrations fail loudly without theirs.

The check runs in a subprocess where every optional dependency is made unimportable (a meta path hook),
which is what an environment without the extras looks like. `nox -s bare` runs the same check in a real
bare virtualenv.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BLOCKER = """
import sys
BLOCKED = {"msgpack", "django", "flask", "flask_caching", "litestar", "aiocache", "fastapi", "starlette", "aiohttp",
           "opentelemetry", "dogpile", "hishel", "pydantic_settings", "constance"}
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: bare install test)")
        return None
sys.meta_path.insert(0, _Block())
sys.argv = [sys.argv[0]]
exec(compile(open(%r).read(), %r, "exec"), {"__name__": "__main__"})
"""


def test_bare_install_imports_and_integrations_name_their_extra() -> None:
    script = Path(__file__).parent / "_support" / "bare_install_check.py"
    code = BLOCKER % (str(script), str(script))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bare install: ok" in proc.stdout


def test_importing_the_library_imports_no_opentelemetry_even_where_it_is_installed() -> None:
    # the API is looked at when a client connects, not when the library is imported (it is installed here)
    code = (
        "import sys, sskv_mapping, sskv_mapping.cache, sskv_mapping.mapping, sskv_mapping.emulator.server\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))\n"
        "import importlib.util; assert importlib.util.find_spec('opentelemetry.trace') is not None"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
