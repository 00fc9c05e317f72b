"""One typed run configuration: YAML files + ``key=value`` overrides -> :class:`RunConfig`.

Layers, later ones win, all applied by one function, :func:`layer_config` (a list of :class:`Layer`), which
records for every key the layer that set it (:class:`Origins`; ``induce config`` prints them):

1. the typed defaults: the fields of the pydantic classes below, the one place they are written (no shipped file
   restates them);
2. ``induce/models/<family>/<model>.yaml`` (the paper's hyper-parameters of that model, in its family's folder:
   :func:`model_layer`);
3. with a profile (``induce reproduce``, ``induce config --profile``): the profile's ``<model>.yaml`` files (those
   of the profiles it extends first), then its ``overrides`` (:mod:`induce.reproduce.profiles`);
4. ``--config FILE``, a user's file: only the keys it sets change (a file of sizes keeps the model's
   optimiser);
5. ``--model NAME``, which the layers before must not contradict and those after must not change;
6. ``key=value`` overrides with dotted keys (``model.hidden_size=200 optim.lr=0.003``); values
   are read as YAML scalars (``0.003`` is a float, ``true`` a bool, ``null`` None, ``[0, 0.999]`` a list);
7. the flags of the command that set keys (``--seed 5``: ``train.seed``), which must agree with an override
   of the same key (the reproduction's own values, its corpus, seed and budgets, take this place unchecked).

What a run fills in from the machine and the data when it starts (a ``null`` that means automatic: the threads,
the default corpus, the BPTT bucket) is resolved by :func:`induce.training.setup.fill_in_runtime` and recorded in
the run's ``config.yaml``, not here.

Every file and override is read by :class:`ConfigLoader`: numbers in decimal as written (``010`` is 10,
``1e-3`` a float), none of YAML 1.1's octal, base 60 or ``yes`` / ``on`` booleans; ``config.yaml`` is written
by :class:`ConfigDumper`, which reads back identically.

The shipped configs (layer 2, and the profiles of ``induce reproduce``) live inside the package
and are read with :mod:`importlib.resources`, so an editable install, ``pip install .`` and a wheel
read the same files. A shipped file that is missing is an error, never a silent fall back to layer 1.
A model from a plugin (``INDUCE_PLUGINS``) has no shipped config: layer 2 is empty for it.

Every key remembers where its value came from (:class:`Origins`: a file, ``--model``, or an
override), and a validation error names that source, not the whole stack of layers.

The ``model`` section stays the mapping it was given: this module sits below the models and does not know
their fields. Where a model is chosen (the trainer, loading a run, a ``reproduce`` profile),
:func:`induce.models.configs.resolve_config` validates it with the model's own ``Config`` class and stores it
resolved (every field, defaults filled in), so that ``config.yaml`` in a run folder says exactly what ran.
Every validation error names the dotted key it is about.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Union

import pydantic
import yaml

from induce.errors import InduceError, InputError
from induce.files import write_output

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

#: The shipped configs: the package's ``configs/`` folder, found with importlib.resources (which also
#: finds it in an installed wheel).
SHIPPED_CONFIGS: Traversable = resources.files("induce") / "configs"
#: The same folder as a path, for the code that lists or copies it (induce is always installed as
#: files on disk, never run from a zip archive).
CONFIG_DIR = Path(str(SHIPPED_CONFIGS))
#: How messages name a shipped config file (``induce/configs/prpn.yaml``), wherever it is installed.
SHIPPED_PREFIX = "induce/configs/"
SECTIONS = ("model_name", "model", "data", "optim", "train")


class ConfigError(InduceError):
    """A config file or override is invalid; the message names the key."""


#: torch CPU threads of every command when none is given (``--threads``, ``train.threads``, a profile's
#: ``threads``): one. Measured on a 2-core machine shared with other work, one thread trained and evaluated
#: faster than two and than torch's default (bench/results/training.md, "Threads").
DEFAULT_THREADS = 1
DEFAULT_THREADS_TEXT = f"induce's default, {DEFAULT_THREADS} (measured: bench/results/training.md)"


def use_threads(threads: Optional[int] = None) -> int:
    """Set torch's CPU threads (intra-op) to ``threads``, or :data:`DEFAULT_THREADS` when None; returns the
    count now in force. Process-wide: a command sets it once, before its work, and with it the allocator's
    settings for that work (:func:`keep_freed_memory`)."""
    import torch

    count = DEFAULT_THREADS if threads is None else int(threads)
    if count < 1:
        raise ConfigError(f"--threads {threads}: give 1 or more")
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    keep_freed_memory()
    return count


#: glibc's ``mallopt`` parameters (``malloc.h``) and the values :func:`keep_freed_memory` gives them: blocks
#: up to 32 MiB (the largest mmap threshold glibc accepts on 64-bit) come from the heap, and up to 1 GiB of
#: freed memory at the heap's top stays with the process.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES = 32 * 2**20, 2**30
_freed_memory_kept = False


def keep_freed_memory() -> bool:
    """Keep the memory of freed CPU tensors in the process for the next ones (glibc only; ``False`` elsewhere,
    where nothing is changed). By default glibc maps large blocks for each tensor and unmaps them when freed,
    and gives a freed heap top back to the system past a threshold that adapts to the largest block freed; a
    training step that allocates and frees many tensors of a few MiB (a C-PCFG's per-sentence rule and
    emission tensors) then has the kernel zero and fault in the same pages again at every step. Measured at
    the cpu profile's C-PCFG, 150 steps on one thread: 1.55 M minor page faults and 3.8 s of system time
    against 0.31 M and 1.3 s with these settings, user time equal, every weight equal bit for bit (allocation
    does not change arithmetic; torch aligns its CPU tensors itself). The cost: memory freed by a command is
    held until it ends. Idempotent."""
    global _freed_memory_kept
    if _freed_memory_kept:
        return True
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _freed_memory_kept = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return _freed_memory_kept


#: The largest float32: the trainer computes in float32, and torch refuses a Python float beyond it
#: (an lr of 1e300 ended in "value cannot be converted to type float without overflow").
FLOAT32_MAX = 3.4028234663852886e38


class _Section(pydantic.BaseModel):
    # allow_inf_nan=False: every float must be a finite number (nan failed "greater than 0" with a
    # misleading message, and lr=inf trained forever on nan losses).
    model_config = pydantic.ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @pydantic.field_validator("*")
    @classmethod
    def _within_float32(cls, value):
        numbers = value if isinstance(value, tuple) else (value,)
        if any(isinstance(x, float) and abs(x) > FLOAT32_MAX for x in numbers):
            raise ValueError(f"{value} is beyond float32's range (at most about 3.4e38 in size), which training "
                             "computes in")
        return value


class DataConfig(_Section):
    """Corpus and batching (AWD-LSTM conventions; for a sentence-level objective ``batch_size`` and
    ``eval_batch_size`` count sentences, and the length cap and curriculum apply)."""

    corpus: Optional[str] = pydantic.Field(
        None, description="prepared corpus folder (or a name under corpora/); None = the default corpus"
    )
    batch_size: int = pydantic.Field(20, gt=0, description="parallel streams of the training text (global)")
    eval_batch_size: int = pydantic.Field(10, gt=0, description="streams of the validation text")
    bptt: int = pydantic.Field(70, gt=1, description="mean BPTT segment length")
    variable_bptt: bool = pydantic.Field(True, description="AWD-LSTM random segment lengths (and lr rescaling)")
    bptt_std: float = pydantic.Field(5.0, ge=0, description="std of the random segment length")
    min_bptt: int = pydantic.Field(5, ge=1, description="shortest random segment")
    max_bptt_extra: int = pydantic.Field(20, ge=0, description="segments are at most bptt + this long")
    bptt_bucket: Optional[int] = pydantic.Field(
        None, ge=0, description="round random segment lengths to multiples of this (0: off); null: automatic, "
        "i.e. with CUDA graphs on (train.cuda_graphs) the largest divisor of bptt not above 1.5 x bptt_std, else off; "
        "a run's config.yaml stores the value used"
    )
    # Sentence-level objectives (induce.training.objectives.SentenceLevel); the streams ignore them.
    max_length: Optional[int] = pydantic.Field(
        None, ge=1, description="sentence-level training: the longest sentence trained on (null: no cap)"
    )
    curriculum_start: Optional[int] = pydantic.Field(
        None, ge=1, description="sentence-level training: epoch 1's longest sentence, growing by curriculum_step "
        "words each epoch up to max_length (null: no curriculum)"
    )
    curriculum_step: int = pydantic.Field(1, ge=0, description="sentence-level training: words added to the "
                                          "length cap each epoch")


class OptimConfig(_Section):
    """Optimiser and schedule.

    * AWD-LSTM / ON-LSTM: ``optimizer: sgd, asgd: nonmono`` — SGD, switched to averaged SGD when the
      validation loss has not improved on the best of all but the last ``nonmono`` evaluations.
    * PaLM: ``optimizer: adam, asgd: epoch, asgd_after_epochs: N`` — Adam for N epochs, then ASGD.
    * PRPN: ``optimizer: adam, asgd: never, plateau_factor: 0.5`` — Adam, lr halved on plateaus.
    * PaLM as released: ``optimizer: sgd, lr: 30, asgd: nonmono, nonmono: 15, scorer_optimizer: adam``
      — the span scorer in its own Adam (``scorer_lr``, ``scorer_clip``) until the ASGD switch.
    """

    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = pydantic.Field(30.0, gt=0)
    asgd: Literal["nonmono", "epoch", "never"] = "nonmono"
    asgd_lr: Optional[float] = pydantic.Field(None, gt=0, description="lr of ASGD (default: lr)")
    asgd_after_epochs: int = pydantic.Field(0, ge=0, description="asgd=epoch: switch after this many epochs")
    asgd_restart_epoch: Optional[int] = pydantic.Field(
        None, ge=1, description="ON-LSTM's finetuning: a fresh ASGD at this epoch if ASGD runs (None: off)"
    )
    nonmono: int = pydantic.Field(5, ge=1, description="non-monotone trigger window (evaluations)")
    wdecay: float = pydantic.Field(1.2e-6, ge=0, description="L2 weight decay")
    clip: Optional[float] = pydantic.Field(0.25, gt=0, description="gradient norm clipping (None: off)")
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = pydantic.Field(1e-8, gt=0)
    plateau_factor: Optional[float] = pydantic.Field(
        None, gt=0, lt=1, description="multiply lr by this when valid loss plateaus (None: off)"
    )
    plateau_patience: int = pydantic.Field(2, ge=0)
    # PaLM's released main.py: the span scorer has its own Adam until the ASGD switch. The trainer does not read
    # these keys: PaLM's param_groups hook does (induce.models.palm.model.PaLMBase.param_groups), and the config
    # check refuses scorer_optimizer=adam for a model without a span scorer (LanguageModel.has_span_scorer).
    scorer_optimizer: Literal["shared", "adam"] = pydantic.Field(
        "shared", description="shared: one optimiser for all parameters; adam: PaLM's span scorer in its own Adam"
    )
    scorer_lr: float = pydantic.Field(1e-3, gt=0, description="scorer_optimizer=adam: the scorer's Adam lr")
    scorer_clip: Optional[float] = pydantic.Field(
        1.0, gt=0, description="scorer_optimizer=adam: the scorer's own gradient clipping (None: off)"
    )


class TrainConfig(_Section):
    """Loop, regularisation, selection and stopping."""

    epochs: int = pydantic.Field(1000, ge=1)
    seed: int = 1111
    alpha: float = pydantic.Field(2.0, ge=0, description="AR: alpha * mean(dropped last-layer output^2)")
    beta: float = pydantic.Field(1.0, ge=0, description="TAR: beta * mean((h_t - h_{t-1})^2) of raw output")
    log_interval: int = pydantic.Field(200, ge=1, description="batches between progress logs (and syncs)")
    patience: Optional[int] = pydantic.Field(None, ge=1, description="early stopping: epochs without improvement")
    select_by: Literal["valid_ppl", "dev_f1"] = "valid_ppl"
    max_steps: Optional[int] = pydantic.Field(
        None, ge=1, description="optimiser steps of the whole run (across epochs): the run stops after the step that "
        "reaches it (null: no step budget); does not depend on the machine's speed"
    )
    max_tokens: Optional[int] = pydantic.Field(
        None, ge=1, description="training tokens of the whole run (across epochs, all processes): the run stops after "
        "the step that reaches it (null: no token budget); does not depend on the machine's speed"
    )
    time_budget: Optional[float] = pydantic.Field(
        None, gt=0, description="seconds of this invocation (training and evaluation), checked between steps, "
        "then stop; the figures then depend on the machine's speed and load (the run's status says so)"
    )
    eval_every: Optional[int] = pydantic.Field(
        None, ge=1, description="also evaluate (validation loss, dev F1) every N optimiser steps of the run, for "
        "learning curves; such a mid-epoch evaluation may become best (null: at epoch ends only)"
    )
    threads: Optional[int] = pydantic.Field(
        None, ge=1, description=f"torch CPU threads (null: {DEFAULT_THREADS_TEXT})"
    )
    checkpoint_every: Optional[int] = pydantic.Field(
        None, ge=1, description="also write the resumable checkpoint every N batches (mid-epoch)"
    )
    dev_f1: bool = pydantic.Field(True, description="parse the dev trees each epoch when the corpus has them")
    dev_f1_max_sentences: int = pydantic.Field(500, ge=1, description="dev sentences parsed per epoch (<= 40 words)")
    device: str = pydantic.Field("auto", description="auto, cpu, cuda, cuda:N")
    kernels: str = pydantic.Field("auto", description="kernel backend: auto, reference, torch, triton")
    amp: bool = pydantic.Field(
        False, description="bfloat16 autocast of the forward pass: on CUDA, and on a CPU with a bf16 matrix unit "
        "(AMX, AVX512-BF16, Arm BF16; float32 elsewhere, saying why); weights, optimiser state and losses stay float32")
    cuda_graphs: Literal["auto", True, False] = pydantic.Field(
        "auto", description="capture the training step (one graph per segment length) in CUDA graphs: auto (on "
        "where it can be captured: CUDA, one process; brings data.bptt_bucket with it), true (the static-buffer "
        "step everywhere: eager off CUDA), false (off); induce.training.graphs"
    )
    tensorboard: bool = pydantic.Field(
        False, description="write TensorBoard event files into RUN/tensorboard/ (needs the tensorboard package: "
        "pip install 'induce[tensorboard]'; induce.training.tensorboard)"
    )


class RunConfig(_Section):
    """Everything a training run needs. ``model`` holds the fields of ``model_name``'s ``Config``: as given
    until :func:`induce.models.configs.resolve_config` validates and completes it."""

    model_name: str
    model: dict[str, Any] = pydantic.Field(default_factory=dict)
    data: DataConfig = pydantic.Field(default_factory=DataConfig)
    optim: OptimConfig = pydantic.Field(default_factory=OptimConfig)
    train: TrainConfig = pydantic.Field(default_factory=TrainConfig)
    #: Where each value came from (:class:`Origins`), for the errors of later checks; not part of the value.
    _origins: Optional[Origins] = pydantic.PrivateAttr(None)

    @property
    def origins(self) -> Origins:
        """Where each value came from (a file, a flag, an override): what later checks name in their errors."""
        return self._origins if self._origins is not None else Origins()

    def __eq__(self, other: object) -> bool:
        # Equal values are equal configs, wherever they came from.
        if not isinstance(other, RunConfig):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


# ----------------------------------------------------------------------------------------------- loading


class Origins:
    """Where each value of a raw config came from: a file, a flag (``--model``) or an override.

    Keys are dotted (``optim.lr``); :meth:`of` answers for a key with the entry of the key itself
    or of its nearest section, or, for a section, the sources of the keys inside it, so that an
    error names the source the user has to fix.
    """

    def __init__(self, default: str = "config"):
        self.default = default
        self._by_key: dict[str, str] = {}

    def record(self, key: str, source: str) -> None:
        """``key`` (and everything under it) now comes from ``source``; the keys stay in the order they were last
        set (what :meth:`keys_from` lists)."""
        for known in [k for k in self._by_key if k == key or k.startswith(key + ".")]:
            del self._by_key[known]
        self._by_key[key] = source

    def record_mapping(self, mapping: dict, source: str, prefix: str = "") -> None:
        """Every leaf of ``mapping`` comes from ``source``."""
        for key, value in mapping.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value:
                self.record_mapping(value, source, dotted)
            else:
                self.record(dotted, source)

    def exact(self, key: str) -> Optional[str]:
        """The source that set ``key`` itself or its nearest enclosing section; None where no layer set it (the
        typed default)."""
        parts = key.split(".")
        for end in range(len(parts), 0, -1):
            found = self._by_key.get(".".join(parts[:end]))
            if found is not None:
                return found
        return None

    def keys_from(self, source: str) -> list[str]:
        """The dotted keys whose value ``source`` set (and no later layer replaced), in the order it set them."""
        return [key for key, found in self._by_key.items() if found == source]

    def of(self, key: str) -> str:
        parts = key.split(".") if key else []
        for end in range(len(parts), 0, -1):
            found = self._by_key.get(".".join(parts[:end]))
            if found is not None:
                return found
        inside = list(dict.fromkeys(v for k, v in self._by_key.items() if not key or k.startswith(key + ".")))
        return " + ".join(inside) if inside else self.default


def _non_finite_text(value: Any) -> str:
    """``nan`` is "not a number", ``inf`` "infinite" (pydantic says "should be a finite number" for both)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"{value!r} is not a finite number"
    return f"{value} is not a number" if math.isnan(number) else f"{value} is infinite"


