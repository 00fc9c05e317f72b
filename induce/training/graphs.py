"""The opt-in graph-captured training step (``train.cuda_graphs: true``) and its eager twin.

On a GPU our recurrent models are launch-bound: one ON-LSTM step launches ~10k small kernels (a Python
time loop, per-step cells, per-parameter optimiser ops), so the CPU that issues them, not the GPU, sets
the pace. A CUDA graph records the kernels of a whole step once and replays them with one launch.

A graph replays fixed kernels on fixed addresses, so a step goes through a :class:`StaticStep`, one
per *static shape* — the segment length ``T`` (variable BPTT keeps a handful of them with
``data.bptt_bucket``), the layout of the carried state (PaLM's span memory is ``None`` at the start of an
epoch) and the gold spans — and per learning rate of the step:

* preallocated buffers for the inputs ``[B, T]``, targets ``[B, T]``, gold spans ``[B, T, m]`` and the
  carried recurrent state; each call copies the batch and the state into them (device copies, no sync);
* the step body, free of host syncs: ``zero_grad(set_to_none=True)``, forward + loss (:class:`LMLoss`),
  backward, gradient clipping (:func:`~induce.training.optim.clip_gradients`: torch's
  ``clip_grad_norm_`` with ``error_if_nonfinite=False`` multiplies by the clamped coefficient on the
  device instead of testing it — no sync), ``optimizer.step()``; the losses and the new state come
  back as tensors (the trainer reads the running loss only at its log intervals, as before).

On CUDA the body runs eagerly for ``warmup`` calls (3, as in torch's notes on CUDA graphs: lazy
initialisation — cuBLAS handles, Triton compilation, the optimiser's state — must not happen
during capture) on a side stream, is then captured with ``torch.cuda.graph`` and replayed from then
on. On every other device, and wherever capture is not possible, the *same* body runs eagerly on
the same buffers: that is what the CPU tests compare with the plain trainer step (bit for bit).

**Decisions and constraints** (the capture itself is not verified on a GPU yet; see the tests):

* The lr is a constant of each graph, not a device tensor: with variable BPTT the lr of a step is
  ``base_lr * T / bptt`` (:meth:`Schedule.step_lr`), a function of the segment length, i.e. of the
  bucket, so each :class:`StaticStep` has one lr. When it changes (plateau, ASGD switch or restart)
  the step is rebuilt. A tensor lr would not help: torch 2.13's foreach SGD turns a tensor lr
  into a Python number (``alpha=-lr``, a host sync), so it would force ``fused=True`` SGD, whose
  rounding differs from the eager step's.
* Optimisers: Adam and ASGD need ``capturable=True`` on CUDA (step counts and ASGD's eta / mu kept on
  the device); :func:`prepare_optimizer` switches it on for the optimiser the graphs use and moves
  existing step counts to the device (``build_optimizer`` already makes ASGD capturable on CUDA).
  Adam's capturable update computes its bias corrections on the device, so on CUDA it rounds a little
  differently from the eager Adam (SGD and ASGD do not change). A new optimiser object (the
  ASGD switch or restart, a resume) drops every cached step: its state tensors are new.
* Gradients: the body sets them to ``None`` and backward allocates them, so the ones allocated during
  capture live in the graph's private memory pool and every replay writes the same addresses; after a
  replay each parameter's ``.grad`` is pointed back at its graph's gradients (another bucket's capture
  moved it).
* Dropout and DropConnect masks (``dropconnect``: ``torch.rand_like``; ``locked_dropout`` and
  ``embedded_dropout``: ``bernoulli_``) draw from the default CUDA generator, which torch registers
  with every capture: each replay draws fresh masks (graph-safe philox offsets), none are frozen.
* ``train.amp``: autocast runs with ``cache_enabled=False`` in the graphed step (torch's notes:
  autocast's weight-cast cache must not outlive a capture); only the cache changes, not the values.
* Capture is not attempted under DistributedDataParallel (NCCL capture needs more care than this) or
  for a model class that sets ``graph_capturable = False`` (a forward with host syncs: ``.item()``,
  ``.tolist()``, data-dependent Python branches). If a capture fails anyway, the trainer says so in
  one line and every step from then on runs the same body eagerly.
* Memory: each captured step keeps its activations in its own pool, so ~10 buckets cost ~10 steps'
  activations (a few GiB at the published sizes).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import torch
from torch import nn

from .optim import clip_gradients
from .state import detach_state, map_state

#: Eager calls of a new step before it is captured (torch's notes use 3; DDP would need 11).
WARMUP_STEPS = 3


def state_signature(state: Any) -> Any:
    """A hashable description of a nested recurrent state: ``(shape, dtype, device)`` per tensor,
    ``None`` kept, containers kept as tuples (tagged by kind)."""
    if isinstance(state, torch.Tensor):
        return ("T", tuple(state.shape), state.dtype, str(state.device))
    if isinstance(state, (tuple, list)):
        return (type(state).__name__, *(state_signature(x) for x in state))
    if isinstance(state, dict):
        return ("dict", *((k, state_signature(v)) for k, v in sorted(state.items())))
    if state is None:
        return None
    raise TypeError(f"cannot make a static buffer for a recurrent state of type {type(state).__name__}")


def _copy_tree(dst: Any, src: Any) -> None:
    """``dst.copy_(src)`` for every tensor of two states with the same signature."""
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            _copy_tree(d, s)
    elif isinstance(dst, dict):
        for key in dst:
            _copy_tree(dst[key], src[key])


def _torch_optimizers(optimizer) -> list[torch.optim.Optimizer]:
    """The torch optimisers inside ``optimizer`` (a :class:`ScorerSplitOptimizer` holds several)."""
    return list(getattr(optimizer, "optimizers", [optimizer]))


def _group_lrs(optimizer) -> tuple:
    return tuple(float(group["lr"]) for group in optimizer.param_groups)


def prepare_optimizer(optimizer, device: torch.device) -> None:
    """Make ``optimizer`` capturable on CUDA: ``capturable=True`` for Adam / AdamW / ASGD groups and
    their step counts (0-dim tensors, on the CPU when not capturable) moved to the parameters'
    device. SGD needs nothing (float lr, no step count). No-op off CUDA."""
    if device.type != "cuda":
        return
    for opt in _torch_optimizers(optimizer):
        if not any("capturable" in group for group in opt.param_groups):
            continue
        for group in opt.param_groups:
            group["capturable"] = True
            for param in group["params"]:
                state = opt.state.get(param, {})
                for key in ("step", "eta", "mu"):
                    value = state.get(key)
                    if isinstance(value, torch.Tensor) and value.device != param.device:
                        state[key] = value.to(param.device, torch.float32 if key == "step" else value.dtype)


def capture_plan(model: nn.Module, device: torch.device, distributed: bool) -> tuple[bool, Optional[str]]:
    """Whether steps are captured, and if not, why (one line for the log; None when captured).

    Off CUDA the static-buffer step runs eagerly (the CPU tests' path); under DDP and for a model
    class with ``graph_capturable = False`` capture is not attempted."""
    if device.type != "cuda":
        return False, (f"train.cuda_graphs: no CUDA device ({device.type}): the static-buffer step runs "
                       f"eagerly (same results as without the flag, no speed-up)")
    if distributed:
        return False, "train.cuda_graphs: not captured under torchrun (DistributedDataParallel); steps run eagerly"
    if not getattr(type(model), "graph_capturable", True):
        name = getattr(model, "name", type(model).__name__)
        return False, (f"train.cuda_graphs: model {name!r} has host syncs in its step (graph_capturable = False); "
                       f"steps run eagerly")
    return True, None


class StaticStep:
    """One static shape (segment length, state layout, gold spans) and lr: its buffers, its body and,
    on CUDA, its graph.

    ``__call__(inputs [B, T], targets [B, T], state, gold [B, T, m] | None)`` copies them into the
    buffers, runs (or replays) one optimiser step and returns ``(loss, cross_entropy, new_state)``:
    0-dim tensors and the state after the segment (tensors owned by the step: valid until its next
    call, which is when the trainer has copied them in again).
    """

    def __init__(self, owner: "StaticSteps", optimizer, params: list[nn.Parameter], inputs: torch.Tensor,
                 targets: torch.Tensor, state: Any, gold: Optional[torch.Tensor], capture: bool):
        self.owner, self.optimizer, self.params = owner, optimizer, params
        self.inputs = torch.empty_like(inputs, memory_format=torch.contiguous_format)
        self.targets = torch.empty_like(targets, memory_format=torch.contiguous_format)
        self.gold = None if gold is None else torch.empty_like(gold, memory_format=torch.contiguous_format)
        self.state = map_state(state, lambda t: torch.empty_like(t, memory_format=torch.contiguous_format))
        self.lrs = _group_lrs(optimizer)
        self.capture = capture
        self.calls = 0
        self.graph = None
        self.outputs: Optional[tuple] = None
        self.graph_grads: list[Optional[torch.Tensor]] = []

    # ----------------------------------------------------------------------------------------- body

    def body(self) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """One optimiser step on the buffers, without a host sync: what the graph records. The same
        operations, in the same order, as the trainer's eager step."""
        owner = self.owner
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(owner.device.type, dtype=torch.bfloat16, enabled=owner.autocast,
                            cache_enabled=False if self.capture else None):
            loss, cross_entropy, new_state = owner.loss_module(self.inputs, self.targets, self.state, self.gold)
        loss.backward()
        clip_gradients(self.optimizer, self.params, owner.clip)
        self.optimizer.step()
        return loss.detach(), cross_entropy, detach_state(new_state)

    def copy_in(self, inputs, targets, state, gold) -> None:
        self.inputs.copy_(inputs)
        self.targets.copy_(targets)
        if self.gold is not None:
            self.gold.copy_(gold)
        _copy_tree(self.state, state)

    # --------------------------------------------------------------------------------------- running

    def __call__(self, inputs, targets, state, gold=None):
        self.copy_in(inputs, targets, state, gold)
        self.calls += 1
        if not (self.capture and self.owner.capture):
            return self.body()
        if self.graph is None and self.calls <= self.owner.warmup:
            return self._warm_up()
        if self.graph is None:
            try:
                self.graph, self.outputs = self.owner.capture_fn(self)
            except Exception as err:  # noqa: BLE001 - any capture failure falls back to eager
                self.graph, self.outputs = None, None
                self.owner.capture_failed(err)
                return self.body()
            # The gradients the capture allocated (in the graph's pool) are the ones it replays into.
            self.graph_grads = [p.grad for p in self.params]
        self.graph.replay()
        for param, grad in zip(self.params, self.graph_grads):
            param.grad = grad
        return self.outputs

    def _warm_up(self):
        """An eager step on a side stream (torch's recipe before capture); synchronised after, so that
        tensors made on the side stream are safe on the main one (only ``warmup`` steps per shape)."""
        if self.owner.device.type != "cuda":
            return self.body()
        side = torch.cuda.Stream(self.owner.device)
        side.wait_stream(torch.cuda.current_stream(self.owner.device))
        with torch.cuda.stream(side), warnings.catch_warnings():
            # Adam/ASGD built capturable warn when stepped outside a capture: expected during warm-up.
            warnings.filterwarnings("ignore", message=".*capturable=True.*")
            outputs = self.body()
        torch.cuda.current_stream(self.owner.device).wait_stream(side)
        torch.cuda.synchronize(self.owner.device)
        return outputs


def capture_cuda_graph(step: StaticStep):
    """Record ``step.body()`` into a new CUDA graph (nothing runs: the caller replays it)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step.body()
    return graph, outputs


class StaticSteps:
    """The trainer's cache of :class:`StaticStep` objects, keyed by static shape.

    ``step(optimizer, params, inputs, targets, state, gold)`` -> ``(loss, cross_entropy, new_state)``.
    A new optimiser object (ASGD switch / restart) drops every cached step; a new lr for a shape
    rebuilds that shape's step. ``note`` prints one line (why steps are not captured, or that a
    capture failed).
    """

    def __init__(self, loss_module: nn.Module, model: nn.Module, clip: Optional[float], device: torch.device,
                 autocast: bool = False, distributed: bool = False, note: Callable[[str], None] = print,
                 warmup: int = WARMUP_STEPS):
        self.loss_module, self.clip, self.device, self.autocast = loss_module, clip, device, autocast
        self.capture, reason = capture_plan(model, device, distributed)
        self.note, self.warmup = note, warmup
        self.capture_fn: Callable[[StaticStep], tuple] = capture_cuda_graph
        self.steps: dict[Any, StaticStep] = {}
        self.optimizer = None
        self.builds = 0  # StaticStep objects made (tests read it)
        if reason:
            note(reason)

    def invalidate(self) -> None:
        """Drop every cached step (and its graph and memory pool)."""
        self.steps.clear()

    def capture_failed(self, err: BaseException) -> None:
        self.capture = False
        self.invalidate()
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        self.note(f"train.cuda_graphs: capturing the training step failed ({type(err).__name__}: {first[:160]}); "
                  f"steps run eagerly from here")

    def step(self, optimizer, params: list[nn.Parameter], inputs: torch.Tensor, targets: torch.Tensor,
             state: Any, gold: Optional[torch.Tensor] = None):
        if optimizer is not self.optimizer:
            self.invalidate()
            if self.capture:
                prepare_optimizer(optimizer, self.device)
            self.optimizer = optimizer
        key = (tuple(inputs.shape), tuple(targets.shape), None if gold is None else tuple(gold.shape),
               state_signature(state))
        static = self.steps.get(key)
        if static is None or static.lrs != _group_lrs(optimizer):
            static = StaticStep(self, optimizer, params, inputs, targets, state, gold, capture=self.capture)
            self.steps[key] = static
            self.builds += 1
        return static(inputs, targets, state, gold)
