"""How the commands end on a user error: one line on stderr, exit status 2, no traceback.

:func:`guard_commands` wraps every command of the app (``induce.cli.main`` calls it once) in
:func:`report_user_errors`, so that no command has a try/except of its own for these. The user
errors are :data:`USER_ERRORS`; any other exception is a bug and keeps its traceback.
"""
from __future__ import annotations

import functools
from typing import Callable

import typer
from rich.console import Console
from rich.markup import escape

from induce.errors import InduceError
from induce.files import os_error_message

#: What a user can fix, reported in one line with exit status :data:`USER_ERROR_EXIT`:
#: - ``InduceError`` and its subclasses: bad input, data, config, a run folder in use, a run that diverged, ...
#:   Library functions raise one for a bad value the user chose (``induce.errors.InvalidValueError`` is
#:   also a ``ValueError`` for library callers);
#: - ``OSError``: a file that cannot be read or written (missing, no permission, a full disk), said as
#:   ``PATH: reason``.
#: A plain ``ValueError``, ``TypeError``, ... is a bug and is shown with its traceback.
USER_ERRORS = (InduceError, OSError)
USER_ERROR_EXIT = 2
#: Exit status after Ctrl-C (128 + SIGINT, as a shell reports it); a command may print what to do first.
INTERRUPTED_EXIT = 130


def error_text(err: BaseException) -> str:
    """The message of ``err`` for ``console.print`` after ``error:``: an ``OSError`` as ``PATH: reason``,
    anything else as its text; escaped so that brackets in paths or input snippets are printed as they
    are (rich would read ``[...]`` as markup and fail on ``[/...]``)."""
    return escape(os_error_message(err) if isinstance(err, OSError) else str(err))


def report_user_errors(command: Callable) -> Callable:
    """``command`` that reports a :data:`USER_ERRORS` exception as ``error: MESSAGE`` on stderr and exits
    with :data:`USER_ERROR_EXIT`, and exits with :data:`INTERRUPTED_EXIT` after Ctrl-C. ``typer.Exit``
    (a command's own exit status) passes through. The signature is ``command``'s (Typer reads it)."""

    @functools.wraps(command)
    def guarded(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as err:
            Console(stderr=True).print(f"[bold red]error:[/] {error_text(err)}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=USER_ERROR_EXIT) from None
        except KeyboardInterrupt:
            raise typer.Exit(code=INTERRUPTED_EXIT) from None

    guarded.reports_user_errors = True
    return guarded


def guard_commands(app: typer.Typer) -> None:
    """Wrap every command of ``app`` and of its sub-apps (recursively) in :func:`report_user_errors`, once."""
    for info in app.registered_commands:
        if info.callback is not None and not getattr(info.callback, "reports_user_errors", False):
            info.callback = report_user_errors(info.callback)
    for group in app.registered_groups:
        guard_commands(group.typer_instance)
