"""The pure protocol core of the state store: no sockets, no asyncio, no clock it was not handed.

The emulator and the client share it; the wire it speaks is docs/design/protocol.md.
"""

from .commands import (
    Command,
    Delete,
    Get,
    KeyNotify,
    Scan,
    ScanPage,
    Set,
    SetCondition,
    VDelete,
    VDeleteResult,
    parse_command,
)
from .hlc import MAX_DRIFT_MS, HlcClock, HybridLogicalClock
from .notifications import KeyEvent, KeyOperation

__all__ = [
    "MAX_DRIFT_MS",
    "Command",
    "Delete",
    "Get",
    "HlcClock",
    "HybridLogicalClock",
    "KeyEvent",
    "KeyNotify",
    "KeyOperation",
    "Scan",
    "ScanPage",
    "Set",
    "SetCondition",
    "VDelete",
    "VDeleteResult",
    "parse_command",
]
