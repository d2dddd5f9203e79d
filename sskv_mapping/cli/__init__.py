"""The ``sskv`` command: get/set/del/vdel/keys/watch/lock/leader and the local emulator.

Private parts: ``_main`` (the parser, ``sskv emulator``), ``_client_commands`` (the commands that talk to a store),
``_child`` (the COMMAND of ``sskv lock``: its own process group, stopped as a whole).

Must not import: sskv_mapping.integrations
"""

from ._main import build_parser, main

__all__ = ["build_parser", "main"]
