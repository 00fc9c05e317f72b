"""Checkpoints: safetensors tensors + a JSON sidecar. Nothing is ever unpickled.

A checkpoint ``STEM`` is two files written side by side:

* ``STEM.safetensors``: every tensor — model weights (``model.<name>``), optimiser tensors
  (``optim.state.<param index>.<key>``), RNG states as uint8 tensors (``rng.<name>``) and any
  extra tensors the caller adds (e.g. the carried recurrent state, ``hidden.<i>``);
* ``STEM.json``: format name and version, model name, full config, vocabulary, the non-tensor
  optimiser / trainer state, the sha256 of the ``.safetensors`` file and ``model_sha256``: the
  sha256 of that hash together with what decides which model the weights are (``model_name``,
  ``config``, ``vocab``), so a sidecar whose model name, config or vocabulary was changed after
  the weights were written (a PRPN checkpoint relabelled ``onlstm``, PaLM weights relabelled
  ``palm-rb``, which has the same tensor names and shapes) is refused.

Writing is atomic: both files go to temporary names in the same folder, are flushed to disk and
only then renamed (weights first, then the sidecar that vouches for them), so a write that fails
half-way (a full disk) leaves the previous checkpoint whole. Loading checks the format,
version and the hashes before reading a single tensor, so a damaged (truncated, edited) or foreign
file is refused with a :class:`CheckpointError` instead of being half-loaded. Version 1 sidecars
(without ``model_sha256``) are still read, with the weights hash only.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Union

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from induce.errors import InduceError
from induce.files import honour_umask, sha256_file

FORMAT = "induce-checkpoint"
FORMAT_VERSION = 2
#: Versions this code reads (1: no ``model_sha256``).
READABLE_VERSIONS = (1, 2)
#: The sidecar fields that decide which model the weights are (covered by ``model_sha256``).
IDENTITY_FIELDS = ("model_name", "config", "vocab")
WEIGHTS_SUFFIX = ".safetensors"
SIDECAR_SUFFIX = ".json"


class CheckpointError(InduceError):
    """A checkpoint is missing, damaged, foreign or of another format version."""


def checkpoint_paths(path: Union[str, Path], default_stem: str = "best") -> tuple[Path, Path]:
    """``(weights, sidecar)`` for a run folder (-> ``default_stem``), a stem, or either file."""
    path = Path(path)
    if path.is_dir():
        path = path / default_stem
    if path.suffix in (WEIGHTS_SUFFIX, SIDECAR_SUFFIX):
        path = path.with_suffix("")
    return path.with_name(path.name + WEIGHTS_SUFFIX), path.with_name(path.name + SIDECAR_SUFFIX)


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _write_durably(tmp: Path, write) -> None:
    """``write(tmp)``, the mode a plain open() gives (safetensors writes 0600), flushed to disk."""
    write(tmp)
    honour_umask(tmp)
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())


def _unshare(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU copies; safetensors refuses tensors that share memory, so those are cloned."""
    out, seen = {}, set()
    for key, tensor in tensors.items():
        tensor = tensor.detach().to("cpu").contiguous()
        pointer = (tensor.untyped_storage().data_ptr(), tensor.storage_offset()) if tensor.numel() else None
        if pointer is not None and pointer in seen:
            tensor = tensor.clone()
        elif pointer is not None:
            seen.add(pointer)
        out[key] = tensor
    return out


