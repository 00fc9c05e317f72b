"""The graph-captured training step (``train.cuda_graphs``) against the plain eager step, on CPU.

On CPU a :class:`~induce.training.graphs.StaticStep` runs its body eagerly on its static buffers: the
losses, gradients and weights must equal the trainer's eager step *bit for bit* (same operations in
the same order on copies of the same values; the copies are fresh, aligned allocations like the
eager tensors, so CPU kernels take the same vector paths). The replay plumbing (copy-in, replay,
static outputs, gradients pointed back at the graph's) is checked with a stand-in graph whose
"replay" runs the body; a failing capture (a stand-in that draws random numbers and assigns
gradients before it fails, as a real capture does) falls back to eager with the generator restored.
The default (``train.cuda_graphs: auto``) is off on a CPU and changes nothing there. The real
capture (ON-LSTM, PRPN, PaLM, step by step against the eager step; a real capture failure) is
tested only where CUDA is available (never in CI).
"""
from __future__ import annotations

import json

import pytest
import torch
from rich.console import Console

from induce.config import ConfigError, load_config, load_config_file
from induce.training import batching, load_checkpoint
from induce.training.graphs import StaticSteps, capture_plan, graphs_enabled, prepare_optimizer, state_signature
from induce.training.state import detach_state
from induce.training.trainer import TIMING_FIELDS, Trainer

from helpers import make_corpus

QUIET = Console(quiet=True)
pytestmark = pytest.mark.usefixtures("one_thread")

PALM_TINY = ["model.emb_size=6", "model.hidden_size=8", "model.rrnn_size=4", "model.attention_size=4",
             "model.max_span_length=3"]
TINY = {
    "onlstm": ["model.emb_size=8", "model.hidden_size=8", "model.chunk_size=4"],
    "prpn": ["model.emb_size=6", "model.hidden_size=8", "model.n_slots=3", "model.n_lookback=2", "model.dropoute=0.1"],
    "palm": PALM_TINY,
}
# Every model's dropout on (PRPN's embedding dropout switched on above), variable BPTT in buckets of 2.
COMMON = ["data.batch_size=3", "data.eval_batch_size=2", "data.bptt=6", "data.variable_bptt=true",
          "data.bptt_std=2", "data.min_bptt=2", "data.bptt_bucket=2", "train.dev_f1=false",
          "train.log_interval=2", "train.epochs=2", "train.device=cpu", "train.seed=11"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=24, valid=4, test=2)


def config(model, corpus, *extra):
    return load_config(model, overrides=[*TINY[model], *COMMON, f"data.corpus={corpus}", *extra])


def set_up(cfg, folder):
    """The components of a run (:class:`~induce.training.setup.RunParts`), the model in training mode."""
    trainer = Trainer(cfg, folder, console=QUIET, progress=False)
    trainer._setup()
    trainer.parts.model.train()
    return trainer.parts


def eager_step(parts, inputs, targets, state, gold=None):
    """The trainer's eager step (the run's one optimiser step, without the flag), for step-by-step checks."""
    loss, cross_entropy, new_state = parts.optimisation.step(lambda: parts.loss_module(inputs, targets, state, gold))
    return loss.detach(), cross_entropy, new_state


def segments(parts, n):
    """``n`` (inputs, targets, gold) segments as the trainer draws them (its BPTT-length generator)."""
    cfg, data, position = parts.config, parts.objective.train_data, 0
    for _ in range(n):
        length = batching.next_segment_length(parts.loop.bptt_rng, cfg.data.bptt, cfg.data.bptt_std,
                                              cfg.data.min_bptt, cfg.data.max_bptt_extra, bucket=cfg.data.bptt_bucket)
        if position + length >= data.size(1) - 1:
            position = 0
        inputs, targets = batching.segment(data, position, length)
        gold = parts.objective.train_gold
        gold = None if gold is None else gold[:, position : position + inputs.size(1)]
        yield inputs, targets, gold
        position += inputs.size(1)


