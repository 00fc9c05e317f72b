"""Does a run fit its data and its machine? Checked while the run is built, before the first step, so
that a size too large is a one-line message that says what fits, instead of a traceback or the
kernel's out-of-memory killer (which ends the process without a word on Linux, where memory is
overcommitted: an allocation larger than what is free succeeds and the process dies when it is used).

* :func:`batch_rows` — the data: ``data.batch_size`` (``data.eval_batch_size``) streams of at least two
  tokens each (:func:`induce.training.batching.batchify`), or a message with the largest that fits;
* :func:`check_parameters_fit` — the memory, before the model is built: its parameters counted on
  PyTorch's ``meta`` device (no memory used), times what training keeps per parameter (weights,
  gradients, optimiser state), against the free memory; the message gives the largest value of each
  of the model's size keys (:attr:`~induce.models.base.LanguageModel.size_keys`, e.g. ``model.emb_size``
  / ``model.hidden_size``) that fits with the other settings as they are;
* :func:`check_step_fits` — the memory of a training step on token streams: what a step keeps for the
  backward pass (measured on steps of 1 and 2 rows of the longest segment, counted with
  ``torch.autograd.graph.saved_tensors_hooks``: a part per step and a part per row), for this
  run's rows, beside the model, its gradients and optimiser state; the message gives the largest
  ``data.batch_size`` that fits;
* :func:`check_declared_step_fits` — the memory of a training step on whole sentences, from the tensors
  the model declares (:meth:`~induce.models.base.LanguageModel.step_tensors`: a neural PCFG's rule
  tensor, whose memory is held inside its inside kernel, out of the hooks' sight); the message names
  those tensors, the largest ``data.batch_size`` that fits and the config keys that set their size.

The memory checks count less than a run needs (temporary buffers, and what custom autograd
functions keep outside the saved tensors, are not counted): a run they refuse cannot fit, and one
they accept may still run out (then PyTorch's own error is turned into a message by
:func:`out_of_memory_message` and :mod:`induce.training.failures`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from induce.errors import InduceError

from . import batching

GIB = 1024**3


class DoesNotFit(InduceError):
    """The run needs more tokens or memory than it has; the message says what fits."""


# ------------------------------------------------------------------------------------------ the data


def batch_rows(stream: torch.Tensor, batch_size: int, key: str, split: str) -> torch.Tensor:
    """:func:`~induce.training.batching.batchify`, with a :class:`DoesNotFit` naming ``key`` when the
    ``split``'s tokens cannot fill ``batch_size`` rows of at least 2 tokens."""
    tokens = stream.size(0)
    if tokens // batch_size < 2:
        largest = tokens // 2
        fits = f"{key}={largest} at most" if largest >= 1 else "no batch size (it has fewer than 2 tokens)"
        raise DoesNotFit(f"{key}={batch_size}: the {split} split has {tokens:,} tokens (with sentence ends), too "
                         f"few for {batch_size:,} streams of at least 2 tokens; {fits} fits")
    return batching.batchify(stream, batch_size)


# ---------------------------------------------------------------------------------------- the memory


