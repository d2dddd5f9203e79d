"""Run in an environment (or under a blocker) without any optional extra.

Checks: ``import sskv_mapping`` and its core modules work; each integration raises an ImportError that
names its ``pip install 'sskv-mapping[extra]'`` line; a client, a cache and the emulator run without OpenTelemetry
and import none of it. Exit status 0 when all holds.
"""

from __future__ import annotations

import importlib
import sys

INTEGRATIONS = {
    "sskv_mapping.integrations.django": "django",
    "sskv_mapping.integrations.flask_caching": "flask",
    "sskv_mapping.integrations.litestar": "litestar",
    "sskv_mapping.integrations.aiocache": "aiocache",
    "sskv_mapping.integrations.fastapi": "fastapi",
    "sskv_mapping.integrations.dogpile": "dogpile",
    "sskv_mapping.integrations.hishel": "hishel",
    "sskv_mapping.integrations.pydantic_settings": "pydantic-settings",
    "sskv_mapping.integrations.constance": "constance",
}


def main() -> int:
    import sskv_mapping
    from sskv_mapping import StateStoreDict  # noqa: F401
    from sskv_mapping.emulator import EmulatorCore  # noqa: F401

    problems = []
    # the emulator's entry point and its --help load no optional extra; --inspect without aiohttp names its extra
    from sskv_mapping.emulator.process import _check_inspect_options, build_parser

    if "aiohttp" in sys.modules:
        problems.append("the emulator's entry point imported aiohttp")
    why = _check_inspect_options(build_parser().parse_args(["--inspect", "0"]))
    if why is None or "sskv-mapping[inspect]" not in why:
        problems.append(f"--inspect without aiohttp: {why}")
    for module, extra in INTEGRATIONS.items():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            if f"sskv-mapping[{extra}]" not in str(exc):
                problems.append(f"{module}: ImportError does not name the extra: {exc}")
        else:
            problems.append(f"{module} imported without its extra")
    try:
        sskv_mapping.MsgpackCodec()
    except ImportError as exc:
        if "sskv-mapping[msgpack]" not in str(exc):
            problems.append(f"MsgpackCodec: {exc}")
    else:
        problems.append("MsgpackCodec() worked without msgpack")
    problems += _telemetry_problems()
    for p in problems:
        print(p)
    print("bare install: ok" if not problems else "bare install: FAILED")
    return 1 if problems else 0


def _telemetry_problems() -> list[str]:
    """Without the otel extra: a client connects and serves requests with no instrumentation, and nothing of
    OpenTelemetry is imported -- by the client, the faces or the emulator (docs/observability.md)."""
    import asyncio

    from sskv_mapping.cache import AsyncStateStoreCache
    from sskv_mapping.testing import InProcessStore

    async def run() -> list[str]:
        found = []
        async with InProcessStore() as store, store.async_client() as client:
            if client._sender.telemetry is not None:
                found.append("a client without the otel extra has telemetry")
            async with AsyncStateStoreCache[int](client, namespace="bare", local_cache_size=8) as cache:
                await cache.set("k", 1)
                if await cache.get("k") != 1:
                    found.append("the cache did not read back its value")
        return found

    found = asyncio.run(run())
    if any(name == "opentelemetry" or name.startswith("opentelemetry.") for name in sys.modules):
        found.append("opentelemetry was imported without the otel extra")
    return found


if __name__ == "__main__":
    sys.exit(main())