def assert_same(a, b):
    """Losses, every weight and every gradient of two runs: equal bit for bit."""
    for (name, pa), pb in zip(a.model.named_parameters(), b.model.parameters()):
        assert torch.equal(pa, pb), name
        assert (pa.grad is None) == (pb.grad is None), name
        if pa.grad is not None:
            assert torch.equal(pa.grad, pb.grad), name


def rng_states(device):
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_rng_states(device, states):
    torch.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state(states[1], device)


def run_pair(corpus, tmp_path, model, n, *extra, capture_fn=None, warmup=None, max_graphs=None):
    """``n`` steps of the eager step and of StaticSteps on the same data and dropout masks (the random
    generators' states are replayed for the second), compared bit for bit after every step. On CUDA the eager
    twin steps a capturable optimiser too: capturable Adam computes its bias corrections on the device, which
    rounds differently from the plain Adam (measured on an H200: PRPN 1.6e-3 apart after 12 steps through that
    alone, on parameters whose gradient is rounding noise), while the captured and eager steps of one optimiser
    agree bit for bit."""
    cfg = config(model, corpus, *extra, "train.cuda_graphs=false")  # plain trainers: the StaticSteps are made here
    a, b = set_up(cfg, tmp_path / "a"), set_up(cfg, tmp_path / "b")
    # the eager twin steps the optimiser the graphs use (capturable on CUDA: its own rounding of Adam)
    prepare_optimizer(a.optimisation.optimizer, a.ctx.device)
    notes = []
    steps = StaticSteps(b.loss_module, b.model, cfg.optim.clip, b.ctx.device, note=notes.append)
    if capture_fn is not None:
        steps.capture, steps.capture_fn = True, capture_fn
    if warmup is not None:
        steps.warmup = warmup
    if max_graphs is not None:
        steps.max_graphs = max_graphs
    for parts in (a, b):
        parts.loop.hidden = parts.model.init_state(parts.objective.train_data.size(0), parts.ctx.device)
    lengths = []
    for inputs, targets, gold in segments(a, n):
        lengths.append(inputs.size(1))
        for parts in (a, b):
            parts.loop.schedule.step_lr(parts.optimisation.optimizer, inputs.size(1) / cfg.data.bptt)
        rng = rng_states(a.ctx.device)
        loss_a, ce_a, a.loop.hidden = eager_step(a, inputs, targets, detach_state(a.loop.hidden), gold)
        rng_after_a = rng_states(a.ctx.device)[1]
        set_rng_states(b.ctx.device, rng)
        loss_b, ce_b, b.loop.hidden = steps.step(b.optimisation.optimizer, b.optimisation.params, inputs, targets,
                                                 detach_state(b.loop.hidden), gold)
        assert torch.equal(loss_a, loss_b) and torch.equal(ce_a, ce_b)
        assert_same(a, b)
        assert state_signature(a.loop.hidden) == state_signature(b.loop.hidden)
        if b.ctx.device.type == "cuda":
            # the CUDA generator advanced as in the eager step (a replay moves it by its graph's draws)
            assert torch.equal(torch.cuda.get_rng_state(b.ctx.device), rng_after_a), "CUDA generator offset differs"
    return a, b, steps, lengths, notes


# --------------------------------------------------------------------------------------------- config


def test_the_flag_is_auto_by_default_and_validated():
    cfg = load_config("onlstm")
    assert cfg.train.cuda_graphs == "auto" and cfg.data.bptt_bucket is None  # the bucket comes with the graphs
    assert load_config("onlstm", overrides=["train.cuda_graphs=true"]).train.cuda_graphs is True
    assert load_config("onlstm", overrides=["train.cuda_graphs=false"]).train.cuda_graphs is False
    with pytest.raises(ConfigError) as err:
        load_config("onlstm", overrides=["train.cuda_graphs=sometimes"])
    assert "train.cuda_graphs" in str(err.value) and "sometimes" in str(err.value)


