"""A clock moved by hand, for unit tests of code that takes its clock as a callable."""

from __future__ import annotations

from typing import Generic, TypeVar, overload

N = TypeVar("N", int, float)


class ManualClock(Generic[N]):
    """``clock()`` reads :attr:`now`: integer milliseconds (``ManualClock(T0_MS)``, for HLC and emulator clocks) or
    float seconds (``ManualClock()``, 100.0); a test sets it or calls :meth:`advance`. (The in-process store's clock
    is :class:`sskv_mapping.testing.FakeClock`.)"""

    @overload
    def __init__(self: ManualClock[float]) -> None: ...
    @overload
    def __init__(self, now: N) -> None: ...
    def __init__(self, now: N = 100.0) -> None:  # type: ignore[assignment]
        self.now: N = now

    def __call__(self) -> N:
        return self.now

    def advance(self, by: N) -> None:
        self.now += by
