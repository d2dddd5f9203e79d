""":data:`UNSET`, "use the default": distinct from ``None``, which means "no limit" or "never expires"."""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["UNSET", "UnsetType"]


class UnsetType(enum.Enum):
    """The type of :data:`UNSET` (for annotations: ``timeout: float | UnsetType | None = UNSET``)."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: "Use the client (or cache) default" (distinct from ``None``, which means "no limit" / "never expires").
UNSET: Final = UnsetType.UNSET
