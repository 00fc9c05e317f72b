"""The trainer–objective seam: a family with its own training objective plugs in through
:func:`induce.training.objectives.register_objective` alone, owns its data, batching state and loss, keeps its
own state in ``last`` and resumes exactly; the trainer holds no attribute but those it declares; the
optimiser step is written once.

The family (``test-windows``) is a toy: a bigram model (embedding, dropout, output layer) trained on
fixed windows of the token stream in an order drawn each epoch from the objective's own generator, seeded
once per run. That order cannot be recomputed from the loop state, so a resume is exact only if the
objective's :meth:`~induce.training.objectives.Objective.state_dict` reaches the checkpoint and comes back.
"""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np
import pydantic
import pytest
import torch
import torch.nn.functional as F
from rich.console import Console
from torch import nn

from induce.config import load_config
from induce.errors import InduceError
from induce.models.base import SENTENCE_LEVEL, LanguageModel, ModelConfig, TrainingObjective
from induce.models.registry import _REGISTRY, register
from induce.training import batching, load_checkpoint
from induce.training.objectives import Batch, Objective, RunData, SentenceLevel, objective_class, register_objective
from induce.training.state import LoopState
from induce.training.trainer import TIMING_FIELDS, Trainer, TrainingInterrupted, resume, train

from helpers import REPO, make_corpus

FAMILY = "test-windows"
QUIET = Console(quiet=True)
pytestmark = pytest.mark.usefixtures("one_thread")
WINDOWS = TrainingObjective("test: shuffled windows of the token stream")
WIDTH = 4


class WindowConfig(ModelConfig):
    emb_size: int = pydantic.Field(6, gt=0)


class WindowModel(LanguageModel):
    """A bigram model: ``logits [B, W, V]`` of the next token from the embedding of this one (dropout between)."""

    name: ClassVar[str] = FAMILY
    description: ClassVar[str] = "test-only bigram model trained on shuffled windows"
    objective = WINDOWS
    Config = WindowConfig

    def __init__(self, vocab_size: int, config: Optional[WindowConfig] = None):
        super().__init__()
        self.config = config or WindowConfig()
        self.embedding = nn.Embedding(vocab_size, self.config.emb_size)
        self.dropout = nn.Dropout(0.3)
        self.out = nn.Linear(self.config.emb_size, vocab_size)

    def window_logits(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(self.embedding(inputs)))


class WindowLoss(nn.Module):
    """``forward(inputs [B, W], targets [B, W]) -> (mean cross-entropy, summed cross-entropy (detached))``."""

    def __init__(self, model: WindowModel):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor):
        logits = self.model.window_logits(inputs)
        summed = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum")
        return summed / targets.numel(), summed.detach()


def windows(ids: torch.Tensor) -> torch.Tensor:
    """``[n, WIDTH + 1]``: consecutive windows of a stream, each overlapping the next by one token."""
    return ids.unfold(0, WIDTH + 1, WIDTH)


@register_objective(WINDOWS)
class ShuffledWindows(Objective):
    """Batches of ``data.batch_size`` windows in an order drawn at each epoch's start from ``self.rng``."""

    def __init__(self, data: RunData):
        self.model, self.device = data.model, data.device
        self.batch_size = data.config.data.batch_size
        self.train = windows(batching.stream_ids(data.corpus.lm_sentences("train"), data.vocab)).to(data.device)
        self.valid = windows(batching.stream_ids(data.corpus.lm_sentences("valid"), data.vocab)).to(data.device)
        self.rng = np.random.default_rng(data.config.train.seed + 7)
        self.order: Optional[torch.Tensor] = None
        self.order_epoch = 0
        self.loss_module = WindowLoss(self.model)

    def _order(self, epoch: int) -> torch.Tensor:
        if self.order_epoch != epoch:
            self.order, self.order_epoch = torch.from_numpy(self.rng.permutation(len(self.train))), epoch
        return self.order

    def next_batch(self, loop: LoopState) -> Optional[Batch]:
        order = self._order(loop.epoch)
        start = loop.position * self.batch_size
        if start >= len(order):
            return None
        rows = self.train[order[start : start + self.batch_size]]
        loop.position += 1
        return Batch((rows[:, :-1], rows[:, 1:]), rows[:, 1:].numel())

    def after_step(self, loop: LoopState, batch: Batch, outputs: tuple) -> torch.Tensor:
        return outputs[1].double()

    def batches_per_epoch(self, epoch: int) -> int:
        return math.ceil(len(self.train) / self.batch_size)

    def probe_loss(self) -> torch.Tensor:
        return WindowLoss(self.model)(self.train[:2, :-1], self.train[:2, 1:])[0]

    @torch.no_grad()
    def validate(self) -> float:
        was_training = self.model.training
        self.model.eval()
        try:
            return float(WindowLoss(self.model)(self.valid[:, :-1], self.valid[:, 1:])[0])
        finally:
            self.model.train(was_training)

    def describe(self, epoch: int) -> str:
        return f"an epoch reads {len(self.train)} windows of {WIDTH} tokens in a shuffled order"

    def tokens_per_epoch(self) -> int:
        return len(self.train) * WIDTH

    def state_dict(self):
        tensors = {} if self.order is None else {"order": self.order}
        return tensors, {"rng": self.rng.bit_generator.state, "order_epoch": self.order_epoch}

    def load_state_dict(self, tensors, state):
        self.rng.bit_generator.state = state["rng"]
        self.order, self.order_epoch = tensors.get("order"), state["order_epoch"]


