"""One-line error messages of the commands (no traceback for user mistakes)."""
from __future__ import annotations

from rich.markup import escape

from induce.files import os_error_message


def error_text(err: BaseException) -> str:
    """The message of ``err`` for ``console.print`` after ``error:``: an ``OSError`` as ``PATH: reason``,
    anything else as its text; escaped so that brackets in paths or input snippets are printed as they
    are (rich would read ``[...]`` as markup and fail on ``[/...]``)."""
    return escape(os_error_message(err) if isinstance(err, OSError) else str(err))
