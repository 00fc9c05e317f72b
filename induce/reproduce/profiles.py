"""Profiles of ``induce reproduce``: ``induce/configs/<profile>/profile.yaml`` (:class:`Profile`, shipped
in the package) or a folder of one's own, and the run configs they build (the typed defaults < the shipped
``<model>.yaml`` < ``<profile>/<model>.yaml`` < the profile's overrides < the pipeline's:
:func:`build_run_config`, with :func:`induce.config.layer_config`).

``auto`` (the default of ``induce reproduce`` and ``make reproduce``) is ``gpu`` when torch sees a
CUDA device, else ``cpu`` (:func:`resolve_profile_name`).

**Extending a profile.** ``extends: NAME`` builds a profile on another (a folder ``NAME`` beside this one's, else
the shipped profile ``NAME``): its ``profile.yaml`` keys are the base's with this file's over them (mappings such
as ``steps_per_model`` merged key by key), and each model's config layers are the base folder's ``<model>.yaml``
then this folder's.

**Budgets.** ``steps_per_model`` gives each run ``train.max_steps`` (optimiser steps, one number per model):
the same training on every machine, however loaded. ``time_per_model`` (``train.time_budget``) stops each run
by the clock instead; a profile that chooses it gets figures that depend on the machine's speed, and every run
stopped that way says so (its status, ``results.json``, the report). With neither, the configs' epochs decide.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import pydantic

from induce.config import (
    CONFIG_DIR,
    OVERRIDE,
    ConfigError,
    Layer,
    RunConfig,
    config_source,
    deep_merge,
    layer_config,
    parse_duration,
    read_yaml,
    shipped_layers,
)
from induce.errors import InduceError

PROFILE_FILE = "profile.yaml"


def _seconds(value: str) -> float:
    """:func:`parse_duration` for a validator (its error as a ValueError, which pydantic reports with the key)."""
    try:
        return parse_duration(value)
    except ConfigError as err:
        raise ValueError(str(err).replace("time budget ", "")) from None


class SlurmSettings(pydantic.BaseModel):
    """``slurm:`` of a profile: what each job of ``induce reproduce --executor slurm`` asks the cluster for
    (:mod:`induce.reproduce.slurm`); the ``--slurm-*`` options replace single keys."""

    model_config = pydantic.ConfigDict(extra="forbid")

    partition: Optional[str] = pydantic.Field(None, description="sbatch --partition (null: the cluster's default)")
    account: Optional[str] = pydantic.Field(None, description="sbatch --account (null: the user's default)")
    time: str = pydantic.Field("4h", description="each job's time limit (sbatch --time, whole minutes): a job that "
                               "reaches it is checkpointed and requeued, and continues where it stopped")
    cpus: Optional[int] = pydantic.Field(None, ge=1, description="CPUs per job (sbatch --cpus-per-task; null: the "
                                         "profile's threads)")
    mem: Optional[str] = pydantic.Field(None, description="memory per job, e.g. 16G (sbatch --mem; null: the "
                                        "cluster's default)")
    gpus: int = pydantic.Field(0, ge=0, description="GPUs per job (sbatch --gpus-per-node)")
    sbatch: list[str] = pydantic.Field(default_factory=list, description="other sbatch options, e.g. --qos=high "
                                       "or --constraint=a100")
    signal_before: str = pydantic.Field("2m", description="how long before its time limit a job is told to write "
                                        "its checkpoint and requeue itself (sbatch --signal; SLURM looks every 30 s "
                                        "and may signal up to 30 s earlier)")
    max_requeues: int = pydantic.Field(100, ge=0, description="time limits one job may reach (each one a "
                                       "requeue) before it is reported as failed")
    poll: str = pydantic.Field("5s", description="time between two looks at the jobs (squeue) while waiting")

    @pydantic.field_validator("time", "signal_before", "poll")
    @classmethod
    def _duration(cls, value):
        _seconds(value)
        return value

    @pydantic.field_validator("mem")
    @classmethod
    def _memory(cls, value):
        import re

        if value is not None and not re.fullmatch(r"\d+(\.\d+)?[KMGT]?B?", str(value).strip(), re.IGNORECASE):
            raise ValueError(f"{value!r}: a size such as 16G, 500M or 16000 (megabytes)")
        return value

    @pydantic.field_validator("sbatch")
    @classmethod
    def _options(cls, value):
        for option in value:
            if not str(option).startswith("--") or len(str(option)) < 3:
                raise ValueError(f"{option!r}: an sbatch long option, such as --qos=high")
        return value

    @pydantic.model_validator(mode="after")
    def _signal_within_time(self):
        if _seconds(self.signal_before) >= _seconds(self.time):
            raise ValueError(f"signal_before ({self.signal_before}) must be shorter than time ({self.time})")
        return self

    def time_minutes(self) -> int:
        """The time limit in whole minutes (sbatch counts minutes), rounded up."""
        import math

        return max(1, math.ceil(_seconds(self.time) / 60))


class Profile(pydantic.BaseModel):
    """``induce/configs/<profile>/profile.yaml``: what ``induce reproduce --profile NAME`` runs."""

    model_config = pydantic.ConfigDict(extra="forbid")

    description: str = ""
    extends: Optional[str] = pydantic.Field(
        None, description="a profile this one builds on (a folder beside this one's, else a shipped name): its keys "
        "and its <model>.yaml files come first, this profile's over them"
    )
    models: list[str] = pydantic.Field(default_factory=lambda: ["prpn", "onlstm", "palm", "palm-s", "palm-rb"])
    seeds: list[int] = pydantic.Field(default_factory=lambda: [1])
    steps_per_model: Union[None, int, dict[str, int]] = pydantic.Field(
        None, description="optimiser steps per model and seed (train.max_steps), one number for all or one per model "
        "({prpn: 600, onlstm: 700, ...}; a model left out: no step budget); null: none"
    )
    time_per_model: Union[None, str, dict[str, str]] = pydantic.Field(
        None, description="training time budget per model and seed (train.time_budget, the clock: figures then "
        "depend on the machine's speed), e.g. 6m, or one per model ({prpn: 4m, onlstm: 5m, ...}; a model left out: "
        "no time budget); null: none"
    )
    jobs: int = pydantic.Field(1, ge=1, description="(model, seed) runs trained and evaluated at once, each in its "
                               "own process with `threads` threads (induce reproduce --jobs)")
    cpu_minutes: dict[str, float] = pydantic.Field(
        default_factory=dict, description="measured CPU-minutes of one run of each model (its training and "
        "evaluation, `threads` threads, an idle machine): with several jobs the costliest runs start first, and "
        "the start line estimates the whole profile's time from them; it changes no figure"
    )
    chunk: Optional[str] = pydantic.Field(
        None, description="wall-clock training time per invocation, e.g. 3h: then every run pauses at a resumable "
        "checkpoint and the same command continues (null: train to the end in one go)"
    )
    train_sentences: Optional[int] = pydantic.Field(None, ge=1, description="train on the first N training sentences")
    all_train_sentences: list[str] = pydantic.Field(
        default_factory=list, description="models trained on every training sentence instead of the first "
        "train_sentences (their configs' length cap still applies), e.g. the grammars, which need many sentences"
    )
    monitor_sentences: Optional[int] = pydantic.Field(
        None, ge=1, description="per-epoch validation on the first N dev sentences (the final evaluation uses all)"
    )
    threads: Optional[int] = pydantic.Field(None, ge=1, description="torch CPU threads (null: induce's default, 1)")
    device: str = pydantic.Field("auto", description="auto, cpu, cuda, cuda:N (training and evaluation)")
    random_init_seeds: int = pydantic.Field(5, ge=0, description="untrained models per kind (PaLM Table 4: 25)")
    random_init_sentences: Optional[int] = pydantic.Field(
        None, ge=1, description="WSJ40 dev sentences each untrained model parses (null: all)"
    )
    example_sentences: int = pydantic.Field(3, ge=0, description="dev sentences drawn in the report")
    eval_batch_size: int = pydantic.Field(64, ge=1, description="sentences per forward pass when parsing")
    overrides: list[str] = pydantic.Field(default_factory=list, description="key=value for every model's config")
    slurm: SlurmSettings = pydantic.Field(default_factory=SlurmSettings, description="what each job asks a SLURM "
                                          "cluster for (induce reproduce --executor slurm)")

    # Filled in by load_profile (not YAML keys).
    name: str = ""
    folder: Optional[Path] = None
    base_folders: list[Path] = pydantic.Field(default_factory=list)  # the folders it extends, the first base first

    def model_files(self, model: str) -> list[Path]:
        """The profile's config files of ``model`` that exist, in layer order: its bases' ``<model>.yaml`` (the
        first base first), then its own folder's."""
        folders = [*self.base_folders, *([self.folder] if self.folder is not None else [])]
        return [path for path in (folder / f"{model}.yaml" for folder in folders) if path.is_file()]

    @pydantic.field_validator("models")
    @classmethod
    def _known_models(cls, models):
        from induce.models.registry import get_model_class

        for name in models:
            try:
                cls = get_model_class(name)
            except KeyError as err:
                raise ValueError(err.args[0]) from None
            if not cls.parser_kind.parses:
                raise ValueError(f"{name!r} has no syntactic structure to evaluate (it does not parse)")
        if not models:
            raise ValueError("at least one model")
        return models

    @pydantic.field_validator("time_per_model")
    @classmethod
    def _duration(cls, value):
        if isinstance(value, dict):
            _check_model_names(value)
            for duration in value.values():
                parse_duration(duration)
        elif value is not None:
            parse_duration(value)
        return value

    @pydantic.field_validator("cpu_minutes")
    @classmethod
    def _minutes(cls, value):
        _check_model_names(value)
        if any(minutes < 0 for minutes in value.values()):
            raise ValueError("minutes must be 0 or more")
        return value

    @pydantic.field_validator("all_train_sentences")
    @classmethod
    def _all_train_models(cls, value):
        _check_model_names(dict.fromkeys(value))
        return value

    @pydantic.field_validator("steps_per_model")
    @classmethod
    def _steps(cls, value):
        values = value.values() if isinstance(value, dict) else [value]
        if isinstance(value, dict):
            _check_model_names(value)
        if any(steps is not None and steps < 1 for steps in values):
            raise ValueError("steps must be 1 or more")
        return value

    @pydantic.field_validator("chunk")
    @classmethod
    def _chunk(cls, value):
        if value is not None and parse_duration(value) <= 0:
            raise ValueError("must be positive")
        return value

    def step_budget(self, model: Optional[str] = None) -> Optional[int]:
        """Optimiser steps for ``model`` (each model's when ``steps_per_model`` is one value)."""
        value = self.steps_per_model
        if isinstance(value, dict):
            value = value.get(model) if model is not None else None
        return value

    def time_budget(self, model: Optional[str] = None) -> Optional[float]:
        """Seconds of training for ``model`` (each model's when ``time_per_model`` is one value)."""
        value = self.time_per_model
        if isinstance(value, dict):
            value = value.get(model) if model is not None else None
        return None if value is None else parse_duration(value)

    def chunk_seconds(self) -> Optional[float]:
        return None if self.chunk is None else parse_duration(self.chunk)