def available_bytes(device: torch.device) -> Optional[int]:
    """Memory not yet in use that a run on ``device`` can take: the GPU's free memory plus what
    PyTorch's allocator holds there unused; on a CPU, ``MemAvailable`` of ``/proc/meminfo`` (None
    where unknown)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free) + int(torch.cuda.memory_reserved(device)) - int(torch.cuda.memory_allocated(device))
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def state_copies(config) -> int:
    """Tensors of a parameter's size that training keeps per parameter, at most: the weight and its
    gradient, Adam's two moments, ASGD's average (after the switch, when Adam's moments are gone)."""
    optim = config.optim
    adam = optim.optimizer == "adam" or optim.scorer_optimizer == "adam"
    asgd = optim.asgd != "never"
    return 2 + max(2 if adam else 0, 1 if asgd else 0)


def _gib(n_bytes: float) -> str:
    if n_bytes >= 0.1 * GIB:
        return f"{n_bytes / GIB:,.1f} GiB"
    return f"{n_bytes / 1024**2:,.0f} MiB" if n_bytes >= 1024**2 else f"{n_bytes / 1024:,.0f} KiB"


def count_parameters(model_cls, vocab_size: int, model_config: dict) -> int:
    """Parameters of ``model_cls(vocab_size, Config(**model_config))``, built on the meta device
    (shapes only, no memory)."""
    with torch.device("meta"):
        model = model_cls(vocab_size, model_cls.Config(**model_config))
    return sum(p.numel() for p in model.parameters())


def _largest_fitting(fits: Callable[[int], bool], smallest: int, current: int) -> Optional[int]:
    """The largest ``n`` in ``[smallest, current)`` with ``fits(n)`` (true up to some n, false above),
    None when ``fits(smallest)`` is false."""
    if smallest >= current or not fits(smallest):
        return None
    low, high = smallest, current  # fits(low), not fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def _size_that_fits(model_cls, vocab_size: int, model_config: dict, budget: float, copies: int, key: str):
    """The largest value of ``model.<key>`` whose parameters fit ``budget`` bytes, the rest unchanged."""
    current = model_config.get(key)
    if not isinstance(current, int) or isinstance(current, bool) or current < 2:
        return None

    def accepted(value: int) -> Optional[int]:
        """``value``, or the nearest smaller value the model's config accepts (e.g. ON-LSTM's hidden size
        must be a multiple of its chunk size); None when there is none close below."""
        for candidate in range(value, max(value - 256, 0), -1):
            try:
                return count_parameters(model_cls, vocab_size, dict(model_config, **{key: candidate}))
            except Exception:  # refused by the config (pydantic) or the model
                continue
        return None

    def fits(value: int) -> bool:
        n_params = accepted(value)
        return n_params is not None and n_params * 4 * copies <= budget

    smallest = next((value for value in range(1, 257) if accepted(value) is not None), None)
    largest = None if smallest is None else _largest_fitting(fits, smallest, current)
    while largest is not None and largest >= 1:  # the accepted value at or below it
        try:
            count_parameters(model_cls, vocab_size, dict(model_config, **{key: largest}))
            return largest
        except Exception:
            largest -= 1
    return None


def check_parameters_fit(model_cls, vocab_size: int, config, device: torch.device,
                         available: Optional[int] = None) -> Optional[int]:
    """Refuse a model whose parameters, gradients and optimiser state alone exceed the free memory
    (:class:`DoesNotFit` naming the sizes that fit); returns the bytes they take (None: not known)."""
    try:
        n_params = count_parameters(model_cls, vocab_size, config.model)
    except Exception:  # a model that cannot be built on the meta device: no check
        return None
    copies = state_copies(config)
    needed = n_params * 4 * copies  # fp32
    available = available_bytes(device) if available is None else available
    if available is None or needed <= available:
        return needed
    keys = [key for key in model_cls.size_keys if isinstance(config.model.get(key), int)]
    hints = []
    for key in keys:
        value = _size_that_fits(model_cls, vocab_size, config.model, available, copies, key)
        if value is not None:
            hints.append(f"model.{key}={value}")
    fits = (" or ".join(hints) + " at most fits, the other settings as they are") if hints else \
        "smaller model sizes are needed"
    where = "GPU memory" if device.type == "cuda" else "memory"
    sizes = ", ".join(f"model.{key}={config.model[key]}" for key in keys)
    raise DoesNotFit(
        f"{config.model_name}" + (f" with {sizes}" if sizes else "")
        + f" has {n_params:,} parameters: {_gib(needed)} for their weights, gradients and optimiser state, more than "
        f"the {_gib(available)} of free {where}; {fits}")


def longest_segment(config, row_length: int) -> int:
    """Tokens of the longest training segment: ``data.bptt`` (+ ``data.max_bptt_extra`` with random
    lengths), at most a row of the training data less one."""
    return max(1, min(config.data.bptt + (config.data.max_bptt_extra if config.data.variable_bptt else 0),
                      row_length - 1))


def saved_bytes(loss_module, model, device: torch.device, rows: int, length: int, gold_width: Optional[int]) -> int:
    """Bytes of the tensors a training step on ``rows`` rows of ``length`` tokens keeps for its
    backward pass. Training mode, as the step it stands for (its dropout masks count, and cuDNN's
    LSTM refuses a backward pass through a forward run in eval mode), with the random generators'
    states and the model's buffers (a BatchNorm's running statistics, which a training-mode forward
    updates) restored afterwards, the gradients dropped and no optimiser step: the run is not changed.
    Each storage counts once; the parameters are not counted (:func:`check_parameters_fit` has them)."""
    tokens = torch.zeros(rows, length, dtype=torch.long, device=device)
    gold = None if gold_width is None else torch.zeros(rows, length, gold_width, device=device)
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in parameters:
            seen[pointer] = max(seen.get(pointer, 0), storage.nbytes())
        return tensor

    was_training = model.training
    buffers = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
    model.train()
    devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss, _, _ = loss_module(tokens, tokens, model.init_state(rows, device), gold)
            loss.backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
    return sum(seen.values())


@dataclass(frozen=True)
class StepMemory:
    """Bytes a training step keeps for its backward pass, measured with segments of ``length`` tokens:
    ``fixed`` per step (e.g. copies of the weights) plus ``per_row`` per batch row. For other lengths
    a row is taken to grow in proportion when longer (an overestimate when part of it does not
    depend on the length) and not to shrink when shorter."""

    fixed: float
    per_row: float
    length: int

    def bytes(self, rows: int, length: int) -> float:
        return self.fixed + rows * self.per_row * max(1.0, length / self.length)


def measure_step_memory(loss_module, model, device: torch.device, length: int,
                        gold_width: Optional[int] = None) -> StepMemory:
    """:class:`StepMemory` from two small steps on segments of ``length`` tokens: 1 row and 2 rows."""
    one = saved_bytes(loss_module, model, device, 1, length, gold_width)
    two = saved_bytes(loss_module, model, device, 2, length, gold_width)
    per_row = max(0, two - one)
    return StepMemory(fixed=max(0, one - per_row), per_row=per_row, length=length)


def check_step_fits(loss_module, model, config, device: torch.device, rows: int, row_length: int,
                    gold_width: Optional[int] = None, available: Optional[int] = None) -> None:
    """Refuse ``rows`` batch rows (this process's share of ``data.batch_size``, each ``row_length``
    tokens long) whose activations do not fit the free memory beside the model (built: its weights are
    in memory already; its gradients and optimiser state are still to come); the message gives the
    largest smaller ``data.batch_size`` that fits (fewer rows are longer: their segments may grow up
    to ``data.bptt`` + ``data.max_bptt_extra``)."""
    available = available_bytes(device) if available is None else available
    if available is None:
        return
    length = longest_segment(config, row_length)
    try:
        memory = measure_step_memory(loss_module, model, device, length, gold_width)
    except RuntimeError as err:  # one row alone does not fit
        raise DoesNotFit(out_of_memory_message(err, config) or str(err)) from None
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    budget = available - weights * (state_copies(config) - 1)
    needed = memory.bytes(rows, length)
    if needed <= budget:
        return
    processes = max(1, config.data.batch_size // max(rows, 1))
    tokens = row_length * rows * processes  # the training stream (its tail cut to fill the rows)

    def step(batch_size: int) -> float:  # what one process keeps at this batch size
        return memory.bytes(batch_size // processes, longest_segment(config, tokens // batch_size))

    largest = next((b for b in range(config.data.batch_size - processes, 0, -processes) if step(b) <= budget), 0)
    fits = f"data.batch_size={largest} fits" if largest >= 1 else "not even one row fits: smaller models"
    where = "GPU memory" if device.type == "cuda" else "memory"
    raise DoesNotFit(
        f"data.batch_size={config.data.batch_size}: a training step on {rows:,} rows of segments of up to {length} "
        f"tokens keeps about {_gib(needed)} for its backward pass, more than the {_gib(max(budget, 0))} of {where} "
        f"left beside the model; {fits} (or shorter segments: data.bptt)")


def check_declared_step_fits(model, config, device: torch.device, length: int, processes: int = 1,
                             available: Optional[int] = None) -> None:
    """Refuse a run whose training step on ``data.batch_size / processes`` sentences of up to ``length`` words
    holds more than the free memory beside the model (built: its weights are in memory; its gradients and
    optimiser state are still to come), counted from the tensors the model declares
    (:meth:`~induce.models.base.LanguageModel.step_tensors`; nothing is checked when it declares none). The
    :class:`DoesNotFit` names the tensors, the largest ``data.batch_size`` that fits and the keys that set
    the tensors' sizes."""
    rows = config.data.batch_size // processes
    tensors = model.step_tensors(rows, length)
    if not tensors:
        return
    available = available_bytes(device) if available is None else available
    if available is None:
        return
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    budget = available - weights * (state_copies(config) - 1)
    needed = sum(tensor.bytes for tensor in tensors)
    if needed <= budget:
        return
    largest = next((b for b in range(config.data.batch_size - processes, 0, -processes)
                    if sum(t.bytes for t in model.step_tensors(b // processes, length)) <= budget), 0)
    keys = list(dict.fromkeys(key for tensor in tensors for key in tensor.keys if key != "data.batch_size"))
    shrink = f"smaller {', '.join(keys)}" if keys else "a smaller model"
    fits = (f"data.batch_size={largest} fits, or {shrink}" if largest >= 1
            else f"not even one sentence per step fits: {shrink}")
    held = ", ".join(f"{tensor.name} {list(tensor.shape)} ({_gib(tensor.bytes)})" for tensor in tensors)
    where = "GPU memory" if device.type == "cuda" else "memory"
    raise DoesNotFit(
        f"data.batch_size={config.data.batch_size}: a training step of {config.model_name} on {rows:,} sentences of "
        f"up to {length} words holds {held}: {_gib(needed)}, more than the {_gib(max(budget, 0))} of {where} left "
        f"beside the model; {fits}")


def out_of_memory_message(err: BaseException, config, length_key: Optional[str] = "data.bptt") -> Optional[str]:
    """A one-line message for PyTorch's out-of-memory error (GPU) or failed allocation (CPU), naming
    the settings to lower: ``data.batch_size``, ``length_key`` (the length of what a step reads: the
    objective's :attr:`~induce.training.objectives.Objective.length_key`; None: not named) and the model
    sizes; None for any other error."""
    text = str(err)
    if not (isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in text.lower()
            or "can't allocate memory" in text or "not enough memory" in text.lower()):
        return None
    where = "GPU memory" if isinstance(err, torch.cuda.OutOfMemoryError) or "CUDA" in text else "memory"
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    settings = [f"data.batch_size (now {config.data.batch_size:,})"]
    if length_key is not None:
        section, _, key = length_key.partition(".")
        value = getattr(getattr(config, section), key, None)
        settings.append(length_key + (f" (now {value})" if value is not None else ""))
    return f"out of {where} ({first[:160]}); lower {', '.join(settings)} or the model sizes"
