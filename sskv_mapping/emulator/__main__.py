"""``python -m sskv_mapping.emulator``: the entry point of :mod:`sskv_mapping.emulator.process`.

Must not import aiomqtt/paho directly, nor the client layers.
"""

import sys

from .process import main

if __name__ == "__main__":
    sys.exit(main())