def _check_model_names(per_model: dict) -> None:
    from induce.models.registry import get_model_class

    for model in per_model:
        try:
            get_model_class(model)
        except KeyError as err:
            raise ValueError(err.args[0]) from None


#: What ``--profile auto`` becomes: ``gpu`` with a CUDA device, else ``cpu``.
AUTO = "auto"


def resolve_profile_name(name: Union[str, Path]) -> Union[str, Path]:
    """``auto`` -> ``gpu`` when torch sees a CUDA device, else ``cpu``; anything else unchanged.
    (``torch.cuda.is_available()`` asks the driver for a device count; it creates no CUDA context.)"""
    if str(name) != AUTO:
        return name
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def list_profiles(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Names of the shipped profiles (folders of ``induce/configs/`` with a ``profile.yaml``)."""
    return sorted(p.parent.name for p in Path(config_dir).glob(f"*/{PROFILE_FILE}"))


def _profile_folder(name_or_path: Union[str, Path], config_dir: Path, beside: Optional[Path] = None) -> Path:
    path = Path(name_or_path)
    candidates = [path] if path.is_absolute() else [*([beside / path] if beside is not None else []), path]
    for folder in candidates:
        if (folder / PROFILE_FILE).is_file():
            return folder
    folder = Path(config_dir) / str(name_or_path)
    if not (folder / PROFILE_FILE).is_file():
        known = ", ".join(list_profiles(config_dir)) or "(none)"
        raise InduceError(f"unknown profile {str(name_or_path)!r}: no {PROFILE_FILE} in {config_source(folder)}; "
                          f"profiles: {known}")
    return folder


def _read_layers(folder: Path, config_dir: Path, seen: tuple = ()) -> tuple[dict, list[Path]]:
    """``folder``'s ``profile.yaml`` over those it extends (merged), and the folders it extends, the first base
    first."""
    if folder.resolve() in seen:
        chain = " -> ".join(config_source(f) for f in (*seen, folder.resolve()))
        raise InduceError(f"{config_source(folder / PROFILE_FILE)}: extends itself ({chain})")
    raw = read_yaml(folder / PROFILE_FILE)
    base_name = raw.get("extends") if isinstance(raw, dict) else None
    if base_name is None:
        return raw, []
    try:
        base = _profile_folder(base_name, config_dir, beside=folder.parent)
    except InduceError as err:
        raise InduceError(f"{config_source(folder / PROFILE_FILE)}: extends: {err}") from None
    base_raw, base_bases = _read_layers(base, config_dir, (*seen, folder.resolve()))
    return deep_merge(base_raw, raw), [*base_bases, base]  # this file's `extends` replaces the base's


def load_profile(name_or_path: Union[str, Path], config_dir: Path = CONFIG_DIR) -> Profile:
    """A profile by name (``induce/configs/<name>/``) or by folder path, with the profiles it extends."""
    folder = _profile_folder(name_or_path, config_dir)
    raw, bases = _read_layers(folder, config_dir)
    try:
        profile = Profile(**raw)
    except pydantic.ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(profile)'}: "
                             f"{'unknown key' if e['type'] == 'extra_forbidden' else e['msg']}" for e in err.errors())
        raise InduceError(f"{config_source(folder / PROFILE_FILE)}: {problems}") from None
    profile.name = folder.name
    profile.folder = folder
    profile.base_folders = bases
    return profile


def profile_layers(profile: Profile, model: str) -> list[Layer]:
    """The layers ``profile`` puts over ``model``'s shipped config: its ``<model>.yaml`` files (those of the profiles
    it extends first, then its own: :meth:`Profile.model_files`), then its ``overrides`` (named by the
    ``profile.yaml`` that gives them)."""
    layers = [Layer("file", config_source(path), read_yaml(path)) for path in profile.model_files(model)]
    if profile.overrides:
        layers.append(Layer("overrides", _overrides_source(profile), list(profile.overrides)))
    return layers


def _overrides_source(profile: Profile) -> str:
    """How the profile's ``overrides`` are named: by the ``profile.yaml`` that gives them (its own, else the nearest
    base's that has some)."""
    folders = [*([profile.folder] if profile.folder is not None else []), *reversed(profile.base_folders)]
    for folder in folders:
        raw = read_yaml(folder / PROFILE_FILE)
        if isinstance(raw, dict) and "overrides" in raw:
            return f"{config_source(folder / PROFILE_FILE)} overrides:"
    return f"profile {profile.name or '(unnamed)'} overrides:"


