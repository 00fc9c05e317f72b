"""A run configuration's ``model`` section, checked against the chosen model class.

:mod:`induce.config` reads a run configuration (files, flags, overrides) and validates the sections it knows
(``data``, ``optim``, ``train``); it sits below the models and keeps ``model`` as the mapping it was given.
Where a model is chosen, :func:`resolve_config` validates that mapping with the model's own ``Config`` and
stores it resolved (every field, defaults filled in), so that ``config.yaml`` in a run folder says exactly
what ran; it also checks the keys of the other sections that depend on the model (``train.select_by``,
``optim.scorer_optimizer``). Errors name the dotted key and where its value came from, as
:mod:`induce.config`'s do.
"""
from __future__ import annotations

from typing import Any, Optional

import pydantic

from induce.config import (
    MODELS_PREFIX,
    ConfigError,
    RunConfig,
    format_validation_error,
    model_config_path,
    validate_config,
)

from .base import ModelConfig
from .registry import family_folder, get_model_class


def resolve_config(config: RunConfig) -> RunConfig:
    """``config`` with its ``model`` section validated by ``model_name``'s ``Config`` and filled in with its
    defaults (a new object when anything changed); a :class:`~induce.config.ConfigError` for an unknown model,
    a bad model key, a family's model whose base config is missing (:func:`missing_base_config`), or a
    ``train.select_by`` / ``optim.scorer_optimizer`` the model cannot have."""
    origins = config.origins
    try:
        cls = get_model_class(config.model_name)
    except KeyError as err:
        raise ConfigError(f"{origins.of('model_name')}: model_name: {err.args[0]}") from None
    missing = missing_base_config(cls)
    if missing:
        raise ConfigError(missing)
    try:
        resolved = cls.Config(**config.model).model_dump(mode="json")
    except pydantic.ValidationError as err:
        raise ConfigError(format_validation_error(err, "model", origins)) from None
    except TypeError as err:
        raise ConfigError(f"{origins.of('model')}: model: {err}") from None
    problem = selection_problem(cls, config.train.select_by)
    if problem:
        raise ConfigError(f"{origins.of('train.select_by')}: {problem}")
    if config.optim.scorer_optimizer == "adam" and not cls.has_span_scorer:
        raise ConfigError(f"{origins.of('optim.scorer_optimizer')}: optim.scorer_optimizer: adam needs a model with "
                          f"a span scorer (PaLM); {cls.name!r} has none; use optim.scorer_optimizer=shared")
    if resolved == config.model:
        return config
    return config.model_copy(update={"model": resolved})


def missing_base_config(model_cls) -> Optional[str]:
    """Why ``model_cls`` cannot be configured (``None`` when it can): a model of a family folder whose base config
    ``<model>.yaml`` is not found (an incomplete install, where the YAML files did not ship) would train with its
    class defaults in silence. A plugin's model has no base config and is not checked."""
    folder = family_folder(model_cls)
    if folder is None or model_config_path(model_cls.name) is not None:
        return None
    return (f"{MODELS_PREFIX}{folder.name}/{model_cls.name}.yaml: this shipped config is missing from the installed "
            "induce package (an incomplete install); reinstall induce (pip install .)")


def selection_problem(model_cls, select_by: Any) -> Optional[str]:
    """Why ``train.select_by`` cannot be used with ``model_cls`` (``None`` when it can): a model
    without syntactic structure (``parser_kind = NO_PARSER``, e.g. rellstm) has no dev F1 to select by."""
    if select_by == "dev_f1" and not model_cls.parser_kind.parses:
        return (
            f"train.select_by: dev_f1 needs a model that parses, but {model_cls.name!r} has no syntactic "
            f"structure (parser_kind 'none'); use train.select_by=valid_ppl"
        )
    return None


def model_config(config: RunConfig) -> ModelConfig:
    """The validated ``Config`` instance of ``config``'s model (what the model class is built from)."""
    return get_model_class(config.model_name).Config(**config.model)


def stored_config(raw: dict) -> dict:
    """A config read back from a checkpoint sidecar, upgraded: model fields added since it was
    written are filled in with the value its run used (the model Config's ``stored_defaults``), not
    with today's default, which may build another model (ON-LSTM's second gate bias) or misstate
    how the weights were initialised. Other configs and unknown models are returned unchanged."""
    model = raw.get("model")
    try:
        cls = get_model_class(str(raw.get("model_name")))
    except KeyError:
        return raw
    if not isinstance(model, dict):
        return raw
    missing = {key: value for key, value in cls.Config.stored_defaults.items() if key not in model}
    return {**raw, "model": {**model, **missing}} if missing else raw


def stored_run_config(raw: dict, source: str) -> RunConfig:
    """The resolved :class:`~induce.config.RunConfig` of a config read back from a checkpoint sidecar or a run
    folder's ``config.yaml`` (``source``, named in errors), upgraded by :func:`stored_config`."""
    return resolve_config(validate_config(stored_config(raw), source=source))
