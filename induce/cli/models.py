"""`induce models`: list the registered models, one line each."""
from __future__ import annotations

import typer


def models_command() -> None:
    """List the models `induce train --model NAME` accepts: name, parser kind, description.

    Controls (e.g. palm-rb, right-branching whatever it learns) are marked; the commands never pick
    one as their default run.
    """
    from induce.models.registry import model_classes

    models = model_classes()
    width = max((len(name) for name in models), default=0)
    for name, cls in models.items():
        mark = " [control]" if cls.control else ""
        typer.echo(f"{name:<{width}}  {cls.parser_kind.name:<8}  {cls.description}{mark}")


def register(app: typer.Typer) -> None:
    """Add ``induce models`` to the app."""
    app.command("models")(models_command)
