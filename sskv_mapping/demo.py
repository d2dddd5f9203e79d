"""The ten-second demo: two processes share one ``StateStoreDict`` of app config.

Run ``python -m sskv_mapping.demo`` (``scripts/demo.sh`` sets everything up first).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

NAMESPACE = "demo-app-config"


def _reader(host: str, port: int, namespace: str) -> int:
    """Print every change of the shared config, as this process's cache sees it."""
    from .mapping._dict import StateStoreDict

    with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace=namespace) as config:
        seen: dict[str, Any] = config.copy()
        print(f"reader: watching {namespace!r}, starts with {seen}", flush=True)
        print("READY", flush=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = config.copy()  # served from the local cache, kept current by notifications
            for key in sorted(set(now) | set(seen)):
                if key not in now:
                    print(f"reader: {key} was deleted", flush=True)
                elif seen.get(key, object()) != now[key]:
                    entry = config.entry(key)
                    print(f"reader: {key} = {now[key]!r}  (version {entry.version})", flush=True)
            seen = now
            if seen.get("demo.done"):
                return 0
            time.sleep(0.002)  # the demo's refresh rate on screen; the data itself arrives by notification
    return 1


def _wait_for(proc: subprocess.Popen[str], text: str, timeout: float = 20) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        print(f"    {line.rstrip()}", flush=True)
        if text in line:
            return line
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"the reader did not print {text!r}")


def _writer(host: str, port: int, namespace: str) -> None:
    from .mapping._dict import StateStoreDict

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    reader = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sskv_mapping.demo",
            "--role",
            "reader",
            "--host",
            host,
            "--port",
            str(port),
            "--namespace",
            namespace,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        with StateStoreDict.connect(f"mqtt://{host}:{port}", namespace=namespace) as config:
            config.clear()
            print(f"writer: connected; namespace {namespace!r} cleared", flush=True)
            _wait_for(reader, "READY")
            steps: list[tuple[str, Any]] = [
                ("feature.dark_mode", True),
                ("max_connections", 100),
                ("greeting", "hello from the writer"),
                ("max_connections", 250),
            ]
            for key, value in steps:
                t0 = time.perf_counter()
                version = config.set(key, value)
                print(f"writer: {key} = {value!r}  (version {version})", flush=True)
                _wait_for(reader, f"reader: {key} = {value!r}")
                print(
                    f"    -> the reader saw it {1000 * (time.perf_counter() - t0):.1f} ms after the write began",
                    flush=True,
                )
            print(f"writer: setdefault('retries', 3) -> {config.setdefault('retries', 3)} (atomic: SET NX)", flush=True)
            _wait_for(reader, "reader: retries = 3")
            del config["greeting"]
            print("writer: del config['greeting']", flush=True)
            _wait_for(reader, "greeting was deleted")
            print(f"writer: len(config) = {len(config)}; dict(config) = {dict(config)}", flush=True)
            config["demo.done"] = True
            _wait_for(reader, "reader: demo.done = True")
            config.clear()
        reader.wait(10)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sskv_mapping.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", help="use this broker (with an emulator already serving on it)")
    ap.add_argument("--port", type=int, default=1883)
    ap.add_argument("--namespace", default=NAMESPACE)
    ap.add_argument("--role", choices=["writer", "reader"], default="writer", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role == "reader":
        return _reader(args.host, args.port, args.namespace)
    if args.host:
        _writer(args.host, args.port, args.namespace)
        return 0
    from .emulator.broker import MosquittoBroker
    from .emulator.launcher import start_emulator

    with MosquittoBroker() as broker:
        print(f"started a private mosquitto on {broker.url}", flush=True)
        with start_emulator(broker.host, broker.port):
            _writer(broker.host, broker.port, args.namespace)
    print("done: broker and emulator stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