def run_values_layers(profile: Profile, model: str) -> list[Layer]:
    """The values each run of ``model`` gets from ``profile`` itself, one layer each, named by the profile's key:
    the first of its ``seeds``, its ``device``, its ``threads``, its ``steps_per_model`` / ``time_per_model`` for
    the model, as ``induce reproduce`` gives them without options of its own (``data.corpus``, the pipeline's
    prepared folder, is not among them)."""
    from induce.config import DEFAULT_THREADS

    name = f"profile {profile.name or '(unnamed)'}"
    values = [("seeds", "train.seed", profile.seeds[0] if profile.seeds else None),
              ("device", "train.device", profile.device),
              ("threads", "train.threads", profile.threads or DEFAULT_THREADS),
              ("steps_per_model", "train.max_steps", profile.step_budget(model)),
              ("time_per_model", "train.time_budget", profile.time_budget(model))]
    return [Layer("values", f"{name}: {setting}", {key: value}) for setting, key, value in values if value is not None]


#: How the values a program gives :func:`build_run_config` (the reproduction's corpus, seed, budgets) are named.
PROGRAM_VALUES = "induce reproduce"


def build_run_config(profile: Profile, model: str, overrides: list[str],
                     values: Optional[dict[str, Any]] = None) -> RunConfig:
    """:func:`induce.config.layer_config` of ``<model>.yaml`` (shipped: an error when missing) < the profile's
    layers (:func:`profile_layers`: its ``<model>.yaml`` files, then ``profile.overrides``) < ``overrides``
    (``key=value`` text) < ``values`` (``{"data.corpus": path}``: typed, never re-read as YAML, so that a folder
    named ``2024`` or ``runs #1`` stays that folder); the model section resolved by the model's ``Config``."""
    from induce.models.configs import resolve_config

    layers = [*shipped_layers(model), *profile_layers(profile, model),
              Layer("model", f"profile {profile.name or '(unnamed)'}: {model}", model),
              Layer("overrides", OVERRIDE, list(overrides)), Layer("values", PROGRAM_VALUES, dict(values or {}))]
    return resolve_config(layer_config(layers))