def test_auto_is_on_exactly_where_the_step_is_captured():
    from induce.models.onlstm.model import ONLSTM

    model = ONLSTM(10, ONLSTM.Config(emb_size=8, hidden_size=8, chunk_size=4))
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # only types are read: no GPU needed
    assert not graphs_enabled("auto", model, cpu, distributed=False)
    assert graphs_enabled("auto", model, cuda, distributed=False)
    assert not graphs_enabled("auto", model, cuda, distributed=True)  # torchrun: no capture, no static steps
    assert graphs_enabled(True, model, cpu, distributed=False)  # forced: the eager twin on CPU
    assert not graphs_enabled(False, model, cuda, distributed=False)


def test_capture_plan_says_why_not():
    from induce.models.onlstm.model import ONLSTM

    model = ONLSTM(10, ONLSTM.Config(emb_size=8, hidden_size=8, chunk_size=4))
    capture, reason = capture_plan(model, torch.device("cpu"), distributed=False)
    assert not capture and "no CUDA device" in reason and "eagerly" in reason
    # The checks below only read types: no GPU needed.
    assert capture_plan(model, torch.device("cuda"), distributed=False) == (True, None)
    capture, reason = capture_plan(model, torch.device("cuda"), distributed=True)
    assert not capture and "torchrun" in reason

    class SyncingONLSTM(ONLSTM):
        graph_capturable = False  # e.g. a forward that calls .item()

    capture, reason = capture_plan(SyncingONLSTM(10, model.config), torch.device("cuda"), distributed=False)
    assert not capture and "'onlstm'" in reason and "host syncs" in reason


# -------------------------------------------------------------------------------- eager equivalence


@pytest.mark.parametrize("model", ["onlstm", "prpn", "palm"])
def test_static_steps_equal_the_eager_step_bit_for_bit(corpus, tmp_path, model):
    a, b, steps, lengths, notes = run_pair(corpus, tmp_path, model, 10)
    assert len(set(lengths)) > 1  # variable BPTT: several buckets were used
    assert notes and "no CUDA device" in notes[0]
    # one StaticStep per static shape (PaLM: the first segment's span memory is None, a shape of its own)
    assert steps.builds == len(steps.steps) >= len(set(lengths))


def test_buffers_are_reused_and_a_new_length_gets_its_own_step(corpus, tmp_path):
    cfg = config("onlstm", corpus, "data.variable_bptt=false")
    parts = set_up(cfg, tmp_path / "t")
    steps = StaticSteps(parts.loss_module, parts.model, cfg.optim.clip, parts.ctx.device, note=lambda m: None)
    params = parts.optimisation.params
    state = parts.model.init_state(3, parts.ctx.device)
    data = parts.objective.train_data
    pointers = None
    for start in (0, 6, 12):
        inputs, targets = batching.segment(data, start, 6)
        _, _, state = steps.step(parts.optimisation.optimizer, params, inputs, targets, detach_state(state))
        (static,) = steps.steps.values()
        now = [static.inputs.data_ptr(), static.targets.data_ptr(), *(t.data_ptr() for hc in static.state for t in hc)]
        assert pointers is None or now == pointers
        pointers = now
        assert torch.equal(static.inputs, inputs)  # the batch was copied in
    assert steps.builds == 1
    inputs, targets = batching.segment(data, 18, 4)
    steps.step(parts.optimisation.optimizer, params, inputs, targets, detach_state(state))
    assert steps.builds == 2 and len(steps.steps) == 2
    assert {key[0] for key in steps.steps} == {(3, 6), (3, 4)}


