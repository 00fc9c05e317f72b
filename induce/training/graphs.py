"""The graph-captured training step (``train.cuda_graphs``, on by default on CUDA) and its eager twin.

On a GPU our recurrent models are launch-bound: one ON-LSTM step launches ~1,400 (fused cell) to
~12,900 (torch tier) small kernels (a Python time loop, per-step cells; ``bench/models.py`` counts them
per model and tier), so the CPU that issues them, not the GPU, sets the pace. A CUDA graph records the
kernels of a whole step once and replays them with one launch.

**The setting.** ``train.cuda_graphs: auto`` (the default) captures where it can: on CUDA, in a single
process (not under torchrun) and for a model class that does not set ``graph_capturable = False``;
everywhere else the trainer's plain eager step runs, exactly as without the key (so on a CPU the
default changes no result and no speed). ``true`` forces the static-buffer step (captured on CUDA,
eager elsewhere: what the CPU tests compare); ``false`` turns it off. :func:`graphs_enabled` decides.

A graph replays fixed kernels on fixed addresses, so a step goes through a :class:`StaticStep`, one
per *static shape* — the segment length ``T``, the layout of the carried state (PaLM's span memory is
``None`` at the start of an epoch) and the gold spans — and per learning rate of the step:

* preallocated buffers for the inputs ``[B, T]``, targets ``[B, T]``, gold spans ``[B, T, m]`` and the
  carried recurrent state; each call copies the batch and the state into them (device copies, no sync);
* the step body, free of host syncs: the trainer's one optimiser step
  (:func:`~induce.training.optim.optimiser_step`: ``zero_grad(set_to_none=True)``, forward + loss
  (:class:`LMLoss`), backward, gradient clipping — torch's ``clip_grad_norm_`` with
  ``error_if_nonfinite=False`` multiplies by the clamped coefficient on the device instead of testing
  it, no sync — and ``optimizer.step()``); the losses and the new state come back as tensors (the
  trainer reads the running loss only at its log intervals).

On CUDA the body runs eagerly for ``warmup`` calls (3, as in torch's notes on CUDA graphs: lazy
initialisation — cuBLAS handles, Triton compilation, the optimiser's state — must not happen during
capture), then is captured and replayed from then on. Warm-ups and captures run on **one side
stream**, the one that captures (:meth:`StaticSteps.capture_stream`): cuDNN keeps its workspaces per stream,
so PRPN's convolution and PaLM's LSTM size theirs during the warm-up on the stream the capture then
uses. Replays run on the current stream. On every other device, and wherever capture is not
possible, the *same* body runs eagerly on the same buffers: that is what the CPU tests compare with
the plain trainer step (bit for bit).

**Segment lengths: the bucketing that comes with it.** Variable BPTT (AWD-LSTM: ``bptt`` with p =
0.95, else ``bptt / 2``, plus ``N(0, bptt_std)``) draws ~46 distinct lengths per epoch at ``bptt =
70``: ~46 graphs. With graphs on and ``data.bptt_bucket`` left unset (``null``), the trainer rounds
the drawn lengths to multiples of :func:`~induce.training.batching.auto_bucket` — the largest divisor
of ``bptt`` not above ``1.5 * bptt_std`` (7 for the papers' 70 and 5) — and stores the value in the
run's ``config.yaml`` (a resumed run keeps it, on any device). Why a divisor: ``bptt`` and ``bptt /
2`` are then bucket values themselves, so both modes of the distribution stay centred where they
were: on ~3,400 draws (5 epochs of PTB at batch 20) the mean length is 67.83 against 67.79 unbucketed
(a bucket of 8 gives 68.33), the standard deviation 9.45 against 9.27, and the steps per epoch 685.2
against 685.6. Why ``1.5 * bptt_std``: wider buckets would visibly coarsen the ``N(bptt, std)`` mode
(a bucket of ``w`` adds variance ``w^2 / 12``: +16% at 7 and std 5). The buckets in practice at 70 / 5:
28, 35, 42 and 56, 63, 70, 77, 84 (8 graphs; the setup prints them once). Nothing is padded or
masked: the stream is still read once, in order, in consecutive segments with the state carried
over; only where segments end changes. The learning rate keeps following the *actual* length
(``base_lr * T / bptt``, :meth:`Schedule.step_lr`), so every token still weighs the same in the
update, as in AWD-LSTM. Each epoch's last segment, clipped at the end of the rows, has a one-off
length: the trainer runs it with the plain eager step rather than capture a graph for one step.
``data.bptt_bucket: 0`` keeps the unbucketed draws (more graphs, up to :data:`MAX_GRAPHS`).

**Memory.** All graphs capture into one memory pool (``torch.cuda.graph_pool_handle()``), so the
activations of a step (freed inside each capture) are shared: the pool holds one step's
activations, plus, per graph, the gradients its capture allocated (one copy of the parameters:
~100 MB for ON-LSTM, 175 MB for PRPN) and its outputs (losses, the carried state). At most
:data:`MAX_GRAPHS` graphs are captured; shapes beyond run the same body eagerly (said once).
Sharing a pool is safe here because every graph's outputs are consumed before any other graph
replays: the trainer sums the losses and copies the returned state into the next step's buffers on
the same stream, and no gradient is read after its step (the optimiser runs inside the graph).

**A capture that fails** (an operation that cannot be captured, a library that syncs) falls back to
eager, for that step and every later one, with the process as an eager run would have it:

* the random generators (CPU, and CUDA's offset) are restored to their state before the capture
  attempt, so the eager step draws the dropout masks it would have drawn without the attempt;
* the capture is ended and the current stream restored even when the capture itself raises (torch's
  ``torch.cuda.graph`` context leaves its capture stream current when ``capture_end`` raises, so
  :func:`capture_cuda_graph` drives ``CUDAGraph.capture_begin`` / ``capture_end`` itself); the
  device is synchronised; every captured graph is dropped with the shared pool's handle (as on every
  :meth:`StaticSteps.invalidate`: a pool whose graphs are gone is not captured into again). The failed
  graph object is kept alive: torch's allocator may still hold its capture filter (recent torch ends
  allocation to the pool only after a successful ``cudaStreamEndCapture``), and new allocations,
  made outside any capture, go to the ordinary pool. What the failed capture allocated stays reserved
  in its pool (torch does not release a pool whose capture did not end): at most one step's memory;
* the optimiser's state is untouched: a capture records kernels without running them, and the
  optimiser's lazily made state (moments, step counts) already exists from the eager warm-up
  steps; the only Python-visible leftovers are the gradients the capture assigned, which the eager
  body's ``zero_grad(set_to_none=True)`` drops.

**Decisions and constraints** (the capture itself is tested only where CUDA is available: see the tests):

* The lr is a constant of each graph, not a device tensor: with variable BPTT the lr of a step is
  ``base_lr * T / bptt`` (:meth:`Schedule.step_lr`), a function of the segment length, i.e. of the
  bucket, so each :class:`StaticStep` has one lr. When it changes (plateau, ASGD switch or restart)
  every step is dropped and rebuilt when next used (all shapes' lrs change together). A tensor lr
  would not help: torch 2.13's foreach SGD turns a tensor lr into a Python number (``alpha=-lr``, a
  host sync), so it would force ``fused=True`` SGD, whose rounding differs from the eager step's.
* Optimisers: Adam and ASGD need ``capturable=True`` on CUDA (step counts and ASGD's eta / mu kept on
  the device); :func:`prepare_optimizer` switches it on for the optimiser the graphs use and moves
  existing step counts to the device (``build_optimizer`` already makes ASGD capturable on CUDA).
  Adam's capturable update computes its bias corrections on the device, so on CUDA it rounds a little
  differently from the eager Adam (SGD and ASGD do not change). A new optimiser object (the
  ASGD switch or restart, a resume) drops every cached step: its state tensors are new.
* Gradients: the body sets them to ``None`` and backward allocates them, so the ones allocated during
  capture live in the pool and every replay writes the same addresses; after a replay each
  parameter's ``.grad`` is pointed back at its graph's gradients (another bucket's capture moved it).
* Dropout and DropConnect masks (``dropconnect``: ``torch.rand_like``; ``locked_dropout`` and
  ``embedded_dropout``: ``bernoulli_``) draw from the default CUDA generator, which torch registers
  with every capture: each replay draws fresh masks (graph-safe philox offsets), none are frozen.
* ``train.amp``: autocast runs with ``cache_enabled=False`` in the graphed step (torch's notes:
  autocast's weight-cast cache must not outlive a capture); only the cache changes, not the values.
* Capture is not attempted under DistributedDataParallel (NCCL capture needs more care than this) or
  for a model class that sets ``graph_capturable = False`` (a forward with host syncs: ``.item()``,
  ``.tolist()``, data-dependent Python branches). If a capture fails anyway, the trainer says so in
  one line and every step from then on runs the same body eagerly.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Optional, Union

import torch
from torch import nn

from .optim import optimiser_step
from .state import detach_state, map_state

#: Eager calls of a new step before it is captured (torch's notes use 3; DDP would need 11).
WARMUP_STEPS = 3
#: Captured graphs kept at most (each holds its gradients; see "Memory" above). Shapes beyond run eagerly.
MAX_GRAPHS = 32


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


def graphs_enabled(setting: Union[bool, str], model: Union[nn.Module, type], device: torch.device,
                   distributed: bool) -> bool:
    """``train.cuda_graphs`` resolved: ``True`` / ``False`` as given; ``"auto"``: on exactly where the
    step would be captured (:func:`capture_plan`), so that elsewhere the plain eager step runs. ``model``: the
    model or its class (the decision needs only the class: a run decides before it builds the model)."""
    if setting == "auto":
        return capture_plan(model, device, distributed)[0]
    return bool(setting)


def capture_plan(model: Union[nn.Module, type], device: torch.device,
                 distributed: bool) -> tuple[bool, Optional[str]]:
    """Whether steps are captured, and if not, why (one line for the log; None when captured).

    Off CUDA the static-buffer step runs eagerly (the CPU tests' path); under DDP and for a model
    class with ``graph_capturable = False`` capture is not attempted."""
    if device.type != "cuda":
        return False, (f"train.cuda_graphs: no CUDA device ({device.type}): the static-buffer step runs "
                       f"eagerly (same results as without the flag, no speed-up)")
    if distributed:
        return False, "train.cuda_graphs: not captured under torchrun (DistributedDataParallel); steps run eagerly"
    cls = model if isinstance(model, type) else type(model)
    if not cls.graph_capturable:
        name = cls.name
        return False, (f"train.cuda_graphs: model {name!r} has host syncs in its step (graph_capturable = False); "
                       f"steps run eagerly")
    return True, None


class StaticStep:
    """One static shape (segment length, state layout, gold spans) and lr: its buffers, its body and,
    on CUDA, its graph.

    ``__call__(inputs [B, T], targets [B, T], state, gold [B, T, m] | None)`` copies them into the
    buffers, runs (or replays) one optimiser step and returns ``(loss, cross_entropy, new_state)``:
    0-dim tensors and the state after the segment (tensors owned by the step: valid until its next
    call, or any other graph's replay, which is after the trainer has copied them in again).
    """

    def __init__(self, owner: StaticSteps, optimizer, params: list[nn.Parameter], inputs: torch.Tensor,
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
        """One optimiser step on the buffers, without a host sync: what the graph records. The trainer's
        eager step (:func:`~induce.training.optim.optimiser_step`), on the static buffers."""
        owner = self.owner
        loss, cross_entropy, new_state = optimiser_step(
            self.optimizer, self.params, owner.clip,
            lambda: owner.loss_module(self.inputs, self.targets, self.state, self.gold),
            owner.device.type, owner.autocast, cast_cache=not self.capture)
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
        owner = self.owner
        if not (self.capture and owner.capture):
            return self.body()
        if self.graph is None and self.calls <= owner.warmup:
            return self._warm_up()
        if self.graph is None:
            if not owner.room_for_graph():
                self.capture = False  # over MAX_GRAPHS: this shape stays eager
                return self.body()
            rng = _rng_states(owner.device)
            try:
                self.graph, self.outputs = owner.capture_fn(self)
            except Exception as err:  # noqa: BLE001 - any capture failure falls back to eager
                self.graph, self.outputs = None, None
                _set_rng_states(owner.device, rng)  # the eager step draws what it would have drawn
                owner.capture_failed(err)
                return self.body()
            # The gradients the capture allocated (in the graph's pool) are the ones it replays into.
            self.graph_grads = [p.grad for p in self.params]
        self.graph.replay()
        for param, grad in zip(self.params, self.graph_grads):
            param.grad = grad
        return self.outputs

    def _warm_up(self):
        """An eager step on the stream that captures (torch's recipe before capture; cuDNN sizes its
        per-stream workspace there); synchronised after, so that tensors made on that stream are safe on
        the current one (only ``warmup`` steps per shape)."""
        owner = self.owner
        if owner.device.type != "cuda":
            return self.body()
        side = owner.capture_stream()
        side.wait_stream(torch.cuda.current_stream(owner.device))
        with torch.cuda.stream(side), warnings.catch_warnings():
            # Adam/ASGD built capturable warn when stepped outside a capture: expected during warm-up.
            warnings.filterwarnings("ignore", message=".*capturable=True.*")
            outputs = self.body()
        torch.cuda.current_stream(owner.device).wait_stream(side)
        torch.cuda.synchronize(owner.device)
        return outputs


def _rng_states(device: torch.device) -> tuple:
    """The CPU generator's state and, on CUDA, ``device``'s generator state (seed and philox offset)."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_states(device: torch.device, states: tuple) -> None:
    cpu, cuda = states
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)


def capture_cuda_graph(step: StaticStep):
    """Record ``step.body()`` into a new CUDA graph in the shared pool, on the stream of the warm-ups
    (nothing runs: the caller replays it).

    ``CUDAGraph.capture_begin`` / ``capture_end`` rather than the ``torch.cuda.graph`` context: when the
    body raises, the capture is ended here (its own error, "capture invalidated", says less than the
    body's and is dropped) and the ``torch.cuda.stream`` block restores the current stream either way.
    A capture that fails also leaves the device's random generator in capture mode (see
    :func:`_release_generator`), which is undone before the error goes up.
    """
    owner = step.owner
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize(owner.device)
    try:
        with torch.cuda.stream(owner.capture_stream()):
            graph.capture_begin(pool=owner.memory_pool())
            try:
                outputs = step.body()
            except BaseException:
                owner.abandoned.append(graph)  # see the module docstring: the allocator may still refer to it
                with contextlib.suppress(RuntimeError):
                    graph.capture_end()
                raise
            try:
                graph.capture_end()
            except BaseException:
                owner.abandoned.append(graph)
                raise
    except BaseException:
        _release_generator(owner.device)
        raise
    return graph, outputs


def _release_generator(device: torch.device) -> None:
    """Give ``device``'s default random generator a fresh copy of its state (same seed and offset).

    ``capture_begin`` puts the generator's state in capture mode and only a *successful* ``capture_end``
    takes it out; after a failed capture every later random draw outside a graph (the eager fallback's
    dropout) would fail with "Offset increment outside graph capture encountered unexpectedly" (seen on
    an H200, torch 2.11). The copy is not in capture mode; the abandoned graph keeps the old one."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    generator = torch.cuda.default_generators[index]
    generator.graphsafe_set_state(generator.clone_state())


class StaticSteps:
    """The trainer's cache of :class:`StaticStep` objects, keyed by static shape.

    ``step(optimizer, params, inputs, targets, state, gold)`` -> ``(loss, cross_entropy, new_state)``.
    A new optimiser object (ASGD switch / restart) or a new lr (a plateau) drops every cached step.
    ``note`` prints one line (why steps are not captured, that a capture failed, that
    :data:`MAX_GRAPHS` is reached). On CUDA all graphs share one memory pool
    (:meth:`memory_pool`) and one side stream for warm-ups and captures (:meth:`capture_stream`).
    """

    def __init__(self, loss_module: nn.Module, model: nn.Module, clip: Optional[float], device: torch.device,
                 autocast: bool = False, distributed: bool = False, note: Callable[[str], None] = print,
                 warmup: int = WARMUP_STEPS, max_graphs: int = MAX_GRAPHS):
        self.loss_module, self.clip, self.device, self.autocast = loss_module, clip, device, autocast
        self.capture, reason = capture_plan(model, device, distributed)
        self.note, self.warmup, self.max_graphs = note, warmup, max_graphs
        self.capture_fn: Callable[[StaticStep], tuple] = capture_cuda_graph
        self.steps: dict[Any, StaticStep] = {}
        self.optimizer = None
        self.builds = 0  # StaticStep objects made (tests read it)
        self.abandoned: list = []  # graphs whose capture failed, kept alive (see the module docstring)
        self._pool = None
        self._stream = None
        self._full_noted = False
        if reason:
            note(reason)

    @property
    def graphs(self) -> int:
        """Captured graphs held now."""
        return sum(step.graph is not None for step in self.steps.values())

    def memory_pool(self):
        """The memory pool every capture shares (made at the first capture)."""
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        return self._pool

    def capture_stream(self) -> torch.cuda.Stream:
        """The side stream of every warm-up and capture (made at the first use)."""
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return self._stream

    def room_for_graph(self) -> bool:
        """Whether one more graph may be captured (:data:`MAX_GRAPHS`); says once when not."""
        if self.graphs < self.max_graphs:
            return True
        if not self._full_noted:
            self._full_noted = True
            self.note(f"train.cuda_graphs: {self.max_graphs} graphs captured (the most kept); further segment "
                      f"lengths run eagerly (fewer lengths: data.bptt_bucket)")
        return False

    def invalidate(self) -> None:
        """Drop every cached step, its graph and the shared pool's handle (the next capture makes a new
        pool). A handle whose graphs are all gone must not be captured into again: torch keeps the pool
        while tensors allocated in it live (the gradients the graphs left in ``.grad``), and a capture
        into a pool that no graph uses any more fails an internal assert of its caching allocator (seen
        on an H200, torch 2.11, at the first capture after the switch to ASGD)."""
        self.steps.clear()
        self._pool = None

    def capture_failed(self, err: BaseException) -> None:
        """After a failed capture: every step runs eagerly from here (the module docstring says what is
        restored); the graphs and the pool's handle are dropped."""
        self.capture = False
        self.invalidate()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
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
        if static is not None and static.lrs != _group_lrs(optimizer):
            # The schedule changed the lr (a plateau): every shape's graph holds an old one (the lr of a
            # shape only changes with the schedule), so all go now, their memory back to the pool.
            self.invalidate()
            static = None
        if static is None:
            static = StaticStep(self, optimizer, params, inputs, targets, state, gold, capture=self.capture)
            self.steps[key] = static
            self.builds += 1
        return static(inputs, targets, state, gold)
