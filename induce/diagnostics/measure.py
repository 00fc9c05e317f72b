"""Diagnostics of recurrence vs attention (Kerg et al. 2020, section 6).

* :func:`gradient_norms`: ``||dL/dh_t||`` for every step ``t`` of a task batch (the loss is the
  answer-only cross-entropy of :mod:`induce.diagnostics.tasks`), for a trained or a fresh model.
* :func:`memory_profile`: activation memory and time per step as a function of the sequence
  length ``T`` for each model. On CPU the memory is the total size of the distinct tensors autograd
  saves for the backward pass during the forward (``torch.autograd.graph.saved_tensors_hooks``):
  the part that grows with ``T`` (linear for RelLSTM, quadratic for full attention), measured
  exactly and without allocator noise. On CUDA it is ``torch.cuda.max_memory_allocated`` over
  forward + backward (the paper's "peak GPU usage").
* :func:`plot_gradient_norms`, :func:`plot_memory_profile`: PNG figures (matplotlib, Agg backend).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Iterable, Optional

import torch

from induce.diagnostics import tasks
from induce.errors import InduceError
from induce.report.figures import pyplot, save_figure


def gradient_norms(model, task: str, delay: int, n: int = 32, seed: int = 0) -> dict:
    """``||dL/dh_t||`` (L2 over the hidden units, mean over ``n`` test examples) for every step.

    ``model`` must support ``keep_step_states`` (the models of :mod:`induce.models.relmem.model`). ``h_t`` is
    the recurrent cell's output (before the attention summary is added). Returns
    ``{"task", "T", "length", "t": [0..L-1], "grad_norm": [L floats], "loss"}``.
    """
    if not hasattr(model, "keep_step_states"):
        raise TypeError(f"{type(model).__name__} does not expose its per-step states")
    data = tasks.make_task(task, n, delay, seed + tasks.TEST_SEED_OFFSET)
    was_training = model.training
    model.eval()
    model.keep_step_states = True
    try:
        model.zero_grad(set_to_none=True)
        loss = tasks.masked_loss(model, data)
        states = model.step_states
        for state in states:
            state.retain_grad()
        loss.backward()
        norms = [state.grad.norm(dim=-1).mean().item() if state.grad is not None else 0.0 for state in states]
    finally:
        model.keep_step_states = False
        model.step_states = []
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return {"task": task, "T": delay, "length": len(norms), "t": list(range(len(norms))),
            "grad_norm": norms, "loss": loss.item()}


class SavedTensorMeter:
    """Context manager: total bytes of the distinct storages autograd saves for backward."""

    def __init__(self):
        self.bytes = 0
        self._seen: set[tuple[int, int]] = set()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda x: x)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in self._seen:
            self._seen.add(key)
            self.bytes += storage.nbytes()
        return tensor

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        return False


def measure_model(model, length: int, batch_size: int = 4, repeats: int = 1, seed: int = 0) -> dict:
    """Memory and time of one forward + backward of ``model`` on random tokens ``[batch_size, length]``.

    Returns ``{"T", "batch_size", "memory_bytes", "memory_kind", "seconds_per_step"}`` (time: median
    over ``repeats`` of forward + backward wall time, divided by ``length``).
    """
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, model.vocab_size, (batch_size, length), generator=gen).to(device)
    times, memory = [], 0
    for _ in range(max(1, repeats)):
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        start = time.perf_counter()
        with SavedTensorMeter() as meter:
            out = model(tokens, model.init_state(batch_size, device))
            loss = model.logits(out.hidden).logsumexp(-1).mean()
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
            memory = torch.cuda.max_memory_allocated(device) - base
        else:
            memory = meter.bytes
        times.append(time.perf_counter() - start)
        del out, loss
    model.zero_grad(set_to_none=True)
    return {"T": length, "batch_size": batch_size, "memory_bytes": int(memory),
            "memory_kind": "cuda_peak_allocated" if device.type == "cuda" else "autograd_saved_tensors",
            "seconds_per_step": statistics.median(times) / length}


def memory_profile(
    model_names: Iterable[str],
    lengths: Iterable[int],
    batch_size: int = 4,
    repeats: int = 1,
    config: Optional[dict] = None,
    device: str = "cpu",
    log=None,
) -> list[dict]:
    """:func:`measure_model` for every model name and length; records carry ``"model"``.

    ``config`` overrides the models' defaults (the same for all; keys must exist in each Config).
    """
    records = []
    for name in model_names:
        torch.manual_seed(0)
        model = tasks.build_model(name, **(config or {})).to(device)
        for length in lengths:
            record = {"model": name, **measure_model(model, length, batch_size, repeats)}
            records.append(record)
            if log is not None:
                log(record)
    return records


def growth_exponent(lengths: list[int], values: list[float]) -> float:
    """Least-squares slope of ``log(value)`` against ``log(T)``: ~1 linear, ~2 quadratic."""
    import math

    xs = [math.log(x) for x in lengths]
    ys = [math.log(max(y, 1e-30)) for y in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    den = sum((x - mx) ** 2 for x in xs)
    return num / den if den else float("nan")


def require_matplotlib() -> None:
    """Raise :class:`InduceError` (with the install command) when matplotlib, an optional extra, is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InduceError(
            "this command draws figures with matplotlib, which is not installed; install the plots extra: "
            "pip install 'induce[plots]' (or pip install matplotlib)"
        ) from None


def plot_gradient_norms(results: dict[str, dict], path: str | Path) -> Path:
    """One curve of ``log ||dL/dh_t||`` against ``t`` per entry of ``results`` (label -> gradient_norms())."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, result in results.items():
        ax.plot(result["t"], result["grad_norm"], label=label)
    ax.set_yscale("log")
    ax.set_xlabel("time step t")
    ax.set_ylabel("||dL/dh_t||")
    ax.set_title("Gradient norm over time")
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def plot_memory_profile(records: list[dict], path: str | Path) -> Path:
    """Two panels: memory (MiB) and milliseconds per step against ``T``, one curve per model."""
    plt = pyplot()
    fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(10, 4))
    for name in dict.fromkeys(r["model"] for r in records):
        rows = [r for r in records if r["model"] == name]
        lengths = [r["T"] for r in rows]
        ax_mem.plot(lengths, [r["memory_bytes"] / 2**20 for r in rows], marker="o", label=name)
        ax_time.plot(lengths, [1e3 * r["seconds_per_step"] for r in rows], marker="o", label=name)
    kind = records[0]["memory_kind"] if records else ""
    ax_mem.set_xlabel("sequence length T")
    ax_mem.set_ylabel(f"memory (MiB, {kind})")
    ax_time.set_xlabel("sequence length T")
    ax_time.set_ylabel("ms per step (forward + backward)")
    for ax in (ax_mem, ax_time):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
