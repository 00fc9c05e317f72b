"""Helpers shared by the test modules; test modules import from here, never from one another
(``test_habits.py`` checks it).

- ``TinyLSTM`` (``tiny-lstm``, registered on import): a test-only language model, so that the trainer,
  inference and the CLI are tested independently of the real models.
- ``make_corpus``: a tiny prepared synthetic treebank corpus; ``train_tiny_run``: a tiny trained run;
  ``toy_profile``: the toy profile of ``induce reproduce``, smaller still.
- ``python_path`` / ``child_env``: the environment for a child ``python -m induce`` process that must
  import this checkout.
- ``script_module``: a script of the repository outside the package (``bench/...``) imported as a module.
- ``full_disk``: make the output writer's text (or binary) files fail as on a full disk (a failure half-way
  through writing a set of outputs).
- ``shapes``, ``internal_nodes``, ``derivations``, ``span_posteriors``: brute-force enumeration of a small
  grammar's derivations (the neural PCFGs' tests).
"""
from __future__ import annotations

import contextlib
import importlib.util
import itertools
import math
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from induce.models.base import LanguageModel, LMOutput, ModelConfig
from induce.models.registry import _REGISTRY, register
from induce.trees.kinds import DISTANCE

STANDIN = "tiny-lstm"
REPO = Path(__file__).resolve().parents[1]


class TinyConfig(ModelConfig):
    emb_size: int = pydantic.Field(8, gt=0)
    hidden_size: int = pydantic.Field(12, gt=0)
    dropout: float = pydantic.Field(0.0, ge=0, lt=1)


class TinyLSTM(LanguageModel):
    """Embedding -> 1-layer LSTM -> dropout -> projection to the embedding size (tied output).

    Distances for parsing come from a linear head on the LSTM states: ``[B, T]``.
    """

    name = STANDIN
    description = "test-only 1-layer LSTM"
    parser_kind = DISTANCE
    Config = TinyConfig

    def __init__(self, vocab_size: int, config: TinyConfig | None = None):
        super().__init__()
        self.config = config or TinyConfig()
        cfg = self.config
        self.embedding = nn.Embedding(vocab_size, cfg.emb_size)
        self.lstm = nn.LSTM(cfg.emb_size, cfg.hidden_size, batch_first=True)
        self.project = nn.Linear(cfg.hidden_size, cfg.emb_size)
        self.distance = nn.Linear(cfg.hidden_size, 1)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def init_state(self, batch_size, device="cpu"):
        """``(h [B, H], c [B, H])``: batch first, as the trainer expects of every state tensor."""
        zeros = torch.zeros(batch_size, self.config.hidden_size, device=device)
        return (zeros, zeros.clone())

    def _lstm(self, tokens, state):
        h, c = state
        out, (h, c) = self.lstm(self.embedding(tokens), (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()))
        return out, (h.squeeze(0), c.squeeze(0))

    def forward(self, tokens, state, gold_spans=None):
        out, state = self._lstm(tokens, state)
        dropped = F.dropout(out, self.config.dropout, self.training)
        hidden = self.project(dropped)
        return LMOutput(hidden=hidden, state=state, raw_outputs=[out], dropped_outputs=[dropped],
                        structure={"distances": self.distance(out).squeeze(-1)})

    def logits(self, hidden):
        return F.linear(hidden, self.embedding.weight, self.bias)

    @torch.no_grad()
    def parse_structure(self, tokens, lengths):
        out, _ = self._lstm(tokens, self.init_state(tokens.size(0), tokens.device))
        return {"distances": self.distance(out).squeeze(-1)}


if STANDIN not in _REGISTRY:
    register(TinyLSTM)


def make_corpus(folder: Path, train: int = 120, valid: int = 20, test: int = 10, seed: int = 0) -> Path:
    """A tiny prepared synthetic treebank corpus (trees + LM text) under ``folder``."""
    from induce.data.preprocess import preprocess_synthetic

    return preprocess_synthetic(Path(folder), "tiny", {"train": train, "valid": valid, "test": test}, seed=seed)


