"""Entry point of the `induce` command: one Typer app, each command in its own module.

Each module in :data:`COMMAND_MODULES` defines ``register(app)`` that adds its commands.
"""
from __future__ import annotations

import importlib
import typer

from induce import __version__

COMMAND_MODULES = (
    "cli.preprocess",
    "cli.evaluate",
    "cli.train",
    "cli.parse",
    "cli.generate",
    "cli.models",
    "cli.diagnose",
    "cli.reproduce",
    "cli.show",
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


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