def format_validation_error(err: pydantic.ValidationError, prefix: str = "",
                            origins: Optional[Origins] = None) -> str:
    """``source: key: message`` per error (``source`` only when ``origins`` is given), joined by ``; ``."""
    lines = []
    for item in err.errors():
        key = ".".join(str(part) for part in item["loc"])
        key = f"{prefix}.{key}" if prefix and key else (prefix or key or "(config)")
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif item["type"] == "finite_number":
            message = f"{_non_finite_text(item.get('input'))}; give a finite number"
        elif item["type"] == "int_parsing" and isinstance(item.get("input"), str):
            # YAML 1.1's 0x10, 0o10, 1:20 are read as the strings written (ConfigLoader): say how to write one
            message = f"{item['input']!r} is not a whole number written in decimal digits"
        elif item["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        where = f"{origins.of(key if key != '(config)' else '')}: " if origins is not None else ""
        lines.append(f"{where}{key}: {message}")
    return "; ".join(lines)


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's core schema of plain scalars, the reader of every config file,
    profile, run folder's ``config.yaml`` and ``key=value`` override.

    PyYAML resolves plain scalars by YAML 1.1, whose surprises a researcher never means: ``010`` is 8 (octal),
    ``1:20`` is 80 (base 60), ``yes`` / ``no`` / ``on`` / ``off`` are booleans, ``2024-01-01`` is a date, and
    ``1e-3`` (no dot) is a string. Here only these plain scalars are more than strings: ``true`` / ``false``
    (any case form YAML 1.2 allows), ``null`` / ``~`` / empty, a decimal integer (``[-+]?[0-9]+``, read in base
    10 whatever its leading zeros: ``010`` is 10) and a decimal float (``1.5``, ``1e-3``, ``.5``, ``.inf``,
    ``.nan``). Everything else (``0x10``, ``0o10``, ``1_000``, ``1:20``, ``yes``) stays the string written,
    for the typed schema to judge: an int key refuses ``0x10`` naming the key, a bool key takes ``yes`` as true
    (pydantic's reading of booleans), a string key keeps ``on`` as ``on``. Explicit tags (``!!int``) are kept.
    """


#: The plain scalars :class:`ConfigLoader` reads as more than strings (YAML 1.2's core schema, decimal only).
_DECIMAL_INT = re.compile(r"[-+]?[0-9]+\Z")
_CORE_SCALARS = (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", r"^[-+]?[0-9]+$", "-+0123456789"),
    ("tag:yaml.org,2002:float",
     r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
     "-+.0123456789"),
)
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag == "tag:yaml.org,2002:merge"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _tag, _pattern, _first in _CORE_SCALARS:
    ConfigLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def _construct_int(loader: ConfigLoader, node: yaml.ScalarNode) -> int:
    """A decimal integer in base 10 (``010`` is 10); other forms only under an explicit ``!!int`` tag."""
    value = loader.construct_scalar(node)
    if _DECIMAL_INT.match(value):
        return int(value, 10)
    return loader.construct_yaml_int(node)


ConfigLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


class ConfigDumper(yaml.SafeDumper):
    """PyYAML's safe dumper that quotes every string either YAML 1.1 or :class:`ConfigLoader` would read as
    something else (``'yes'``, ``'010'``, ``'1e3'``), so that what it writes reads back identically with
    :class:`ConfigLoader` and the same with a plain ``yaml.safe_load``."""


for _tag, _pattern, _first in _CORE_SCALARS:
    ConfigDumper.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def load_yaml(text: str) -> Any:
    """The value of the YAML document ``text``, read with :class:`ConfigLoader` (raises ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 -- ConfigLoader is a SafeLoader


def dump_yaml(data: Any) -> str:
    """``data`` as block-style YAML in its own key order, written with :class:`ConfigDumper`."""
    return yaml.dump(data, Dumper=ConfigDumper, sort_keys=False, default_flow_style=False, allow_unicode=False)


def read_yaml(path: Union[str, Path]) -> dict:
    """A YAML mapping from ``path`` (empty file -> ``{}``); syntax errors name file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such config file", path)
    return _parse_yaml(path, path)


def read_shipped(name: str) -> dict:
    """The shipped config ``name`` (``prpn.yaml``, ``toy/prpn.yaml``) as a mapping, read
    with importlib.resources; a :class:`ConfigError` when this installation lacks it."""
    resource = shipped_config(name)
    if resource is None:
        raise ConfigError(f"{SHIPPED_PREFIX}{name}: this shipped config is missing from the installed induce "
                          "package (an incomplete install); reinstall induce (pip install .)")
    return _parse_yaml(resource, SHIPPED_PREFIX + name)


def shipped_config(name: str) -> Optional[Traversable]:
    """The shipped config file ``name`` (a ``/``-separated name under ``induce/configs/``), None if absent."""
    resource = SHIPPED_CONFIGS
    for part in name.split("/"):
        resource = resource / part
    return resource if resource.is_file() else None


def config_source(path: Union[str, Path]) -> str:
    """How messages and reports name a config file or folder: ``induce/configs/...`` for a shipped one
    (the same text in every installation), else the path as given."""
    try:
        inside = Path(path).resolve().relative_to(CONFIG_DIR.resolve())
    except (OSError, ValueError):
        return str(path)
    text = inside.as_posix()
    return SHIPPED_PREFIX.rstrip("/") if text == "." else SHIPPED_PREFIX + text


def _parse_yaml(source: Union[Path, Traversable], path: Union[str, Path]) -> dict:
    """The YAML mapping in ``source`` (a file or a packaged resource); errors name ``path`` and the line."""
    try:
        data = load_yaml(source.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", path) from None
    except yaml.MarkedYAMLError as err:
        line = err.problem_mark.line + 1 if err.problem_mark is not None else None
        raise InputError(f"invalid YAML: {err.problem}", path, line) from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise InputError(f"invalid YAML: {err}", path) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"a config must be a mapping of sections, not {type(data).__name__}", path)
    return data


def deep_merge(base: dict, update: dict) -> dict:
    """``base`` updated by ``update``, recursively for nested mappings (inputs are not modified)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


#: The keys whose ``null`` a run fills in when it starts, from the machine and the data
#: (:func:`induce.training.setup.fill_in_runtime`), recording the value in its ``config.yaml``.
FILLED_IN_BY_THE_RUN = ("train.threads", "data.corpus", "data.bptt_bucket")


#: How a user's ``key=value`` override is named in errors and by ``induce config`` (``override optim.lr=0.1``);
#: a flag must agree with an override of the same key named so (:func:`apply_flags`).
OVERRIDE = "override"


#: The command-line flags of ``induce train`` that set config keys (named in errors about them).
FLAG_OF_KEY = {
    "train.seed": "--seed", "train.device": "--device", "train.kernels": "--kernels", "train.epochs": "--max-epochs",
    "train.time_budget": "--time-budget", "data.corpus": "--corpus", "train.tensorboard": "--tensorboard",
    "train.max_steps": "--max-steps", "train.max_tokens": "--max-tokens", "train.threads": "--threads",
}


def apply_overrides(raw: dict, overrides: list[str], origins: Optional[Origins] = None, label: str = OVERRIDE) -> dict:
    """Apply ``key=value`` strings (dotted keys, values read by :func:`load_yaml`) to a raw config mapping;
    returns a new mapping. ``origins`` records each key as coming from ``<label> key=value`` (``override
    optim.lr=0.1``; a profile's overrides are labelled with its file)."""
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value (e.g. optim.lr=0.003)")
        try:
            value = load_yaml(text) if text.strip() else None
        except yaml.YAMLError:
            value = text  # not YAML: keep the string, validation will say whether it fits
        _set_key(out, key, value, f"{label} {item}")
        if origins is not None:
            origins.record(key, f"{label} {item}")
    return out


def _set_key(raw: dict, key: str, value: Any, source: str) -> None:
    """Set the dotted ``key`` of ``raw`` to ``value`` in place; errors name ``source`` (an override, a flag)."""
    parts = key.split(".")
    if parts[0] not in SECTIONS:
        raise ConfigError(f"{source}: {key}: unknown section {parts[0]!r}; sections are {', '.join(SECTIONS)}")
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: {key}: {'.'.join(parts[: depth + 1])} is not a section")
        node = child
    node[parts[-1]] = value


_MISSING = object()


def _get_key(raw: dict, key: str) -> Any:
    """The value at the dotted ``key`` of ``raw``, :data:`_MISSING` where there is none."""
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def apply_flags(raw: dict, flags: dict[str, Any], origins: Optional[Origins] = None,
                source: Optional[str] = None) -> dict:
    """Apply the values a command's flags set (``{"train.seed": 5}``, typed by the command line, never
    re-read as YAML: ``--corpus 2024`` is the folder ``2024``) to a raw config mapping; returns a new mapping.
    A flag and a ``key=value`` override of the same key (in ``origins``) that give different values are
    refused, naming both (``--max-steps 3`` with ``train.max_steps=7``); equal values are fine. With ``source``
    the values are a program's, not flags: each is recorded as ``source`` and none is checked."""
    out = copy.deepcopy(raw)
    program = source
    for key, value in flags.items():
        flag = FLAG_OF_KEY.get(key, "a command-line option")
        source = program or (flag if value is True else f"{flag} {value}")  # an on/off flag (--tensorboard): its name
        if origins is not None and program is None:
            given = origins.of(key)
            current = _get_key(out, key)
            if given.startswith(OVERRIDE + " ") and current is not _MISSING and not _same_value(key, current, value):
                raise ConfigError(f"{source} and {given.removeprefix(OVERRIDE + ' ')} disagree: give the value once "
                                  "(the flag or the override)")
        _set_key(out, key, value, source)
        if origins is not None:
            origins.record(key, source)
    return out


def _same_value(key: str, a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are one value of the dotted ``key``: equal as given (a bool never equal to a
    number, though ``True == 1`` in Python), or equal once the key's field has read them (``yes`` and ``True``
    for a bool key)."""
    if a == b and isinstance(a, bool) == isinstance(b, bool):
        return True
    section, _, field = key.partition(".")
    cls = {"data": DataConfig, "optim": OptimConfig, "train": TrainConfig}.get(section)
    if cls is None or field not in cls.model_fields:
        return False
    try:
        return getattr(cls(**{field: a}), field) == getattr(cls(**{field: b}), field)
    except pydantic.ValidationError:
        return False


def validate_config(raw: dict, source: str = "config", origins: Optional[Origins] = None) -> RunConfig:
    """A :class:`RunConfig` from a raw mapping; errors name the dotted key and where its value came
    from: ``origins`` (per key: file, flag or override) when given, else ``source``."""
    origins = origins or Origins(source)
    unknown = [key for key in raw if key not in SECTIONS]
    if unknown:
        raise ConfigError(f"{origins.of(unknown[0])}: {unknown[0]}: unknown section; "
                          f"sections are {', '.join(SECTIONS)}")
    model = raw.get("model")
    if model is not None and not isinstance(model, dict):
        raise ConfigError(f"{origins.of('model')}: model: must be a mapping of the model's fields")
    try:
        config = RunConfig(**raw)
    except pydantic.ValidationError as err:
        raise ConfigError(format_validation_error(err, "", origins)) from None
    config._origins = origins
    return config


#: The folder of the model families (``induce/models/``): each family's folder ``induce/models/<family>/`` holds
#: the base config ``<model>.yaml`` of each of its models beside its code. This module, below the models, finds
#: those files as files (:func:`family_roots`), without importing a model.
MODELS_DIR = CONFIG_DIR.parent / "models"
#: How messages name a family's config (``induce/models/prpn/prpn.yaml``), wherever it is installed.
MODELS_PREFIX = "induce/models/"


def family_roots() -> list[Path]:
    """The folders whose subfolders are model families, the package's own first: :data:`MODELS_DIR`, then
    ``induce/models/`` under each ``sys.path`` entry (as ``induce.models`` extends its path over them, so a family
    folder there is found by the registry and its configs here)."""
    import sys

    roots, seen = [], set()
    for root in [MODELS_DIR, *(Path(entry or ".") / "induce" / "models" for entry in sys.path)]:
        try:
            key = root.resolve()
        except OSError:
            continue
        if key not in seen and root.is_dir():
            seen.add(key)
            roots.append(root)
    return roots


def model_config_path(model_name: str) -> Optional[Path]:
    """The base config ``<model_name>.yaml`` in its family's folder (``induce/models/<family>/``, the first of
    :func:`family_roots` that holds one, families in name order); None when no family ships one (a plugin's
    model, an unknown name)."""
    name = f"{model_name}.yaml"
    for root in family_roots():
        for family in sorted(root.iterdir()):
            if (family / "__init__.py").is_file() and (family / name).is_file():
                return family / name
    return None


def model_layer(model_name: str) -> tuple[dict, Optional[str]]:
    """``(mapping, source)`` of ``model_name``'s base config (:func:`model_config_path`), the source named
    ``induce/models/<family>/<model>.yaml`` in every installation; ``({}, None)`` for a model without one (a
    plugin's model, or an unknown name, which validation names). A family's model whose file is missing (an
    incomplete install) is refused where the model is chosen (:func:`induce.models.configs.resolve_config`),
    never trained with its class defaults in silence."""
    path = model_config_path(model_name)
    if path is None:
        return {}, None
    source = f"{MODELS_PREFIX}{path.parent.name}/{path.name}"
    return _parse_yaml(path, source), source


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer of a run config; :func:`layer_config` applies a list of them in order, later ones winning.

    * ``file``: ``values`` is a mapping read from a YAML file, every leaf of which is set; ``source`` names the
      file (``induce/models/palm/palm.yaml``, a user's path).
    * ``model``: ``values`` is the name of the model a command chose, ``source`` how (``--model palm``): the layers
      before it must name no other model, those after it must not change it.
    * ``overrides``: ``values`` are ``key=value`` strings, each recorded as ``<source> key=value``; ``source``
      :data:`OVERRIDE` for a user's (a flag of the same key must then agree), a profile's file for its own.
    * ``flags``: ``values`` is ``{dotted key: typed value}`` of a command's flags, each named by its flag
      (:data:`FLAG_OF_KEY`) and refused where a user's override of the key says otherwise.
    * ``values``: ``{dotted key: typed value}`` a program sets (the reproduction's corpus, seed and budgets),
      recorded as ``source``, with no agreement check.
    """

    kind: Literal["file", "model", "overrides", "flags", "values"]
    source: str
    values: Any


def layer_config(layers: Sequence[Layer]) -> RunConfig:
    """The :class:`RunConfig` of ``layers`` applied in order over the typed defaults (the fields of the classes
    above, which no layer restates), with its :class:`Origins`: for every key the layer that set it last. The one
    layering of ``induce train``, ``induce config``, the profiles of ``induce reproduce`` and the CPU-sized command
    of a large run's note; errors name the key and the layer its value came from."""
    raw: dict = {}
    origins = Origins()
    chosen: Optional[Layer] = None
    for layer in layers:
        if layer.kind == "file":
            raw = deep_merge(raw, layer.values)
            origins.record_mapping(layer.values, layer.source)
        elif layer.kind == "model":
            given = raw.get("model_name", layer.values)
            if given != layer.values:
                raise ConfigError(f"{origins.of('model_name')}: model_name is {given!r}, expected "
                                  f"{layer.values!r} ({layer.source})")
            raw["model_name"], chosen = layer.values, layer
            origins.record("model_name", layer.source)
        elif layer.kind == "overrides":
            raw = apply_overrides(raw, list(layer.values), origins, label=layer.source)
        elif layer.kind == "flags":
            raw = apply_flags(raw, dict(layer.values), origins)
        else:
            raw = apply_flags(raw, dict(layer.values), origins, source=layer.source)
        if chosen is not None and raw.get("model_name") != chosen.values:
            raise ConfigError(f"{chosen.source} and {origins.of('model_name').removeprefix(OVERRIDE + ' ')} disagree: "
                              "give the model once")
    if not raw.get("model_name"):
        raise ConfigError("no model chosen: pass --model NAME or set model_name in the config")
    return validate_config(raw, origins=origins)


def shipped_layers(model_name: str) -> list[Layer]:
    """The shipped layers of ``model_name`` over the typed defaults: its ``<model>.yaml`` (none for a plugin's
    model, :func:`model_layer`)."""
    loaded, source = model_layer(model_name)
    return [] if source is None else [Layer("file", source, loaded)]


def config_layers(
    model_name: Optional[str] = None,
    config_file: Optional[Union[str, Path]] = None,
    overrides: Optional[Sequence[str]] = None,
    flags: Optional[dict[str, Any]] = None,
    profile_layers: Optional[Callable[[str], Sequence[Layer]]] = None,
) -> list[Layer]:
    """The layers of a command's config (:func:`load_config`): ``<model>.yaml`` (shipped) < ``profile_layers`` of
    the model (``induce config --profile``: the profile's files and overrides) < ``config_file`` < ``--model`` <
    ``overrides`` < ``flags``.

    The model is ``model_name`` (``--model``), else the ``model_name`` of ``config_file``; when both are given they
    must agree, and so must ``--model`` and a ``model_name=`` override."""
    by_flag = model_name is not None
    user: Optional[dict] = None
    if config_file is not None:
        user = read_yaml(config_file)
        file_model = user.get("model_name")
        if by_flag and file_model is not None and file_model != model_name:
            raise ConfigError(f"{config_file}: model_name is {file_model!r} but --model is {model_name!r}")
        model_name = model_name if by_flag else file_model
    layers: list[Layer] = []
    if isinstance(model_name, str) and model_name:
        layers += shipped_layers(model_name)
        layers += profile_layers(model_name) if profile_layers is not None else []
    if user is not None:
        layers.append(Layer("file", str(config_file), user))
    if by_flag:
        layers.append(Layer("model", f"--model {model_name}", model_name))
    return [*layers, Layer("overrides", OVERRIDE, list(overrides or [])), Layer("flags", "flags", dict(flags or {}))]


def load_config(
    model_name: Optional[str] = None,
    config_file: Optional[Union[str, Path]] = None,
    overrides: Optional[Sequence[str]] = None,
    flags: Optional[dict[str, Any]] = None,
    profile_layers: Optional[Callable[[str], Sequence[Layer]]] = None,
) -> RunConfig:
    """The run config of a command: :func:`layer_config` of :func:`config_layers` (the module's docstring).

    ``flags`` are the values the command's own flags set (``--seed 5`` -> ``{"train.seed": 5}``,
    :func:`apply_flags`); applied last, and errors about them name the flag. A flag and an override that set
    one key to different values are refused. Errors name the file, flag or override a value came from.
    """
    return layer_config(config_layers(model_name, config_file, overrides, flags, profile_layers))


def leaf_sources(config: RunConfig) -> list[tuple[str, Any, Optional[str]]]:
    """``(dotted key, value, source)`` of every leaf of ``config`` as ``config.yaml`` writes it, in its order;
    ``source`` is the layer that set the value (:class:`Origins`), None for a typed default."""
    out: list[tuple[str, Any, Optional[str]]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            out.append((prefix, value, config.origins.exact(prefix)))

    walk("", config.to_dict())
    return out


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in ``"90"``, ``"90s"``, ``"10m"``, ``"1.5h"`` or ``"2d"``."""
    value = str(text).strip().lower()
    unit = _DURATION_UNITS.get(value[-1:]) if value else None
    number = value[:-1] if unit is not None else value
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError:
        raise ConfigError(f"time budget {text!r}: expected seconds or a number with s, m, h or d") from None
    if math.isnan(seconds):
        raise ConfigError(f"time budget {text!r}: not a number")
    if not seconds > 0:
        raise ConfigError(f"time budget {text!r}: must be positive")
    if math.isinf(seconds):
        raise ConfigError(f"time budget {text!r}: infinite (leave it out to train for train.epochs)")
    return seconds


def save_config(config: RunConfig, path: Union[str, Path], notes: Sequence[str] = ()) -> Path:
    """Write the resolved config as YAML (what :func:`load_config_file` reads back identically) with the
    output writer (:func:`induce.files.write_output`). ``notes``: lines written first as YAML comments, what the
    run resolved that is not a config value (the precision it trains in and the matrix unit that runs it)."""
    header = "".join(f"# {line}\n" for note in notes for line in str(note).splitlines())
    return write_output(path, header + dump_yaml(config.to_dict()))


def load_config_file(path: Union[str, Path]) -> RunConfig:
    """Read a saved (resolved) config file as is: no default layers (its ``model`` section unchecked, as
    :func:`validate_config` leaves it)."""
    return validate_config(read_yaml(path), source=str(path))