def train_tiny_run(root: Path) -> Path:
    """A tiny trained run of the stand-in model under ``root/runs/tiny`` (one epoch, one thread): ~2 s."""
    from rich.console import Console

    from induce.config import load_config
    from induce.training import train

    corpus = make_corpus(root / "corpora", train=40, valid=5, test=5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = load_config(STANDIN, overrides=[
            f"data.corpus={corpus}", "data.batch_size=4", "data.bptt=8", "optim.asgd=never",
            "train.epochs=1", "train.device=cpu", "train.dev_f1=false",
        ])
        train(cfg, root / "runs" / "tiny", console=Console(quiet=True), progress=False)
    finally:
        torch.set_num_threads(threads)
    return root / "runs" / "tiny"


def toy_profile(folder: Path, **changes) -> Path:
    """A copy of induce/configs/toy/ made even smaller for the tests (20 optimiser steps per model)."""
    import shutil

    import yaml

    from induce.config import CONFIG_DIR

    shutil.copytree(CONFIG_DIR / "toy", folder)
    profile = yaml.safe_load((folder / "profile.yaml").read_text())
    profile.update({"random_init_seeds": 2, "random_init_sentences": 6, "example_sentences": 1,
                    "steps_per_model": 20, **changes})
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    return folder


def python_path(existing: str | None) -> str:
    """This checkout first, then whatever PYTHONPATH the caller had (extended, not replaced)."""
    return os.pathsep.join([str(REPO), *(existing.split(os.pathsep) if existing else [])])


def child_env() -> dict[str, str]:
    """The environment for a child process: one OpenMP thread, this checkout importable first."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": python_path(os.environ.get("PYTHONPATH"))}


def triton_tier_marks() -> list:
    """``pytestmark`` of the Triton-tier test modules: marked ``triton``, skipped when Triton cannot be
    imported, or on a machine without a GPU where ``TRITON_INTERPRET`` was set to something other than 1
    before the module (each module sets it first, before anything imports Triton)."""
    import pytest

    import induce.kernels as K

    reason = K.triton_unavailable_reason()
    return [
        pytest.mark.triton,
        pytest.mark.skipif(reason is not None, reason=f"triton cannot be imported: {reason}"),
        pytest.mark.skipif(
            not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
            reason="no GPU and TRITON_INTERPRET was set to something other than 1 before this module",
        ),
    ]


@contextlib.contextmanager
def script_module(path: Path, name: str) -> Iterator[ModuleType]:
    """The script at ``path`` imported as the module ``name``, in ``sys.modules`` while the block runs (a
    script's dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def shapes(i: int, j: int):
    """Every binary tree over the words ``i .. j-1``: an int for a word, ``(left, right, (i, j))`` otherwise."""
    if j - i == 1:
        yield i
        return
    for k in range(i + 1, j):
        for left, right in itertools.product(list(shapes(i, k)), list(shapes(k, j))):
            yield (left, right, (i, j))


def internal_nodes(tree) -> list:
    return [] if isinstance(tree, int) else [*internal_nodes(tree[0]), *internal_nodes(tree[1]), tree]


def derivations(words, roots, rules, emit):
    """``(log probability, tree)`` of every derivation of ``words``: each tree shape, each nonterminal on each
    internal node and each preterminal on each word. ``roots [NT]``, ``rules [NT, S, S]`` (nonterminals first),
    ``emit [T, V]``: probabilities."""
    nt, n = roots.numel(), len(words)
    for tree in shapes(0, n):
        nodes = internal_nodes(tree)
        for labels in itertools.product(range(nt), repeat=len(nodes)):
            label = {node[2]: a for node, a in zip(nodes, labels)}
            for tags in itertools.product(range(emit.size(0)), repeat=n):
                def symbol(child, tags=tags, label=label):
                    return nt + tags[child] if isinstance(child, int) else label[child[2]]

                p = roots[label[(0, n)]] * math.prod(emit[tags[i], words[i]] for i in range(n))
                for node in nodes:
                    p = p * rules[label[node[2]], symbol(node[0]), symbol(node[1])]
                yield math.log(p), tree


def span_posteriors(found) -> dict:
    """``{(i, j): posterior probability of the span}`` of the spans of two words or more, from every derivation
    ``found`` (``(log probability, tree)``, :func:`derivations`)."""
    log_z = torch.tensor([lp for lp, _ in found], dtype=torch.float64).logsumexp(0).item()
    posterior: dict = {}
    for lp, tree in found:
        for node in internal_nodes(tree):
            posterior[node[2]] = posterior.get(node[2], 0.0) + math.exp(lp - log_z)
    return posterior


def full_disk(monkeypatch, binary: bool = False) -> None:
    """Every text file (``binary=True``: every binary file) the output writers of :mod:`induce.files` open from
    now on fails on its first write with ``ENOSPC``, as on a full disk; files of the other kind are written."""
    import errno

    from induce import files

    real = files._text_or_binary

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.handle, name)

    def opened(fd, is_binary):
        handle = real(fd, is_binary)
        return Full(handle) if is_binary == binary else handle

    monkeypatch.setattr(files, "_text_or_binary", opened)


#: results.json keys that measure time or name the invocation: left out where two reproductions' figures are compared.
RESULTS_TIMING = frozenset({"generated_at", "started_at", "wall_seconds", "pipeline_seconds_so_far", "seconds",
                            "parse_seconds", "train_seconds", "train_cpu_seconds", "eval_seconds", "eval_cpu_seconds",
                            "epoch_seconds", "tokens_per_s", "command", "jobs"})
RESULTS_TOP_LEVEL_TIMING = frozenset({"steps", "step_log"})


def results_figures(out: Path, also_ignore: frozenset = frozenset()) -> dict:
    """``out/results.json`` without its timing fields (:data:`RESULTS_TIMING` and ``also_ignore``, at any depth),
    the output folder's path written OUT."""
    import json

    text = (out / "results.json").read_text().replace(str(out), "OUT")
    ignored = RESULTS_TIMING | also_ignore

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ignored}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return {k: v for k, v in strip(json.loads(text)).items() if k not in RESULTS_TOP_LEVEL_TIMING}
