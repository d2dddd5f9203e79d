"""The ``sskv`` command: ``_main`` (the parser), ``_client_commands``, ``_child`` (docs/cli.md)."""

from ._main import build_parser, main

__all__ = ["build_parser", "main"]
