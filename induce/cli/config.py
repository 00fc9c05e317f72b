"""`induce config`: the final config of a run, as YAML, with the layer each value comes from."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

#: How a value that no layer sets is named: the typed default of its section's class.
TYPED_DEFAULT = "default ({})"
#: Added to the origin of a key whose ``null`` the run fills in when it starts (config.FILLED_IN_BY_THE_RUN).
FILLED_IN_NOTE = "; null: filled in when the run starts"


def config_command(
    overrides: Optional[list[str]] = typer.Argument(
        None, metavar="[KEY=VALUE]...",
        help="Config overrides with dotted keys, as for induce train, e.g. model.hidden_size=200 optim.lr=0.003.",
    ),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (see `induce models`); default: "
                                        "the model_name of --config."),
    profile: Optional[str] = typer.Option(
        None, "--profile", "-p", help="A profile of induce reproduce (cpu, cpu-long, toy, gpu, paper, auto, or a "
        "folder with a profile.yaml): its <model>.yaml files, overrides, first seed, device, threads and budgets "
        "come between the model's shipped config and --config."),
    config: Optional[Path] = typer.Option(None, "--config", help="A YAML config of your own, as for induce train."),
    as_json: bool = typer.Option(False, "--json", help="Print {key: {value, origin}} as JSON (dotted keys)."),
) -> None:
    """Print the config a run would get, as YAML, each key with the layer its value comes from (`# from: ...`).

    Layers, later ones win: the typed defaults (`default (TrainConfig)`; a model's fields: `default (its
    Config)`) < the model's shipped induce/models/<family>/<model>.yaml < with --profile, the profile's <model>.yaml
    files, its overrides (named by its profile.yaml) and its per-run values < --config FILE < --model <
    KEY=VALUE (`override KEY=VALUE`). The model section is complete: every field of the model's Config.

    A null that a run has filled in when it starts (train.threads, data.corpus, data.bptt_bucket) depends on the
    machine and the data: the run's config.yaml records the value used. A bad value is an error that names the
    key and the layer it came from.
    """
    rows = config_rows(model, profile, config, overrides or [])
    if as_json:
        typer.echo(json.dumps({key: {"value": value, "origin": origin} for key, value, origin in rows}, indent=2))
    else:
        typer.echo(annotated_yaml(rows), nl=False)


def config_rows(model: Optional[str], profile: Optional[str], config_file: Optional[Path],
                overrides: list[str]) -> list[tuple[str, Any, str]]:
    """``(dotted key, value, origin)`` of every leaf of the resolved config, in ``config.yaml``'s order."""
    from induce.config import FILLED_IN_BY_THE_RUN, leaf_sources, load_config
    from induce.models.configs import resolve_config
    from induce.models.registry import get_model_class

    layers = None
    if profile is not None:
        from induce.reproduce.profiles import (
            load_profile,
            profile_layers,
            resolve_profile_name,
            run_values_layers,
        )

        loaded = load_profile(resolve_profile_name(profile))

        def layers(name: str) -> list:
            return [*profile_layers(loaded, name), *run_values_layers(loaded, name)]
    resolved = resolve_config(load_config(model, config_file, overrides, profile_layers=layers))
    classes = {"data": "DataConfig", "optim": "OptimConfig", "train": "TrainConfig",
               "model": get_model_class(resolved.model_name).Config.__name__}
    rows = []
    for key, value, source in leaf_sources(resolved):
        origin = source or TYPED_DEFAULT.format(classes.get(key.partition(".")[0], "RunConfig"))
        if key in FILLED_IN_BY_THE_RUN and value is None:
            origin += FILLED_IN_NOTE
        rows.append((key, value, origin))
    return rows


def annotated_yaml(rows: list[tuple[str, Any, str]]) -> str:
    """The config as block YAML (what ``induce train --config`` reads back), one leaf a line (lists in flow
    style), each with a trailing ``# from: ORIGIN`` comment aligned in one column."""
    import yaml

    from induce.config import ConfigDumper

    lines: list[tuple[str, Optional[str]]] = []
    opened: list[str] = []
    for key, value, origin in rows:
        parts = key.split(".")
        common = 0
        while common < min(len(opened), len(parts) - 1) and opened[common] == parts[common]:
            common += 1
        opened = opened[:common]
        for depth in range(common, len(parts) - 1):
            lines.append(("  " * depth + f"{parts[depth]}:", None))
            opened.append(parts[depth])
        text = yaml.dump(value, Dumper=ConfigDumper, default_flow_style=True, width=10**9, allow_unicode=False)
        text = text.removesuffix("\n").removesuffix("\n...")
        lines.append(("  " * (len(parts) - 1) + f"{parts[-1]}: {text}", origin))
    width = max(len(line) for line, origin in lines if origin is not None)
    return "".join(f"{line:<{width}}  # from: {origin}\n" if origin is not None else f"{line}\n"
                   for line, origin in lines)


def register(app: typer.Typer) -> None:
    """Add ``induce config`` to the app."""
    app.command("config")(config_command)
