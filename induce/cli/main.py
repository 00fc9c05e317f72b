"""Entry point of the `induce` command: one Typer app, each command in its own module.

Each module in :data:`COMMAND_MODULES` defines ``register(app)`` that adds its commands. Command
modules import only typer, rich and light parts of :mod:`induce` at the top; torch, nltk, numpy
and the models are imported inside the commands, so that ``induce --help`` stays fast
(``tests/test_cli_main.py`` checks that it imports none of them). Every command runs inside
:func:`induce.cli.messages.report_user_errors` (one line and exit status 2 for a user error).
"""
from __future__ import annotations

import functools
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
    "induce.cli.compare",
    "induce.cli.ensemble",
    "induce.cli.leaderboard",
    "induce.cli.train",
    "induce.cli.parse",
    "induce.cli.generate",
    "induce.cli.models",
    "induce.cli.diagnose",
    "induce.cli.reproduce",
    "induce.cli.show",
    "induce.cli.config",
)

app = typer.Typer(
    name="induce",
    help=(
        "Unsupervised grammar induction: train models that learn syntax without trees (PRPN, "
        "ON-LSTM, PaLM, the neural and simple PCFGs), parse with them, and evaluate induced trees "
        "against a treebank (the Penn Treebank, the Keyaki Treebank) under a named, published "
        "convention."
    ),
    no_args_is_help=True,
    add_completion=False,
    add_help_option=False,  # ours (HELP_OPTION): Typer's own shows a `<bool>` label
    pretty_exceptions_show_locals=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"induce {__version__}")
        raise typer.Exit()


def _help_callback(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        typer.echo(ctx.get_help(), color=ctx.color)
        raise typer.Exit()


def _help_option() -> typer.models.OptionInfo:
    """``--help`` as Typer's, without the ``<bool>`` label Typer's help table gives every flag (an empty
    metavar); each command gets its own (:func:`plain_flags`)."""
    return typer.Option(False, "--help", is_eager=True, expose_value=False, callback=_help_callback, metavar="",
                        help="Show this message and exit.")


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, metavar="", help="Print the version and exit."
    ),
    show_help: bool = _help_option(),
) -> None:
    """Unsupervised grammar induction toolkit."""


_LIST_OR_BLOCK = re.compile(r"^\s*([-*]\s|\d+[.)]\s|\x08)|^\s{2,}")


def reflow(text: str) -> str:
    """Help text with each paragraph on one line, so that the terminal wraps it at its own width.

    Docstrings are wrapped at ~100 columns in the source; Typer keeps those line breaks, which
    gives ragged help in a narrower terminal. Paragraphs are separated by blank lines; a paragraph
    whose lines start like a list item (``-``, ``*``, ``1.``) or are indented is left as written.
    A form feed ends the help (click's convention): what follows it is for the source's readers.
    """
    paragraphs = inspect.cleandoc(text.partition("\f")[0]).split("\n\n")
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


def plain_flags(typer_app: typer.Typer) -> None:
    """No type label on the flags in ``--help`` (Typer's help table writes ``<bool>`` beside each one, as if it
    took a value): every boolean option of every command and group (recursively) gets an empty metavar, and
    ``--help`` is :func:`_help_option` (Typer's own is turned off: it has the label too)."""
    for info in typer_app.registered_commands:
        signature = inspect.signature(info.callback)
        for parameter in signature.parameters.values():
            default = parameter.default
            if isinstance(default, typer.models.OptionInfo) and parameter.annotation in (bool, "bool") \
                    and default.metavar is None:
                default.metavar = ""
        if "show_help" not in signature.parameters:
            info.callback = _with_help_option(info.callback, signature)
        info.add_help_option = False
    for group in typer_app.registered_groups:
        sub_app = group.typer_instance
        if sub_app.registered_callback is None:
            sub_app.callback()(_group_callback)
        sub_app.info.add_help_option = False
        group.add_help_option = False
        plain_flags(sub_app)


def _with_help_option(command, signature: inspect.Signature):
    """``command`` with :func:`_help_option` added to its signature (Typer reads it); the value Typer passes
    for it is dropped."""
    @functools.wraps(command)
    def with_help(*args, show_help: bool = False, **kwargs):
        return command(*args, **kwargs)

    help_parameter = inspect.Parameter("show_help", inspect.Parameter.KEYWORD_ONLY, default=_help_option(),
                                       annotation=bool)
    with_help.__signature__ = signature.replace(parameters=[*signature.parameters.values(), help_parameter])
    return with_help


def _group_callback(show_help: bool = _help_option()) -> None:
    """A command group's own options: ``--help`` only (:func:`plain_flags`)."""


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
plain_flags(app)
guard_commands(app)


def main() -> None:
    """The ``induce`` command (also ``python -m induce`` and ``python -m induce.cli.main``: one name in the help)."""
    app(prog_name="induce")


if __name__ == "__main__":
    main()
