"""One training step of harvardnlp/compound-pcfg's N-PCFG and C-PCFG for ``bench/pcfg_models.py``.

Not part of the toolkit: ``bench/originals/prepare.py`` copies this file next to the original ``models.py``
(``CompPCFG``) and ``PCFG.py`` (its inside and Viterbi passes, loops over spans and split points in Python),
which it imports. One step = one iteration of the batch loop of the original ``train.py``, on random
sentences (vocabulary 10,000) that are all ``length`` words long (``train.py`` batches sentences of one
length): ``optimizer.zero_grad()``, ``model(sents, argmax=True)`` (the inside pass for the loss and, as
``train.py`` calls it on every batch, the Viterbi pass and its per-sentence backtrack for the training F1),
``(nll + kl).mean().backward()``, the two ``.item()`` reads of the running sums, ``clip_grad_norm_`` at 3,
``optimizer.step()`` (Adam lr 1e-3, betas 0.75 / 0.999). The F1 bookkeeping against gold trees is left
out (random sentences have none; it is a few set operations per sentence).

Sizes: ``train.py``'s defaults (30 nonterminals, 60 preterminals, state 256, z 64, inference bi-LSTM 512,
word embeddings 512), ``xavier_uniform_`` on every matrix as ``train.py`` does; the N-PCFG is the same
model with ``z_dim = 0`` (the README's ``--z_dim 0``). ``tiny=True`` (or ``INDUCE_BENCH_TINY=1``): 3 / 4
symbols, state 8, z 4, bi-LSTM 8, a quick check that the entry runs; its numbers mean nothing.
"""
import torch
from torch.nn.init import xavier_uniform_

from models import CompPCFG
from entry_common import TINY, VOCAB, RandomSentences

#: the models this code base implements (``bench/pcfg_models.py`` names)
MODELS = ("npcfg", "cpcfg")


class OriginalStep:
    """The original model and optimiser; ``step()`` is one iteration of ``train.py``'s batch loop."""

    def __init__(self, model: str, batch: int, length: int, device: torch.device, tiny: bool):
        if model not in MODELS:
            raise ValueError(f"harvardnlp/compound-pcfg has no {model!r} (it has {', '.join(MODELS)})")
        if tiny:
            sizes = dict(nt_states=3, t_states=4, state_dim=8, h_dim=8, w_dim=8, z_dim=4)
        else:
            sizes = dict(nt_states=30, t_states=60, state_dim=256, h_dim=512, w_dim=512, z_dim=64)
        if model == "npcfg":
            sizes["z_dim"] = 0
        self.batch, self.length = batch, length
        torch.manual_seed(3435)  # train.py's default --seed
        self.model = CompPCFG(vocab=VOCAB, **sizes)
        for param in self.model.parameters():
            if param.dim() > 1:
                xavier_uniform_(param)
        self.model.train()
        self.model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.001, betas=(0.75, 0.999))
        self.sentences = RandomSentences(batch, length, device)
        self.train_nll = self.train_kl = 0.0

    def step(self) -> None:
        sents, _ = self.sentences.next()
        self.optimizer.zero_grad()
        nll, kl, binary_matrix, argmax_spans = self.model(sents, argmax=True)
        (nll + kl).mean().backward()
        self.train_nll += nll.sum().item()
        self.train_kl += kl.sum().item()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 3.0)
        self.optimizer.step()


def make_trainer(device="cpu", model="cpcfg", batch=4, length=20, tiny=None):
    return OriginalStep(model, batch, length, torch.device(device), TINY if tiny is None else tiny)
