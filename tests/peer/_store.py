"""What the Django peer runners share: Django's test runner around a unittest suite, with the summary line every
runner ends with (their private store is ``tests._support.procs.private_store``)."""

from __future__ import annotations

import unittest
from collections.abc import Callable


def run_with_django(suite: unittest.TestSuite, header: str, *, close: Callable[[], None]) -> int:
    """Run ``suite`` with Django's test runner (its test databases set up and torn down), then ``close()`` (our
    shared clients, before the broker goes: no reconnect noise); print each skip with its reason, ``header: N
    collected`` and ``N passed, N failed, N skipped``. The exit status: 1 on any failure or error."""
    from django.test.runner import DiscoverRunner

    runner = DiscoverRunner(verbosity=1, interactive=False)
    runner.setup_test_environment()
    old = runner.setup_databases()
    try:
        result = runner.run_suite(suite)
    finally:
        runner.teardown_databases(old)
        runner.teardown_test_environment()
        close()
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    for test, reason in result.skipped:
        print(f"skipped {test.id().rsplit('.', 1)[-1]}: {reason}")
    print(f"{header}: {result.testsRun} collected")
    print(f"{result.testsRun - failed - skipped} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 else 1