def test_a_new_optimizer_or_lr_rebuilds_the_steps(corpus, tmp_path):
    cfg = config("onlstm", corpus, "data.variable_bptt=false")
    parts = set_up(cfg, tmp_path / "t")
    steps = StaticSteps(parts.loss_module, parts.model, cfg.optim.clip, parts.ctx.device, note=lambda m: None)
    params, optimizer = parts.optimisation.params, parts.optimisation.optimizer
    state = parts.model.init_state(3, parts.ctx.device)
    inputs, targets = batching.segment(parts.objective.train_data, 0, 6)
    steps.step(optimizer, params, inputs, targets, state)
    first = next(iter(steps.steps.values()))
    steps.step(optimizer, params, inputs, targets, state)
    assert steps.builds == 1 and next(iter(steps.steps.values())) is first
    # a plateau lowers the lr: the shape's step is rebuilt (a graph bakes the lr in)
    for group in optimizer.param_groups:
        group["lr"] *= 0.5
    steps.step(optimizer, params, inputs, targets, state)
    assert steps.builds == 2 and len(steps.steps) == 1 and next(iter(steps.steps.values())) is not first
    # the switch to ASGD builds a new optimiser: every cached step goes
    other_inputs, other_targets = batching.segment(parts.objective.train_data, 6, 4)
    steps.step(optimizer, params, other_inputs, other_targets, state)
    assert len(steps.steps) == 2
    steps._pool = object()  # as a capture leaves it: a new optimiser drops it with the graphs
    parts.optimisation.switch_to_asgd()
    asgd = parts.optimisation.optimizer
    assert isinstance(asgd, torch.optim.ASGD)
    steps.step(asgd, params, inputs, targets, state)
    assert len(steps.steps) == 1 and steps.builds == 4 and steps._pool is None
    assert next(iter(steps.steps.values())).optimizer is asgd


class FakeGraph:
    """Stands in for a CUDA graph on CPU: capture runs nothing and hands out static outputs; each
    replay runs the body and writes its results (outputs and gradients) into the captured tensors,
    which is what a CUDA graph's replay does."""

    captured = 0

    def __init__(self, step):
        self.step = step

    @classmethod
    def capture(cls, step):
        cls.captured += 1
        dummy = torch.zeros(())
        outputs = (dummy.clone(), dummy.clone(), [(h.clone(), c.clone()) for h, c in step.state])
        for param in step.params:  # "allocated during capture"
            param.grad = torch.zeros_like(param)
        return cls(step), outputs

    def replay(self):
        step = self.step
        loss, ce, state = step.body()
        static_loss, static_ce, static_state = step.outputs
        static_loss.copy_(loss)
        static_ce.copy_(ce)
        for (h, c), (nh, nc) in zip(static_state, state):
            h.copy_(nh)
            c.copy_(nc)
        for grad, param in zip(step.graph_grads, step.params):  # the gradients "allocated during capture"
            grad.copy_(param.grad)
        for param in step.params:  # another bucket's capture would leave .grad elsewhere
            param.grad = None


def test_replay_path_equals_eager_with_a_stand_in_graph(corpus, tmp_path):
    FakeGraph.captured = 0
    a, b, steps, lengths, notes = run_pair(corpus, tmp_path, "onlstm", 12, "data.variable_bptt=false",
                                           capture_fn=FakeGraph.capture, warmup=2)
    (static,) = steps.steps.values()
    assert FakeGraph.captured == 1 and static.graph is not None and static.calls == 12
    # from the capture on, the outputs are the same static tensors every step
    assert b.loop.hidden[0][0] is static.outputs[2][0][0]


def test_a_failed_capture_falls_back_to_eager_with_one_note(corpus, tmp_path):
    tries = []

    def failing_capture(step):
        tries.append(step)
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")

    a, b, steps, lengths, notes = run_pair(corpus, tmp_path, "onlstm", 8, capture_fn=failing_capture, warmup=1)
    assert len(tries) == 1 and not steps.capture
    failures = [n for n in notes if "failed" in n]
    assert len(failures) == 1 and "operation not permitted" in failures[0] and "more detail" not in failures[0]


def test_a_capture_that_fails_midway_leaves_the_generator_and_the_steps_as_eager(corpus, tmp_path):
    """A real capture fails after it has run part of the step's Python: its dropout draws moved the
    generator and its backward assigned gradients. The fallback restores the generator, so this step
    and every later one equal the eager step bit for bit (masks included); graphs and pool are dropped."""
    tries = []

    def capture_that_fails_in_backward(step):
        tries.append(step)
        loss, _, _ = step.owner.loss_module(step.inputs, step.targets, step.state, step.gold)  # draws masks
        loss.backward()  # assigns gradients
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    a, b, steps, lengths, notes = run_pair(corpus, tmp_path, "onlstm", 8, capture_fn=capture_that_fails_in_backward,
                                           warmup=1)
    assert len(tries) == 1 and not steps.capture and steps._pool is None
    assert steps.graphs == 0 and len(steps.steps) >= 1  # rebuilt eager-only steps after the failure
    assert sum("failed" in note for note in notes) == 1


