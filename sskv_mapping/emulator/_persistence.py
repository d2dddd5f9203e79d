"""The emulator's ``--persist-file``: where entries written with ``aio-persistence: true`` outlive the process.

What is kept and what a failed write costs: docs/emulator.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from pathlib import Path

from ..errors import ConfigurationError
from .core import EmulatorCore

log = logging.getLogger("sskv_mapping.emulator")

_DELAY_S = 0.05  # a burst of persistent writes is coalesced into one file write
_RETRY_S = 1.0  # a file that could not be written is tried again after this long


class PersistenceFile:
    """The persistent entries of ``core`` in the file ``path``: loaded by :meth:`load`, rewritten by :meth:`run`
    shortly after each persistent change (``wake``), and by :meth:`save` at shutdown. A write that fails is counted
    in ``stats["persist_failures"]`` and logged at ERROR every time, never silent: what the clients were told is
    kept is not on disk."""

    def __init__(self, path: Path, core: EmulatorCore, stats: dict[str, int]) -> None:
        self.path = path
        self._core = core
        self._stats = stats
        self.wake = asyncio.Event()  # set when a persistent change is not saved yet (binds to the loop on first use)
        self.saved_generation = core.persistence_generation

    def load(self) -> None:
        """Refuse a file that cannot be written (:class:`ConfigurationError`) and load the entries it holds."""
        problem = persist_file_problem(self.path)
        if problem is not None:
            raise ConfigurationError(problem)
        if not self.path.exists():
            return
        restored = self._core.load_persistent(self.path.read_bytes())
        self.saved_generation = self._core.persistence_generation
        log.info("restored %d persistent entr%s from %s", restored, "y" if restored == 1 else "ies", self.path)

    async def run(self) -> None:
        failing = False
        while True:
            await self.wake.wait()
            await asyncio.sleep(_DELAY_S)
            self.wake.clear()
            generation = self._core.persistence_generation
            data = self._core.dump_persistent()
            try:
                await asyncio.to_thread(_write_atomically, self.path, data)
            except OSError as exc:
                failing = True
                self._failed(exc, retry=True)
                self.wake.set()  # tried again (the next change would wait for it anyway)
                await asyncio.sleep(_RETRY_S)
                continue
            self.saved_generation = generation
            if failing:
                failing = False
                log.warning("wrote the persistence file %s again: persistent entries are saved", self.path)

    def save(self) -> None:
        if self._core.persistence_generation == self.saved_generation:
            return
        try:
            _write_atomically(self.path, self._core.dump_persistent())
        except OSError as exc:
            self._failed(exc, retry=False)
            return
        self.saved_generation = self._core.persistence_generation

    def _failed(self, exc: OSError, *, retry: bool) -> None:
        self._stats["persist_failures"] += 1
        log.error(
            "cannot write the persistence file %s (%s): entries written with aio-persistence are NOT saved "
            "(failure %d)%s",
            self.path,
            exc.strerror or exc,
            self._stats["persist_failures"],
            f"; trying again in {_RETRY_S:g} s" if retry else "",
        )


def persist_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be the persistence file (``None``: it can). Its folder must exist and take a new file
    (the file is rewritten by replacing it), and a file already there must be a file: told at start, not found out
    at the first persistent write, which the client was told is kept."""
    where = f"cannot keep persistent entries in {path}"
    if path.is_dir():
        return f"{where}: it is a directory"
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        return f"{where}: the directory {directory} does not exist"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        return f"{where}: cannot create a file in {directory} ({exc.strerror or exc})"
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    if path.exists() and not path.is_file():
        return f"{where}: it is not a regular file"
    return None


def _write_atomically(path: Path, data: bytes) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
