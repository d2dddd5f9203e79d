"""The ``sskv`` command's parser (``sskv emulator`` is the parser and runner of ``emulator/process.py``).

To add a command, write an ``_add_*_parser(subparsers)`` function and list it in ``_REGISTRARS``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__

__all__ = ["build_parser", "main"]


def _add_emulator_parser(subparsers: Any) -> None:
    # the parser of ``python -m sskv_mapping.emulator``: one command line, whichever way it is started
    from ..emulator.process import DESCRIPTION, EPILOG, add_emulator_arguments, run

    p = subparsers.add_parser(
        "emulator",
        help="run the local state store emulator (optionally with its own mosquitto)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_emulator_arguments(p)
    p.set_defaults(func=run)


def _add_client_parsers(subparsers: Any) -> None:
    from ._client_commands import add_client_parsers

    add_client_parsers(subparsers)


_REGISTRARS: list[Callable[[Any], None]] = [_add_emulator_parser, _add_client_parsers]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sskv",
        description="The Azure IoT Operations state store from the command line, and its local emulator.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _REGISTRARS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sskv``; returns the exit status (the console script exits with it)."""
    args = build_parser().parse_args(argv)
    # Keys and values from argv that are not UTF-8 are echoed back as the bytes they were, not a traceback.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="surrogateescape")
    func: Callable[[argparse.Namespace], int] = args.func
    with contextlib.suppress(BrokenPipeError):  # `sskv watch k | head` must not end in a traceback
        return int(func(args))
    return 1