def test_a_failure_after_other_captures_drops_them_all(corpus, tmp_path):
    """The first shape is captured (stand-in graph), the second fails: from then on every shape runs
    eagerly, bit for bit the eager step (the captured graph is not replayed again)."""
    calls = []

    def first_captures_then_fails(step):
        calls.append(step)
        if len(calls) == 1:
            return FakeGraph.capture(step)
        raise RuntimeError("capture failed")

    a, b, steps, lengths, notes = run_pair(corpus, tmp_path, "onlstm", 14, capture_fn=first_captures_then_fails,
                                           warmup=1)
    assert len(calls) == 2 and not steps.capture and steps.graphs == 0
    assert len(set(lengths)) > 1


def test_at_most_max_graphs_are_captured_and_the_rest_runs_eagerly(corpus, tmp_path):
    FakeGraph.captured = 0
    a, b, steps, lengths, notes = run_pair(corpus, tmp_path, "onlstm", 16, capture_fn=FakeGraph.capture, warmup=1,
                                           max_graphs=1)
    shapes_seen_twice = {n for n in lengths if lengths.count(n) >= 2}
    assert len(shapes_seen_twice) >= 2  # more shapes would have been captured without the limit
    assert FakeGraph.captured == 1 and steps.graphs == 1 and steps.capture
    assert sum("the most kept" in note for note in notes) == 1


# ------------------------------------------------------------------------------------ whole trainer


def test_the_default_on_cpu_is_the_plain_eager_step(corpus, tmp_path):
    """``train.cuda_graphs: auto`` and an unset ``data.bptt_bucket`` on a CPU: no static steps, no
    bucketing (stored as 0), and the same run as with both off explicitly."""
    default = config("onlstm", corpus, "data.bptt_bucket=null", "train.epochs=1")
    assert default.train.cuda_graphs == "auto" and default.data.bptt_bucket is None
    trainer = Trainer(default, tmp_path / "auto", console=QUIET, progress=False)
    trainer.run()
    assert trainer.parts.static_steps is None and trainer.config.data.bptt_bucket == 0
    saved = load_config_file(tmp_path / "auto" / "config.yaml")
    assert saved.train.cuda_graphs == "auto" and saved.data.bptt_bucket == 0
    off = config("onlstm", corpus, "data.bptt_bucket=0", "train.epochs=1", "train.cuda_graphs=false")
    Trainer(off, tmp_path / "off", console=QUIET, progress=False).run()
    tensors = {name: load_checkpoint(tmp_path / name / "last")[0] for name in ("auto", "off")}
    assert all(torch.equal(tensors["auto"][k], tensors["off"][k]) for k in tensors["off"] if k.startswith("model."))


def test_graphs_on_choose_and_store_a_bucket_and_say_so(corpus, tmp_path):
    """With graphs on (forced on CPU: the eager twin) and ``data.bptt_bucket`` unset, the run takes
    :func:`auto_bucket`'s value, says which lengths it gives, stores it, and a resume keeps it."""
    from io import StringIO

    from induce.training import resume

    out = StringIO()
    cfg = config("onlstm", corpus, "data.bptt_bucket=null", "train.cuda_graphs=true", "train.epochs=1")
    trainer = Trainer(cfg, tmp_path / "run", console=Console(file=out, width=400), progress=False)
    trainer.run()
    bucket = batching.auto_bucket(cfg.data.bptt, cfg.data.bptt_std)
    assert bucket == 3  # bptt 6, std 2: the divisors of 6 up to 3
    assert trainer.config.data.bptt_bucket == bucket
    assert load_config_file(tmp_path / "run" / "config.yaml").data.bptt_bucket == bucket
    text = out.getvalue()
    assert f"data.bptt_bucket={bucket} (automatic)" in text and "3, 6, 9" in text
    shapes = {key[0][1] for key in trainer.parts.static_steps.steps}
    assert shapes and all(length % bucket == 0 for length in shapes)
    resumed = resume(tmp_path / "run", {"epochs": 2}, console=QUIET, progress=False)
    assert resumed.epochs_done == 2
    assert load_config_file(tmp_path / "run" / "config.yaml").data.bptt_bucket == bucket


