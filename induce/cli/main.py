"""Entry point of the `induce` command: one Typer app, each command in its own module.

Each module in :data:`COMMAND_MODULES` defines ``register(app)`` that adds its commands. Command
modules import only typer, rich and light parts of :mod:`induce` at the top; torch, nltk, numpy
and the models are imported inside the commands, so that ``induce --help`` stays fast
(``tests/test_cli_main.py`` checks that it imports none of them). Every command runs inside
:func:`induce.cli.messages.report_user_errors` (one line and exit status 2 for a user error).
"""
from __future__ import annotations

import importlib
import inspect
import re

import typer

from induce import __version__
from induce.cli.messages import guard_commands
from induce.models.plugins import load_plugins_for_help

COMMAND_MODULES = (
    "induce.cli.preprocess",
    "induce.cli.evaluate",
    "induce.cli.ensemble",
    "induce.cli.train",
    "induce.cli.parse",
    "induce.cli.generate",
    "induce.cli.models",
    "induce.cli.diagnose",
    "induce.cli.reproduce",
    "induce.cli.show",
)

app = typer.Typer(
    name="induce",
    help=(
        "Unsupervised grammar induction: train language models that learn syntax without "
        "trees (PRPN, ON-LSTM, PaLM), parse with them, and evaluate induced trees against "
        "the Penn Treebank under one explicit convention."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"induce {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Unsupervised grammar induction toolkit."""


_LIST_OR_BLOCK = re.compile(r"^\s*([-*]\s|\d+[.)]\s|\x08)|^\s{2,}")


def reflow(text: str) -> str:
    """Help text with each paragraph on one line, so that the terminal wraps it at its own width.

    Docstrings are wrapped at ~100 columns in the source; Typer keeps those line breaks, which
    gives ragged help in a narrower terminal. Paragraphs are separated by blank lines; a paragraph
    whose lines start like a list item (``-``, ``*``, ``1.``) or are indented is left as written.
    """
    paragraphs = inspect.cleandoc(text).split("\n\n")
    out = []
    for paragraph in paragraphs:
        lines = paragraph.split("\n")
        if any(_LIST_OR_BLOCK.match(line) for line in lines):
            out.append(paragraph)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def _reflow_help(typer_app: typer.Typer) -> None:
    """Reflow the help of every registered command and group (recursively), and escape what rich
    would read as markup in every help text, epilog and option help (see :func:`escape_markup`)."""
    for info in typer_app.registered_commands:
        text = info.help or inspect.getdoc(info.callback) or ""
        if text:
            info.help = escape_markup(reflow(text))
        if info.epilog:
            info.epilog = escape_markup(info.epilog)
        for parameter in inspect.signature(info.callback).parameters.values():
            default = parameter.default
            if isinstance(default, typer.models.ParameterInfo) and default.help:
                default.help = escape_markup(default.help)
    for group in typer_app.registered_groups:
        group_info = group.typer_instance.info
        if isinstance(group_info.help, str):
            group_info.help = escape_markup(group_info.help)
        _reflow_help(group.typer_instance)


def escape_markup(text: str) -> str:
    """``text`` as it should appear in ``--help``: Typer renders help with rich markup, which takes
    ``[i,j]`` or ``[bold]`` for a style tag and drops it; escaped, the brackets are printed as written."""
    from rich.markup import escape

    return escape(text)


# Plugins first (INDUCE_PLUGINS: induce.models.plugins), so that their decoders are in --decoder's help.
load_plugins_for_help()
for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)
_reflow_help(app)
guard_commands(app)


def main() -> None:
    """The ``induce`` command (also ``python -m induce`` and ``python -m induce.cli.main``: one name in the help)."""
    app(prog_name="induce")


if __name__ == "__main__":
    main()
