"""Exceptions of the ledger.

Everything the ledger raises on purpose is a ``LedgerError`` (a ``LockstepError``).
Misuse of the API by the caller (a record that cannot be stored, a closed ledger)
is additionally a ``LocalError``: it is a bug in Lockstep, never a peer's fault.
"""

from __future__ import annotations

import errno
import os

from protocol.errors import LocalError, LockstepError


class LedgerError(LockstepError):
    """The ledger could not do what was asked (I/O error, foreign or newer file...)."""


class LedgerMissing(LedgerError, FileNotFoundError):
    """``open_readonly`` was pointed at a path where no ledger file exists."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.message = f"no Lockstep ledger at {os.fspath(path)} (has a coordinator ever run here?)"
        super().__init__(errno.ENOENT, self.message, os.fspath(path))

    def __str__(self) -> str:
        return self.message


class LedgerVersionError(LedgerError):
    """The file is not a Lockstep ledger, or was written by a newer Lockstep."""


class LedgerClosed(LedgerError, LocalError):
    """A method was called after ``close()``."""


class InvalidRecord(LedgerError, LocalError):
    """A record (or argument) cannot be stored; nothing of the batch was written."""