def test_the_clipped_last_segment_takes_the_eager_step(corpus, tmp_path):
    """Each epoch's last segment, cut at the end of the rows, has a one-off length: the trainer runs
    it with the plain step, every other segment through the static steps."""
    import numpy as np

    cfg = config("onlstm", corpus, "train.cuda_graphs=true", "train.epochs=1", "train.seed=1")  # a clipped end
    trainer = Trainer(cfg, tmp_path / "run", console=QUIET, progress=False)
    static_lengths = []
    original_setup = trainer._setup

    def spy_setup():
        original_setup()
        step = trainer.parts.static_steps.step

        def spy(optimizer, params, inputs, *rest):
            static_lengths.append(inputs.size(1))
            return step(optimizer, params, inputs, *rest)

        trainer.parts.static_steps.step = spy

    trainer._setup = spy_setup
    trainer.run()
    rng, position, length = np.random.default_rng(cfg.train.seed), 0, trainer.parts.objective.train_data.size(1)
    expected, clipped = [], 0
    while position < length - 2:
        drawn = batching.next_segment_length(rng, cfg.data.bptt, cfg.data.bptt_std, cfg.data.min_bptt,
                                             cfg.data.max_bptt_extra, bucket=cfg.data.bptt_bucket)
        taken = min(drawn, length - 1 - position)
        if taken == drawn:
            expected.append(taken)
        else:
            clipped += 1
        position += taken
    assert clipped == 1 and static_lengths == expected


def test_a_run_with_the_flag_equals_a_run_without(corpus, tmp_path):
    """Two epochs through the trainer's hook, the switch to ASGD after epoch 1 included (a new
    optimiser: the cached steps are dropped): identical weights, optimiser tensors and metrics."""
    extra = ["optim.asgd=epoch", "optim.asgd_after_epochs=1"]
    runs = {}
    for flag in ("false", "true"):
        trainer = Trainer(config("onlstm", corpus, *extra, f"train.cuda_graphs={flag}"), tmp_path / flag,
                          console=QUIET, progress=False)
        trainer.run()
        runs[flag] = trainer
    tensors = {flag: load_checkpoint(tmp_path / flag / "last")[0] for flag in runs}
    assert tensors["false"].keys() == tensors["true"].keys()
    different = [k for k in tensors["false"] if k.startswith(("model.", "optim."))
                 and not torch.equal(tensors["false"][k], tensors["true"][k])]
    assert not different
    timing = TIMING_FIELDS
    metrics = {flag: [{k: v for k, v in json.loads(line).items() if k not in timing}
                      for line in (tmp_path / flag / "metrics.jsonl").read_text().splitlines()] for flag in runs}
    assert metrics["false"] == metrics["true"] and metrics["true"][-1]["optimizer"] == "ASGD"
    assert runs["false"].parts.static_steps is None
    graphed = runs["true"].parts
    assert isinstance(graphed.optimisation.optimizer, torch.optim.ASGD)
    assert graphed.static_steps.optimizer is graphed.optimisation.optimizer  # rebuilt for the ASGD phase


# ------------------------------------------------------------------------------------------ CUDA only

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (capture itself)")


@CUDA
@pytest.mark.parametrize("variable", ["false", "true"])
@pytest.mark.parametrize("model", ["onlstm", "prpn", "palm"])
def test_captured_steps_match_the_eager_step_on_cuda(corpus, tmp_path, model, variable):
    """The real capture, step by step against the eager step (as the CPU twins): losses, weights and
    gradients equal bit for bit (both step the same capturable optimiser), the CUDA generator where the
    eager step leaves it, and the steps replayed from graphs in one pool. Variable BPTT (buckets of 2)
    makes several graphs share the pool; PaLM's first segment (no span memory yet) is a shape of its own;
    PaLM also runs its span scorer's own Adam."""
    a, b, steps, lengths, notes = run_pair(corpus, tmp_path, model, 12, "train.device=cuda",
                                           f"data.variable_bptt={variable}", warmup=1)
    assert steps.capture, notes
    replayed = [step for step in steps.steps.values() if step.graph is not None and step.calls > 2]
    assert replayed, "no step was replayed from a graph"
    if variable == "true":
        assert steps.graphs >= 2 and steps._pool is not None
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


