"""One training step of the original PRPN (yikangshen/PRPN) for ``bench/models.py --external``.

Not part of the toolkit: ``bench/originals/prepare.py`` copies this file next to the patched original
modules (``model_PRPN.py``, ``ParsingNetwork.py``, ``ReadingNetwork.py``, ``PredictNetwork.py``,
``LSTMCell.py``, ``blocks.py``), which it imports. One step = one iteration of the loop in the original
``main_LM.py`` ``train()`` on random token ids (vocabulary 10,000): hidden state detached (its
``repackage_hidden``, which predates ``detach()``, rebuilt here), forward, cross-entropy, clipping at
1.0, Adam lr 0.003, betas (0, 0.999), eps 1e-9, weight decay 1e-6.

Sizes: ``main_LM.py``'s defaults with the README's ``--tied --hard`` (emb 800, 2 x 1200, 15 slots,
look-back 5, resolution 0.1, dropout 0.7 / idropout 0.5 / rdropout 0.5, no res block), batch 64 x
bptt 35. ``INDUCE_BENCH_TINY=1``: tiny sizes (emb 16, hidden 16, 4 slots, look-back 2, batch 4 x 8),
a quick check that the entry runs; its numbers mean nothing.
"""
import torch
import torch.nn as nn

from model_PRPN import PRPN
from entry_common import TINY, VOCAB, RandomBatches


def detach(state):
    if isinstance(state, torch.Tensor):
        return state.detach()
    if isinstance(state, list):
        return [detach(item) for item in state]
    return tuple(detach(item) for item in state)


class OriginalStep:
    """The original model, loss and optimiser; ``step()`` is one training iteration."""

    def __init__(self, device: torch.device):
        emb, hidden, slots, lookback = (16, 16, 4, 2) if TINY else (800, 1200, 15, 5)
        self.batch, self.bptt = (4, 8) if TINY else (64, 35)
        torch.manual_seed(0)
        self.model = PRPN(VOCAB, emb, hidden, 2, nslots=slots, nlookback=lookback, resolution=0.1, dropout=0.7,
                          idropout=0.5, rdropout=0.5, tie_weights=True, hard=True, res=0).to(device)
        self.criterion = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.003, betas=(0.0, 0.999), eps=1e-9,
                                          weight_decay=1e-6)
        self.hidden = self.model.init_hidden(self.batch)
        self.batches = RandomBatches(self.batch, self.bptt, device)

    def step(self) -> None:
        data, targets = self.batches.next()
        self.model.train()
        self.hidden = detach(self.hidden)
        self.optimizer.zero_grad()
        output, self.hidden = self.model(data, self.hidden)
        loss = self.criterion(output.view(-1, VOCAB), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()


def make_trainer(device="cpu"):
    return OriginalStep(torch.device(device))
