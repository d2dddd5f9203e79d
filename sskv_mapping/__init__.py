"""sskv_mapping: the Azure IoT Operations state store as a Python dict and cache backend.

``import sskv_mapping`` needs no optional extra.
"""

from ._protocol.commands import SetCondition, VDeleteResult
from ._protocol.errors import *  # noqa: F403
from ._protocol.errors import __all__ as _errors_all
from ._protocol.hlc import HybridLogicalClock
from ._protocol.notifications import KeyEvent, KeyOperation

__version__ = "0.1.0"

__all__ = [
    "HybridLogicalClock",
    "KeyEvent",
    "KeyOperation",
    "SetCondition",
    "VDeleteResult",
    "__version__",
    *_errors_all,
]
