"""The language-model objective and its evaluation: the training loss (CE + AR + TAR + the model's
extra loss), validation cross-entropy, dev-set parsing F1, and where the prepared corpus lies."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from rich.console import Console
from torch import nn

from induce.errors import InduceError

from . import batching

#: Dev-F1 subsets reported each epoch (sentence length limits, words without punctuation).
DEV_LENGTHS = {"wsj10": 10, "wsj40": 40}


class LMLoss(nn.Module):
    """The language model plus its training loss, in one ``forward`` (what DDP wraps).

    forward: ``tokens [B, T]``, ``targets [B, T]``, state, ``gold [B, T, m]`` or None ->
    ``(loss, cross_entropy, new_state)``, where ``loss = CE + alpha * AR + beta * TAR + extra_loss``:
    AR = mean squared last-layer output after dropout, TAR = mean squared difference of consecutive
    last-layer outputs before dropout (Merity et al., 2018).
    """

    def __init__(self, model: nn.Module, alpha: float, beta: float):
        super().__init__()
        self.model, self.alpha, self.beta = model, alpha, beta

    def forward(self, tokens, targets, state, gold=None):
        out = self.model(tokens, state, gold)
        logits = self.model.logits(out.hidden)
        cross_entropy = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
        loss = cross_entropy
        if self.alpha and out.dropped_outputs:
            loss = loss + self.alpha * out.dropped_outputs[-1].float().pow(2).mean()
        if self.beta and out.raw_outputs and out.raw_outputs[-1].size(1) > 1:
            raw = out.raw_outputs[-1].float()
            loss = loss + self.beta * (raw[:, 1:] - raw[:, :-1]).pow(2).mean()
        if out.extra_loss is not None:
            loss = loss + out.extra_loss
        return loss, cross_entropy.detach(), out.state


@torch.no_grad()
def evaluate_lm(model: nn.Module, data: torch.Tensor, bptt: int, device: torch.device) -> float:
    """Mean cross-entropy (nats per token) of ``model`` on ``data [B, L]`` read in ``bptt`` segments.

    Eval mode, the state carried across segments (as in training); one host sync at the end.
    """
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    state = model.init_state(data.size(0), device)
    try:
        for start in range(0, data.size(1) - 1, bptt):
            inputs, targets = batching.segment(data, start, bptt)
            inputs, targets = inputs.to(device), targets.to(device)
            out = model(inputs, state)
            state = out.state
            logits = model.logits(out.hidden)
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), reduction="sum")
            count += targets.numel()
    finally:
        model.train(was_training)
    return total.item() / max(count, 1)


def resolve_corpus(spec: Optional[str], corpora_dir: Path = Path("corpora"), console: Optional[Console] = None) -> Path:
    """The prepared corpus folder of ``data.corpus`` (a folder, a name under ``corpora/``, or None = default)."""
    from induce.data.locate import default_corpus

    if spec is None:
        return default_corpus(corpora_dir=corpora_dir, console=console)
    path = Path(spec)
    if (path / "meta.json").is_file():
        return path
    named = Path(corpora_dir) / spec
    if (named / "meta.json").is_file():
        return named
    raise InduceError(
        f"data.corpus={spec}: no prepared corpus at {path} or {named}; run `induce preprocess` first"
    )


def dev_parse_metrics(model, words: list[list[str]], ids: list[list[int]], gold_trees: list, eos_id: int) -> dict:
    """Parse the dev sentences and score them with :func:`induce.evaluation.score` (Kim et al.'s
    convention: no punctuation, trivial spans not counted, sentence-level F1 in 0-100).

    ``words`` (original words without punctuation), ``ids`` (their LM ids) and ``gold_trees``
    (treebank trees with POS tags) are aligned lists. Returns ``dev_f1`` (all parsed sentences),
    ``dev_f1_wsj10``, ``dev_f1_wsj40``, ``dev_corpus_f1`` and the predicted trees' left/right split
    percentages (``dev_left_split_pct``, ``dev_right_split_pct``); ``{}`` without sentences.
    """
    from induce.evaluation import induce_convention, prepare_gold, score
    from induce.trees.decoders import parse_batch

    if not ids:
        return {}
    predicted = parse_batch(model, ids, words=words, eos_id=eos_id, batch_size=64)
    metrics: dict = {}
    golds = [prepare_gold(tree) for tree in gold_trees]
    for name, limit in (("", None), *DEV_LENGTHS.items()):
        summary = score(golds, predicted, induce_convention(max_length=limit)).to_dict()
        if not summary["n_sentences"]:
            continue
        metrics[f"dev_f1_{name}" if name else "dev_f1"] = summary["sentence_f1"]
        if not name:
            metrics["dev_corpus_f1"] = summary["corpus_f1"]
            metrics["dev_left_split_pct"] = summary["left_split_pct"]
            metrics["dev_right_split_pct"] = summary["right_split_pct"]
    return metrics

