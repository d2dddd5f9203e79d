"""Fixtures and the end-of-run summary of the fault-injection suite.

Every test here is marked ``faults`` (the marker is registered below) and records one row per scenario
with :func:`fault_report`; ``pytest_terminal_summary`` prints the rows as a table at the end of the run:

    scenario | load | faults injected | writes lost | stale reads | recovery time (max/median) | result

Knobs (environment variables, all optional):

* ``SSKV_FAULTS_RESTARTS`` / ``SSKV_FAULTS_SECONDS``: broker SIGKILL+restart count and load window of the
  broker-kill scenario (default 10 restarts in 60 s, as the issue asks);
* ``SSKV_FAULTS_FENCING_ROUNDS`` / ``SSKV_FAULTS_FENCING_BROKER_ROUNDS``: fencing rounds on the in-process
  store (default 1000) and over the real broker (default 20);
* ``SSKV_FAULTS_NOTIFY_ROUNDS``: drop/duplicate rounds of the notification scenario (default 8).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field

import pytest

_ROWS = pytest.StashKey[list["FaultRow"]]()
_OUTCOME = pytest.StashKey[str]()

COLUMNS = (
    "scenario",
    "load",
    "faults injected",
    "writes lost",
    "stale reads",
    "recovery time (max/median)",
    "result",
)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = int(raw)
    if value < 1:
        raise pytest.UsageError(f"{name} must be a positive integer, not {raw!r}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = float(raw)
    if not value > 0:
        raise pytest.UsageError(f"{name} must be a positive number, not {raw!r}")
    return value


def recovery_text(samples: Sequence[float]) -> str:
    """``max/median`` in seconds, or ``-`` without samples."""
    if not samples:
        return "-"
    return f"{max(samples):.3f}s/{statistics.median(samples):.3f}s"


@dataclass
class FaultRow:
    """One line of the summary. A test fills the figures; ``result`` is set from the test's outcome."""

    scenario: str
    load: str = "-"
    faults: str = "-"
    writes_lost: str = "-"
    stale_reads: str = "-"
    recovery: str = "-"
    result: str = "?"
    notes: list[str] = field(default_factory=list)

    def cells(self) -> tuple[str, ...]:
        return (self.scenario, self.load, self.faults, self.writes_lost, self.stale_reads, self.recovery, self.result)

    def print(self) -> None:
        """The figures on the test's own output (shown with ``-s``, or with the report of a failure)."""
        print(" | ".join(f"{name}: {cell}" for name, cell in zip(COLUMNS, self.cells(), strict=True)))
        for note in self.notes:
            print(f"  {note}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "faults: fault-injection tests (kills, restarts, lost messages, skew)")
    config.stash[_ROWS] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome: str = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "XPASS"
        item.stash[_OUTCOME] = outcome
    return report


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> Iterator[FaultRow]:
    """A summary row for this test; filled by the test, printed, and collected for the final table."""
    row = FaultRow(scenario=request.node.name)
    yield row
    row.result = request.node.stash.get(_OUTCOME, "error")
    row.print()
    request.config.stash[_ROWS].append(row)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    rows = config.stash.get(_ROWS, [])
    if not rows:
        return
    table = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    terminalreporter.write_sep("=", "fault-injection summary")
    for n, r in enumerate(table):
        terminalreporter.write_line(" | ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)))
        if n == 0:
            terminalreporter.write_line("-+-".join("-" * w for w in widths))
    for row in rows:
        for note in row.notes:
            terminalreporter.write_line(f"{row.scenario}: {note}")
