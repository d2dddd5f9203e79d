"""The ``sskv`` command across a flapping link (issue 36): its connection reset every 0.3-1.1 s by the fault proxy
while mosquitto and the emulator live. ``sskv watch`` goes on, its values in order and ending on the last one
written; two ``sskv lock NAME -- COMMAND`` processes never run their commands at once."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pytest

from sskv_mapping.client import StateStoreClient
from sskv_mapping.emulator.broker import MosquittoBroker
from sskv_mapping.testing import FaultProxy
from tests._support.waiting import eventually_sync

from .test_cli import TIMEOUT, new_key
from .test_cli_holds_on import EXIT_LEASE_LOST, EXIT_OK, JOB, Cli, assert_no_overlap

pytestmark = pytest.mark.broker


class Flapping(TypedDict):
    timeout: float
    jitter: float


#: each connection through the proxy is reset 0.3-1.1 s after it opened (toxiproxy's reset_peer, with our jitter)
FLAPPING: Flapping = {"timeout": 700, "jitter": 400}


@pytest.fixture
def flapping(mosquitto: MosquittoBroker, emulator: object) -> Iterator[FaultProxy]:
    with FaultProxy((mosquitto.host, mosquitto.port)) as proxy:
        yield proxy


def test_watch_goes_on_across_a_flapping_link(
    flapping: FaultProxy, mosquitto: MosquittoBroker, clis: list[Cli]
) -> None:
    key = new_key("-flap")
    watch = Cli("watch", key, "--url", flapping.url)
    clis.append(watch)
    watch.wait_for("watching ")
    with StateStoreClient(mosquitto.host, mosquitto.port, timeout=10) as writer:  # not through the proxy
        flapping.add_toxic("reset_peer", name="flap", **FLAPPING)
        cuts_before = flapping.stats.cuts
        n, give_up = 0, time.monotonic() + 60
        # writes until the watch's link has been reset a few times (the fault's schedule, not a wait for the watch)
        while flapping.stats.cuts < cuts_before + 4 and time.monotonic() < give_up:
            n += 1
            writer.set(key, str(n).encode())
        flapping.remove_toxic("flap")
        n += 1
        writer.set(key, str(n).encode())  # the last value, written once the link holds
        watch.wait_for(f"SET {key} {n}", "out", timeout=TIMEOUT)
    assert watch.proc.poll() is None, watch.err  # still watching
    values = [int(line.split()[2]) for line in watch.out if line.startswith(f"SET {key} ")]
    assert values == sorted(values) and values[-1] == n, values  # in order, never back, ending on the last
    assert flapping.stats.cuts >= cuts_before + 4
    assert watch.said("lost; reconnecting") and watch.said("reconnected to ")


def test_two_lock_jobs_never_overlap_across_a_flapping_link(
    flapping: FaultProxy, clis: list[Cli], tmp_path: Path
) -> None:
    name, stamps = new_key("-flaplock"), tmp_path / "stamps"

    def lock(seconds: float, *options: str) -> Cli:
        cli = Cli("lock", name, "--url", flapping.url, *options, "--", sys.executable, "-c", JOB, str(stamps),
                  str(seconds))  # fmt: skip
        clis.append(cli)
        return cli

    flapping.add_toxic("reset_peer", name="flap", **FLAPPING)
    first = lock(3, "--lease", "4", "--wait", "60")
    first.wait_for("acquired ")
    eventually_sync(lambda: stamps.exists() and "start" in stamps.read_text(), timeout=TIMEOUT)
    second = lock(0.5, "--lease", "4", "--wait", "60")
    codes = {first.finish(60), second.finish(60)}
    flapping.remove_toxic("flap")
    # a lease the flapping did cost ends the command before anyone else's starts (exit 6); never two at once
    assert codes <= {EXIT_OK, EXIT_LEASE_LOST}, (codes, first.err, second.err)
    assert_no_overlap(stamps, 2)
    assert first.said("reconnected to ") or second.said("reconnected to ")  # the link did flap under them
