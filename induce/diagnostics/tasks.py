"""Synthetic memorisation tasks (Copy, Denoise, Transfer Copy) and a minimal masked-loss task runner.

Alphabet (10 symbols): ``0`` blank, ``1..8`` data symbols, ``9`` marker ("start recalling").

* **Copy** (Hochreiter & Schmidhuber; Arjovsky et al. 2016), delay ``T``: length ``T + 20``. Ten data
  symbols at steps ``0..9``, blanks, the marker at step ``T + 9``, ten blanks; the answers are the ten
  symbols, in order, at the last ten steps ``T + 10 .. T + 19``.
* **Denoise** (Jing et al.), ``T`` steps: length ``T + 10``. Ten data symbols at random distinct
  steps of ``0 .. T - 2`` (sorted), blanks elsewhere, the marker at step ``T - 1``; the answers are the
  symbols in order of appearance at steps ``T .. T + 9``.
* **Transfer Copy**: train Copy at ``T = 100``, evaluate at larger ``T`` (:func:`evaluate`).

Every generator is deterministic given ``seed`` (its own ``torch.Generator``). The loss and the
accuracy only look at the answer steps. The runner here is deliberately small (Adam, gradient
clipping, fresh training batches from a seeded stream, fixed seeded test set); the LM trainer in
``induce.training`` has no masked loss.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from induce.errors import InduceError, InputError
from induce.training import checkpoint

BLANK, MARKER = 0, 9
N_SYMBOLS = 10  # alphabet size (vocabulary of the models)
N_RECALL = 10  # symbols to remember
TASKS = ("copy", "denoise")
#: Offset that separates the test stream from the training stream of the same seed.
TEST_SEED_OFFSET = 1_000_003


@dataclass
class TaskBatch:
    """``inputs [N, L]`` (long), ``targets [N, 10]`` (long), ``answer_steps [10]`` (long: the steps of
    ``inputs`` at which the model must output ``targets``; the same for every example)."""

    inputs: torch.Tensor
    targets: torch.Tensor
    answer_steps: torch.Tensor


def _check(task: str, delay: int) -> None:
    if task not in TASKS:
        raise InduceError(f"unknown task {task!r}; known tasks: {', '.join(TASKS)}")
    if task == "copy" and delay < 1:
        raise InduceError(f"copy needs T >= 1, got {delay}")
    if task == "denoise" and delay < N_RECALL + 1:
        raise InduceError(f"denoise needs T >= {N_RECALL + 1} (room for {N_RECALL} symbols), got {delay}")


def copy_task(n: int, delay: int, seed: int) -> TaskBatch:
    """``n`` Copy examples with delay ``T = delay`` (length ``delay + 20``)."""
    _check("copy", delay)
    gen = torch.Generator().manual_seed(seed)
    symbols = torch.randint(BLANK + 1, MARKER, (n, N_RECALL), generator=gen)  # data symbols 1..8
    length = delay + 2 * N_RECALL
    inputs = torch.full((n, length), BLANK, dtype=torch.long)
    inputs[:, :N_RECALL] = symbols
    inputs[:, delay + N_RECALL - 1] = MARKER
    answer_steps = torch.arange(length - N_RECALL, length)
    return TaskBatch(inputs, symbols, answer_steps)


def denoise_task(n: int, delay: int, seed: int) -> TaskBatch:
    """``n`` Denoise examples over ``T = delay`` steps (length ``delay + 10``)."""
    _check("denoise", delay)
    gen = torch.Generator().manual_seed(seed)
    symbols = torch.randint(BLANK + 1, MARKER, (n, N_RECALL), generator=gen)  # data symbols 1..8
    # Distinct random steps in 0..T-2: the first 10 of a random permutation, sorted.
    steps = torch.rand(n, delay - 1, generator=gen).argsort(dim=1)[:, :N_RECALL].sort(dim=1).values
    inputs = torch.full((n, delay + N_RECALL), BLANK, dtype=torch.long)
    inputs.scatter_(1, steps, symbols)
    inputs[:, delay - 1] = MARKER
    answer_steps = torch.arange(delay, delay + N_RECALL)
    return TaskBatch(inputs, symbols, answer_steps)


def make_task(task: str, n: int, delay: int, seed: int) -> TaskBatch:
    """Dispatch on ``task`` ("copy" or "denoise")."""
    _check(task, delay)
    return (copy_task if task == "copy" else denoise_task)(n, delay, seed)


def answer_logits(model, inputs: torch.Tensor, answer_steps: torch.Tensor) -> torch.Tensor:
    """``inputs [N, L]`` -> logits at the answer steps ``[N, 10, V]`` (fresh state)."""
    out = model(inputs, model.init_state(inputs.size(0), inputs.device))
    return model.logits(out.hidden[:, answer_steps])


def masked_loss(model, batch: TaskBatch) -> torch.Tensor:
    """Cross-entropy on the answer steps only (mean over the ``N * 10`` answers)."""
    logits = answer_logits(model, batch.inputs, batch.answer_steps)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch.targets.reshape(-1))


@torch.no_grad()
def evaluate(model, task: str, delay: int, n: int = 200, seed: int = 0, batch_size: int = 100) -> dict:
    """Accuracy of ``model`` on ``n`` test examples (test stream of ``seed``) at delay ``T = delay``.

    Returns ``{"symbol_accuracy", "sequence_accuracy", "loss", "n", "T", "task"}``; symbol accuracy
    is the fraction of answer symbols right (the paper's accuracy), sequence accuracy the fraction
    of examples with all ten right.
    """
    was_training = model.training
    model.eval()
    data = make_task(task, n, delay, seed + TEST_SEED_OFFSET)
    right = all_right = 0
    loss = 0.0
    for start in range(0, n, batch_size):
        inputs, targets = data.inputs[start : start + batch_size], data.targets[start : start + batch_size]
        logits = answer_logits(model, inputs, data.answer_steps)
        loss += F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum").item()
        correct = logits.argmax(-1) == targets
        right += int(correct.sum())
        all_right += int(correct.all(dim=1).sum())
    model.train(was_training)
    return {
        "task": task, "T": delay, "n": n,
        "symbol_accuracy": right / (n * N_RECALL),
        "sequence_accuracy": all_right / n,
        "loss": loss / (n * N_RECALL),
    }


def train(
    model,
    task: str,
    delay: int,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    clip: float = 1.0,
    eval_every: int = 100,
    eval_size: int = 200,
    time_budget_s: Optional[float] = None,
    target_accuracy: float = 1.0,
    log: Optional[Callable[[dict], None]] = None,
) -> dict:
    """Train ``model`` on ``task`` with the answer-only loss; returns the history.

    Each step draws a fresh batch from the training stream (seed ``seed * 1_000_000 + step``).
    Stops after ``steps`` updates, after ``time_budget_s`` seconds, or once an evaluation reaches
    ``target_accuracy`` (symbol accuracy). ``log`` receives each evaluation record.
    History: ``{"evals": [...], "steps": n_done, "seconds": s, "final": last eval}``.
    """
    _check(task, delay)
    torch.manual_seed(seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    evals, started, done = [], time.perf_counter(), 0
    running = None
    for step in range(1, steps + 1):
        model.train()
        batch = make_task(task, batch_size, delay, seed * 1_000_000 + step)
        loss = masked_loss(model, batch)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimiser.step()
        done = step
        running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
        elapsed = time.perf_counter() - started
        out_of_time = time_budget_s is not None and elapsed > time_budget_s
        if step % eval_every == 0 or step == steps or out_of_time:
            record = {"step": step, "seconds": round(elapsed, 1), "train_loss": running,
                      **evaluate(model, task, delay, n=eval_size, seed=seed)}
            evals.append(record)
            if log is not None:
                log(record)
            if record["symbol_accuracy"] >= target_accuracy or out_of_time:
                break
    return {"evals": evals, "steps": done, "seconds": time.perf_counter() - started,
            "final": evals[-1] if evals else None}


def save_checkpoint(path: str | Path, model, meta: dict) -> tuple[Path, Path]:
    """Write ``model``'s weights and ``{model, config, vocab_size, **meta}`` as a checkpoint of the trainer's
    format (:func:`induce.training.checkpoint.save_checkpoint`: atomic, hash-checked): ``STEM.safetensors``
    and ``STEM.json`` for ``path`` = ``STEM.safetensors`` (or ``STEM``). Returns both paths."""
    record = {"model": model.name, "config": model.config.model_dump(), "vocab_size": model.vocab_size, **meta}
    return checkpoint.save_checkpoint(path, model.state_dict(), record)


def model_class(name: str):
    """The model class registered as ``name`` (this package's models load without the others)."""
    from induce.models.relmem.model import MODELS

    if name in MODELS:
        return MODELS[name]
    from induce.models.registry import get_model_class

    try:
        return get_model_class(name)
    except KeyError as err:
        raise InduceError(str(err.args[0])) from None


def build_model(name: str, vocab_size: int = N_SYMBOLS, **config):
    """Instantiate model ``name`` with config overrides (pydantic validation errors become InduceError)."""
    cls = model_class(name)
    try:
        return cls(vocab_size, cls.Config(**config))
    except ValueError as err:  # pydantic.ValidationError is a ValueError
        raise InduceError(f"bad configuration for {name}: {err}") from None


def load_checkpoint(path: str | Path):
    """Inverse of :func:`save_checkpoint`: ``(model, sidecar dict)``. The weights are hash-checked
    (:func:`induce.training.checkpoint.load_checkpoint`); a sidecar written before task checkpoints used
    the trainer's format (no ``format`` field, ``STEM.json`` beside ``STEM.safetensors``) is still read,
    without a hash to check."""
    weights, sidecar = checkpoint.checkpoint_paths(path)
    for needed in (weights, sidecar):
        if not needed.exists():
            raise InputError("checkpoint file not found", path=needed)
    try:
        meta = json.loads(sidecar.read_text())
        model = build_model(meta["model"], meta["vocab_size"], **meta["config"])
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise InputError(f"not a checkpoint sidecar ({err})", path=sidecar) from None
    if "format" in meta:
        tensors, meta = checkpoint.load_checkpoint(weights)
    else:
        try:
            tensors = load_file(str(weights))
        except Exception as err:  # safetensors header errors
            raise InputError(f"cannot load weights: {err}", path=weights) from None
    try:
        model.load_state_dict(tensors)
    except RuntimeError as err:  # shape mismatches, missing or unexpected tensors
        raise InputError(f"cannot load weights: {err}", path=weights) from None
    return model, meta