@pytest.fixture(scope="module")
def family():
    register(WindowModel)
    yield WindowModel
    _REGISTRY.pop(FAMILY)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=30, valid=4, test=2)


def config(corpus, *extra):
    return load_config(FAMILY, overrides=["data.batch_size=5", "optim.optimizer=adam", "optim.lr=0.05",
                                          "optim.asgd=never", "train.device=cpu", "train.seed=3", "train.epochs=2",
                                          "train.log_interval=2", "train.dev_f1=false", f"data.corpus={corpus}",
                                          *extra])


def metrics(run: Path) -> list[dict]:
    timing = TIMING_FIELDS
    return [{k: v for k, v in json.loads(line).items() if k not in timing}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


def same_weights(a: Path, b: Path) -> bool:
    x, _ = load_checkpoint(a / "last")
    y, _ = load_checkpoint(b / "last")
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x if k.startswith(("model.", "optim.")))


def interrupted_run(cfg, run: Path, at: tuple[int, int]) -> None:
    def interrupt(trainer, epoch, batch):
        if (epoch, batch) == at:
            trainer.interrupt_requested = True

    with pytest.raises(TrainingInterrupted):
        train(cfg, run, console=QUIET, progress=False, on_batch=interrupt)


def test_a_family_with_its_own_objective_trains_and_resumes_exactly(tmp_path, family, corpus):
    cfg = config(corpus)
    straight = tmp_path / "straight"
    train(cfg, straight, console=QUIET, progress=False)
    assert len(metrics(straight)) == 2 and metrics(straight)[1]["train_loss"] < metrics(straight)[0]["train_loss"]

    stopped = tmp_path / "stopped"
    interrupted_run(cfg, stopped, (2, 2))
    tensors, meta = load_checkpoint(stopped / "last")
    assert meta["objective"]["order_epoch"] == 2 and "objective.order" in tensors  # the objective's own state
    resume(stopped, console=QUIET, progress=False)
    assert same_weights(straight, stopped) and metrics(straight) == metrics(stopped)


def test_the_objectives_state_is_what_makes_the_resume_exact(tmp_path, family, corpus, monkeypatch):
    """Without its state the resumed objective draws another order for the rest of epoch 2: the run differs."""
    cfg = config(corpus)
    train(cfg, tmp_path / "straight", console=QUIET, progress=False)
    interrupted_run(cfg, tmp_path / "stopped", (2, 2))
    monkeypatch.setattr(ShuffledWindows, "load_state_dict", lambda self, tensors, state: None)
    resume(tmp_path / "stopped", console=QUIET, progress=False)
    assert not same_weights(tmp_path / "straight", tmp_path / "stopped")


def test_the_trainer_holds_only_the_attributes_it_declares(tmp_path, family, corpus):
    """Setup, objective and loop write nothing onto the trainer beyond what ``__init__`` declares: the run's
    components live in ``trainer.parts``."""
    trainer = Trainer(config(corpus, "train.epochs=1"), tmp_path / "run", console=QUIET, progress=False)
    declared = set(vars(trainer))
    trainer.run()
    assert set(vars(trainer)) == declared
    assert isinstance(trainer.parts.objective, ShuffledWindows) and trainer.parts.objective.order_epoch == 1


def test_an_objective_without_an_implementation_and_a_second_implementation_are_errors():
    with pytest.raises(InduceError, match="no implementation is registered.*register_objective"):
        objective_class(TrainingObjective("nobody implements this"))
    assert objective_class(SENTENCE_LEVEL) is SentenceLevel
    with pytest.raises(InduceError, match="registered for it already"):
        register_objective(SENTENCE_LEVEL)(ShuffledWindows)
    assert objective_class(SENTENCE_LEVEL) is SentenceLevel


def step_calls(path: Path) -> list[str]:
    """``function: call`` of every optimiser step, backward pass and gradient clipping in a module."""
    found = []

    def visit(node, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = f"{where}.{child.name}" if isinstance(child, (ast.FunctionDef, ast.ClassDef)) else where
            if isinstance(child, ast.Call):
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
                optimiser = receiver.lower().endswith(("optimizer", "optimiser"))
                if (name in ("step", "zero_grad") and optimiser) or name in ("clip_gradients", "clip_grad_norm_"):
                    found.append(f"{here.lstrip('.')}: {ast.unparse(func)}")
            visit(child, here)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_the_optimiser_step_is_written_once():
    """Zero-grad, clipping and the optimiser's step are called in ``optimiser_step`` only (and inside the
    clipping helper and the scorer split optimiser, which pass them on to their parts); the eager,
    graph-captured and benchmark steps all call it."""
    calls = {path.name: step_calls(path) for path in sorted((REPO / "induce" / "training").glob("*.py"))}
    allowed = ("optimiser_step:", "clip_gradients:", "ScorerSplitOptimizer.")
    outside = {name: [call for call in found if not call.startswith(allowed)] for name, found in calls.items()}
    outside = {name: found for name, found in outside.items() if found}
    assert not outside, outside
    assert any(call.startswith("optimiser_step:") for call in calls["optim.py"])
    for name in ("graphs.py", "benchmark.py", "trainer.py"):
        source = (REPO / "induce" / "training" / name).read_text(encoding="utf-8")
        assert "optimiser_step(" in source or "optimisation.step(" in source, name