def model_identity_sha256(weights_sha256: str, meta: dict) -> str:
    """sha256 of the weights hash and the canonical JSON of the sidecar's identity fields."""
    identity = {name: meta.get(name) for name in IDENTITY_FIELDS}
    text = json.dumps([weights_sha256, identity], sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_checkpoint(path: Union[str, Path], tensors: dict[str, torch.Tensor], meta: dict) -> tuple[Path, Path]:
    """Write ``tensors`` and ``meta`` (JSON-serialisable) atomically; returns the two paths.

    Both files are written in full to temporary names first and only then renamed over the old
    ones (weights, then the sidecar that vouches for them): a write that fails (a full disk, an
    error) leaves the previous checkpoint as it was, whole and loadable."""
    weights_path, sidecar_path = checkpoint_paths(path)
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    tensors = _unshare(tensors)
    weights_tmp, sidecar_tmp = _temporary(weights_path), _temporary(sidecar_path)
    try:
        _write_durably(weights_tmp, lambda tmp: save_file(tensors, str(tmp)))
        weights_sha256 = sha256_file(weights_tmp)
        # Through JSON first: the hash must be computed on what a reader will parse (tuples -> lists).
        meta = json.loads(json.dumps(meta, allow_nan=True))
        sidecar = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "weights_file": weights_path.name,
            "weights_sha256": weights_sha256,
            "model_sha256": model_identity_sha256(weights_sha256, meta),
            **meta,
        }
        text = json.dumps(sidecar, indent=1, allow_nan=True)
        _write_durably(sidecar_tmp, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        os.replace(weights_tmp, weights_path)
        os.replace(sidecar_tmp, sidecar_path)
    except OSError as err:  # name the checkpoint, not its temporary file
        target = {str(weights_tmp): weights_path, str(sidecar_tmp): sidecar_path}.get(str(err.filename))
        if target is None:
            raise
        raise OSError(err.errno, err.strerror, str(target)) from err
    finally:
        for tmp in (weights_tmp, sidecar_tmp):
            if tmp.exists():
                tmp.unlink()
    return weights_path, sidecar_path


def read_sidecar(path: Union[str, Path]) -> dict:
    """The checked sidecar of a checkpoint (format and version; not the weights hash)."""
    _, sidecar_path = checkpoint_paths(path)
    if not sidecar_path.is_file():
        raise CheckpointError(f"{sidecar_path}: no checkpoint here (missing {sidecar_path.name})")
    try:
        meta = json.loads(sidecar_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{sidecar_path}: damaged checkpoint sidecar (not JSON: {err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise CheckpointError(f"{sidecar_path}: not an induce checkpoint (format {found!r})")
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise CheckpointError(
            f"{sidecar_path}: checkpoint format version {meta.get('format_version')!r}; "
            f"this version of induce reads versions {', '.join(map(str, READABLE_VERSIONS))}"
        )
    return meta


def verify_checkpoint(path: Union[str, Path]) -> dict:
    """The sidecar of a checkpoint after checking format, version, the weights' sha256 and (version 2)
    ``model_sha256``; no tensor is read. A :class:`CheckpointError` says what is wrong."""
    weights_path, sidecar_path = checkpoint_paths(path)
    meta = read_sidecar(path)
    if not weights_path.is_file():
        raise CheckpointError(f"{weights_path}: missing weights file of checkpoint {sidecar_path}")
    actual = sha256_file(weights_path)
    if actual != meta.get("weights_sha256"):
        raise CheckpointError(
            f"{weights_path}: damaged checkpoint (sha256 {actual[:16]}... does not match the sidecar's "
            f"{str(meta.get('weights_sha256'))[:16]}...); the file was truncated or modified"
        )
    if meta["format_version"] >= 2 and meta.get("model_sha256") != model_identity_sha256(actual, meta):
        config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
        raise CheckpointError(
            f"{sidecar_path}: the sidecar does not describe these weights: its model name, config or vocabulary "
            f"(model_name {meta.get('model_name')!r}, config model_name {config.get('model_name')!r}) differ "
            f"from those the weights were written with; the sidecar was edited or belongs to another checkpoint"
        )
    return meta


def load_checkpoint(
    path: Union[str, Path], device: Union[str, torch.device] = "cpu"
) -> tuple[dict[str, torch.Tensor], dict]:
    """``(tensors, meta)`` of a checkpoint after :func:`verify_checkpoint`."""
    weights_path, _ = checkpoint_paths(path)
    meta = verify_checkpoint(path)
    try:
        tensors = load_file(str(weights_path), device=str(device))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{weights_path}: unreadable weights: {err}") from None
    return tensors, meta


# ------------------------------------------------------------------ state (de)composition helpers


def prefixed(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries of ``tensors`` under ``prefix.`` with the prefix removed."""
    start = len(prefix) + 1
    return {key[start:]: value for key, value in tensors.items() if key.startswith(prefix + ".")}


def split_optimizer_state(state_dict: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """Optimiser ``state_dict`` -> (tensors ``optim.state.<i>.<key>``, JSON part)."""
    tensors: dict[str, torch.Tensor] = {}
    json_state: dict[str, dict] = {}
    for index, entries in state_dict["state"].items():
        plain = {}
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.state.{index}.{key}"] = value
            else:
                plain[key] = value
        json_state[str(index)] = plain
    groups = json.loads(json.dumps(state_dict["param_groups"], default=_json_default))
    return tensors, {"state": json_state, "param_groups": groups}


def join_optimizer_state(tensors: dict[str, torch.Tensor], json_part: dict) -> dict:
    """Inverse of :func:`split_optimizer_state` (parameter indices back to ints)."""
    state: dict[int, dict[str, Any]] = {int(i): dict(v) for i, v in json_part["state"].items()}
    for key, value in prefixed(tensors, "optim.state").items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    groups = []
    for group in json_part["param_groups"]:
        group = dict(group)
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
        groups.append(group)
    return {"state": state, "param_groups": groups}


def _json_default(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, (tuple, set)):
        return list(value)
    raise TypeError(f"cannot store {type(value).__name__} in a checkpoint sidecar")


def flatten_state(state: Any, prefix: str = "hidden") -> tuple[dict[str, torch.Tensor], Any]:
    """A nested recurrent state (tensors in tuples, lists, dicts, None) -> (tensors, JSON skeleton)."""
    tensors: dict[str, torch.Tensor] = {}

    def rec(node):
        if isinstance(node, torch.Tensor):
            key = f"{prefix}.{len(tensors)}"
            tensors[key] = node
            return {"tensor": key}
        if node is None:
            return None
        if isinstance(node, tuple):
            return {"tuple": [rec(x) for x in node]}
        if isinstance(node, list):
            return {"list": [rec(x) for x in node]}
        if isinstance(node, dict):
            return {"dict": {str(k): rec(v) for k, v in node.items()}}
        raise TypeError(f"cannot store a recurrent state containing {type(node).__name__}")

    return tensors, rec(state)


def unflatten_state(tensors: dict[str, torch.Tensor], skeleton: Any) -> Any:
    """Inverse of :func:`flatten_state`."""
    if skeleton is None:
        return None
    if "tensor" in skeleton:
        return tensors[skeleton["tensor"]]
    if "tuple" in skeleton:
        return tuple(unflatten_state(tensors, x) for x in skeleton["tuple"])
    if "list" in skeleton:
        return [unflatten_state(tensors, x) for x in skeleton["list"]]
    return {k: unflatten_state(tensors, v) for k, v in skeleton["dict"].items()}