@CUDA
@pytest.mark.parametrize("model", ["onlstm", "prpn", "palm"])
def test_two_eager_runs_on_cuda_agree_bit_for_bit(corpus, tmp_path, model):
    """The eager step twice on the same data and dropout masks, no capture: losses, weights and gradients
    equal bit for bit after every step: the device's kernels are deterministic here (no atomic adds whose
    order varies), which the bit-for-bit comparisons of the captured steps rely on."""
    cfg = config(model, corpus, "train.cuda_graphs=false", "train.device=cuda")
    a, b = set_up(cfg, tmp_path / "a"), set_up(cfg, tmp_path / "b")
    for parts in (a, b):
        parts.loop.hidden = parts.model.init_state(parts.objective.train_data.size(0), parts.ctx.device)
    for inputs, targets, gold in segments(a, 12):
        for parts in (a, b):
            parts.loop.schedule.step_lr(parts.optimisation.optimizer, inputs.size(1) / cfg.data.bptt)
        rng = rng_states(a.ctx.device)
        loss_a, _, a.loop.hidden = eager_step(a, inputs, targets, detach_state(a.loop.hidden), gold)
        set_rng_states(b.ctx.device, rng)
        loss_b, _, b.loop.hidden = eager_step(b, inputs, targets, detach_state(b.loop.hidden), gold)
        assert torch.equal(loss_a, loss_b)
        assert_same(a, b)


@CUDA
def test_a_real_capture_failure_on_cuda_falls_back_to_eager(corpus, tmp_path):
    """A host sync inside the captured forward (after its dropout draws) invalidates the capture: the
    step and every later one run eagerly and equal the eager twin bit for bit, the generator where the
    eager step leaves it (run_pair checks it), the current stream the default one again, and new
    allocations work (the later steps allocate)."""
    from induce.training.graphs import capture_cuda_graph

    def capture_with_a_sync(step):
        module = step.owner.loss_module
        forward = module.forward

        def forward_that_syncs(*args):
            out = forward(*args)
            out[0].item()  # a host sync: not permitted while the stream captures
            return out

        module.forward = forward_that_syncs
        try:
            return capture_cuda_graph(step)
        finally:
            del module.forward

    a, b, steps, lengths, notes = run_pair(corpus, tmp_path, "onlstm", 6, "train.device=cuda",
                                           "data.variable_bptt=false", capture_fn=capture_with_a_sync, warmup=1)
    assert not steps.capture and steps.graphs == 0 and len(steps.abandoned) == 1
    assert sum("failed" in note for note in notes) == 1
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


@CUDA
def test_the_default_captures_on_cuda_and_matches_eager(corpus, tmp_path):
    """Whole runs with the default (auto: captured, bucketed) against ``train.cuda_graphs=false`` on
    the same segments, the switch to ASGD included: close per-epoch losses, graphs captured."""
    extra = ["train.device=cuda", "optim.asgd=epoch", "optim.asgd_after_epochs=1", "train.epochs=3"]
    runs = {}
    for flag in ("false", "auto"):
        trainer = Trainer(config("onlstm", corpus, *extra, f"train.cuda_graphs={flag}"), tmp_path / flag,
                          console=QUIET, progress=False)
        runs[flag] = trainer.run()
        if flag == "auto":
            static_steps = trainer.parts.static_steps
            assert static_steps is not None and static_steps.capture, "capture fell back to eager"
            assert static_steps.graphs >= 1
    for eager, graphed in zip(runs["false"].history, runs["auto"].history):
        assert graphed["train_loss"] == pytest.approx(eager["train_loss"], rel=1e-4)
        assert graphed["valid_loss"] == pytest.approx(eager["valid_loss"], rel=1e-4)
