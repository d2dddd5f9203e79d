"""``python -m sskv_mapping.cli``: the same as the ``sskv`` command."""

import sys

from ._main import main

if __name__ == "__main__":
    sys.exit(main())
