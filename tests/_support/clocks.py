"""A clock moved by hand, for unit tests of code that takes its clock as a callable."""

from __future__ import annotations


class ManualClock:
    """``clock()`` reads :attr:`now` (milliseconds or seconds: what the code under test reads); a test sets it or
    calls :meth:`advance`. (The in-process store's clock is :class:`sskv_mapping.testing.FakeClock`.)"""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, by: float) -> None:
        self.now += by
