"""A trained run ready for inference: :func:`load_run` reads a run folder or checkpoint (hash-checked,
no pickle; a folder without ``best`` says what it holds instead, and a checkpoint that is not the model its
folder's ``config.yaml`` describes is refused) into a :class:`LoadedRun` on a device (:func:`resolve_device`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

import torch

from induce.errors import InduceError
from induce.inference.runs import read_run_sidecar
from induce.training.checkpoint import (
    SIDECAR_SUFFIX,
    WEIGHTS_SUFFIX,
    CheckpointError,
    checkpoint_paths,
    load_checkpoint,
    prefixed,
)
from induce.training.run_folder import CONFIG_FILE


@dataclass
class LoadedRun:
    """A model ready for inference (eval mode) with its vocabulary and checkpoint sidecar."""

    model: torch.nn.Module
    vocab: object
    meta: dict
    path: Path

    @property
    def config(self) -> dict:
        return self.meta["config"]


def resolve_device(device: Union[str, torch.device, None]) -> torch.device:
    """``auto`` (or None) -> ``cuda`` when CUDA is available, else ``cpu``; other names are checked
    (a clear error for ``cuda`` without CUDA or a name that is not a device)."""
    if isinstance(device, torch.device):
        return device
    from induce.training.ddp import resolve_device as resolve

    return resolve("auto" if device is None else str(device))


def load_run(path: Union[str, Path], device: Union[str, torch.device] = "auto") -> LoadedRun:
    """Model and vocabulary of a run folder (its ``best`` checkpoint) or of a checkpoint file/stem,
    on ``device`` (``auto``: CUDA when available, see :func:`resolve_device`)."""
    from induce.data.corpus import Vocab
    from induce.models.configs import model_config, stored_run_config
    from induce.models.registry import get_model_class

    path = Path(path)
    weights, sidecar = checkpoint_paths(path)
    if not path.exists() and not any(p.exists() for p in (weights, sidecar)):
        raise InduceError(f"{path}: no such run folder or checkpoint")
    if path.exists() and not path.is_dir() and path.suffix not in (WEIGHTS_SUFFIX, SIDECAR_SUFFIX):
        # (not "PATH.json: missing": a file the user never named)
        raise InduceError(f"{path}: not a run folder or checkpoint: give a run folder (runs/NAME) or a checkpoint "
                          f"(runs/NAME/best, or its {WEIGHTS_SUFFIX} or {SIDECAR_SUFFIX} file)")
    read_run_sidecar(path)  # a run folder without `best` says what it holds instead
    tensors, meta = load_checkpoint(path, device="cpu")
    config = stored_run_config(meta["config"], source=str(sidecar))
    _check_folder_config(sidecar, config)
    vocab = Vocab.from_json(meta["vocab"])
    model = get_model_class(config.model_name)(len(vocab), model_config(config))
    missing, unexpected = model.load_state_dict(prefixed(tensors, "model"), strict=False)
    if missing or unexpected:
        raise InduceError(f"{path}: checkpoint does not fit model {config.model_name} "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.to(resolve_device(device)).eval()
    return LoadedRun(model, vocab, meta, path)


def _check_folder_config(sidecar: Path, config) -> None:
    """Refuse a checkpoint whose model is not the one its run folder's ``config.yaml`` describes (weights
    and sidecar of another run copied in: each is intact, so their hashes agree). Model name and
    ``model`` section are compared; the ``train`` keys a resume may change are not. An unreadable
    ``config.yaml`` is not this check's business (the checkpoint is self-contained)."""
    from induce.config import read_yaml
    from induce.models.configs import stored_run_config

    folder_config = sidecar.parent / CONFIG_FILE
    if not folder_config.is_file():
        return
    try:
        # read with the stored defaults, so that a run written before a model field existed compares equal
        expected = stored_run_config(read_yaml(folder_config), source=str(folder_config))
    except InduceError:
        return
    if expected.model_name == config.model_name and expected.model == config.model:
        return
    if expected.model_name != config.model_name:
        what = f"a {config.model_name} model but {folder_config} says {expected.model_name}"
    else:
        keys = sorted(k for k in set(expected.model) | set(config.model)
                      if expected.model.get(k) != config.model.get(k))
        shown = ", ".join(f"model.{k} {config.model.get(k)!r} vs {expected.model.get(k)!r}" for k in keys[:3])
        what = f"a {config.model_name} model of another size than {folder_config} says ({shown})"
    raise CheckpointError(f"{sidecar}: this checkpoint is {what}: the checkpoint files come from another run; "
                          "put them back in their own folder, or pass the checkpoint that belongs here")


def as_loaded(run: Union[str, Path, LoadedRun], device="auto") -> LoadedRun:
    """``run`` itself when it is already loaded, else :func:`load_run` of it on ``device``."""
    return run if isinstance(run, LoadedRun) else load_run(run, device)
