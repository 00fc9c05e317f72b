"""One training step of the original ON-LSTM (yikangshen/Ordered-Neurons) for ``bench/models.py --external``.

Not part of the toolkit: ``bench/originals/prepare.py`` copies this file next to the patched original
modules (``model.py``, ``ON_LSTM.py``, ``splitcross.py``, ...), which it imports. One step = one
iteration of the loop in the original ``main.py`` ``train()``, on random token ids (vocabulary
10,000), with the sequence length fixed at ``bptt`` (the original samples it around ``bptt`` and
rescales the learning rate by ``seq_len / bptt``, which is 1 there): hidden state detached, forward,
SplitCrossEntropyLoss (no splits below 75,000 words), AR 2 on the dropped last-layer output and TAR 1
on the raw one, clipping at 0.25 over model and criterion parameters, SGD lr 30, weight decay 1.2e-6.

Sizes: the README's PTB command (emb 400, 3 x 1150, chunk 10, dropout 0.45 / 0.3 / 0.5 / 0.1,
wdrop 0.45, tied), batch 20 x bptt 70. ``INDUCE_BENCH_TINY=1``: tiny sizes (emb 16, hidden 16,
chunk 4, batch 4 x 8), a quick check that the entry runs; its numbers mean nothing.
"""
import torch

import model as original_model
from splitcross import SplitCrossEntropyLoss
from utils import repackage_hidden
from entry_common import TINY, VOCAB, RandomBatches, awd_loss


class OriginalStep:
    """The original model, criterion and optimiser; ``step()`` is one training iteration."""

    def __init__(self, device: torch.device):
        emb, hidden, chunk = (16, 16, 4) if TINY else (400, 1150, 10)
        self.batch, self.bptt = (4, 8) if TINY else (20, 70)
        torch.manual_seed(0)
        self.model = original_model.RNNModel("LSTM", VOCAB, emb, hidden, chunk, 3, dropout=0.45, dropouth=0.3,
                                             dropouti=0.5, dropoute=0.1, wdrop=0.45, tie_weights=True).to(device)
        self.criterion = SplitCrossEntropyLoss(emb, splits=[], verbose=False).to(device)
        self.params = list(self.model.parameters()) + list(self.criterion.parameters())
        self.optimizer = torch.optim.SGD(self.params, lr=30.0, weight_decay=1.2e-6)
        self.hidden = self.model.init_hidden(self.batch)
        self.batches = RandomBatches(self.batch, self.bptt, device)

    def step(self) -> None:
        data, targets = self.batches.next()
        self.model.train()
        self.hidden = repackage_hidden(self.hidden)
        self.optimizer.zero_grad()
        output, self.hidden, rnn_hs, dropped_rnn_hs = self.model(data, self.hidden, return_h=True)
        loss = awd_loss(self.criterion, self.model.decoder, output, targets, rnn_hs, dropped_rnn_hs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 0.25)
        self.optimizer.step()


def make_trainer(device="cpu"):
    return OriginalStep(torch.device(device))
