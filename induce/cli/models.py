"""`induce models`: list the registered models, one line each."""
from __future__ import annotations

import typer


def models_command() -> None:
    """List the models `induce train --model NAME` accepts: name, parser kind, description.

    Controls (e.g. palm-rb, right-branching whatever it learns) are marked; the commands never pick
    one as their default run.
    """
    from induce.models.registry import get_model_class, list_models

    models = list_models()
    width = max((len(name) for name in models), default=0)
    for name, description in models.items():
        cls = get_model_class(name)
        kind = cls.parser_kind.name
        mark = " [control]" if getattr(cls, "control", False) else ""
        typer.echo(f"{name:<{width}}  {kind:<8}  {description}{mark}")


def register(app: typer.Typer) -> None:
    """Add ``induce models`` to the app."""
    app.command("models")(models_command)
