"""Exceptions that the CLI turns into a one-line message and exit code 2 (no traceback)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union


class InduceError(Exception):
    """Any error the user can fix: bad input, missing data, incompatible files."""


class InputError(InduceError):
    """Bad input data. The message starts with ``path:line:`` when those are known."""

    def __init__(self, message: str, path: Optional[Union[str, Path]] = None, line: Optional[int] = None):
        self.path = None if path is None else str(path)
        self.line = line
        self.reason = message
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(where + message)


class CountMismatchError(InputError):
    """Predicted trees that are not one per gold sentence (e.g. a file parsed from another treebank or split
    than the gold it is scored on)."""


class InvalidValueError(InduceError, ValueError):
    """A value the user chose that a function cannot take (an unknown baseline or decoder name, a decoder
    that does not fit the model): still a ``ValueError`` for library callers, and at the command line a
    one-line message like any :class:`InduceError` (a plain ``ValueError`` there is a bug)."""
