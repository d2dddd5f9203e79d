"""The public home of sskv_mapping's exception tree (defined in the pure protocol layer)."""

from ._protocol.errors import *  # noqa: F403
from ._protocol.errors import __all__  # noqa: F401
