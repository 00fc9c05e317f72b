"""One training step of the original PaLM (Noahs-ARK/PaLM) for ``bench/models.py --external``.

Not part of the toolkit: ``bench/originals/prepare.py`` copies this file next to the patched original
modules (``model.py``, ``span_parser.py``, ``rrnn.py``, ``weight_drop.py``, ``splitcross.py``, ...),
which it imports. The stored ``main.py`` does not run as released (``train.sh`` passes flags its
``argparser.py`` does not define), so the step is rebuilt from its ``train()``: one iteration on
random token ids (vocabulary 10,000) with the sequence length fixed at ``bptt`` (learning-rate
rescale 1): LSTM state and span memory detached, forward, SplitCrossEntropyLoss, AR 2 / TAR 1, the
LM's parameters clipped at 0.25 and stepped by SGD lr 30 (weight decay 1.2e-6), the span scorer's
(``_att_``) parameters clipped at 1.0 and stepped by their own Adam (lr 1e-3, weight decay 1.2e-6),
as ``main.py`` does before its ASGD switch.

Sizes: ``train.sh`` (emb 400, 3 x 1120, m = 10, rational RNN 400 = 2 x 200, context 400, scoring MLP
100, dropout 0.4 / 0.4 / 0.3 / 0.1, wdrop 0.5, tied), batch 20 x bptt 70. ``INDUCE_BENCH_TINY=1``:
tiny sizes (emb 16, hidden 16, rational RNN 8, MLP 8, m = 4, batch 4 x 8), a quick check that the
entry runs; its numbers mean nothing.
"""
from types import SimpleNamespace

import torch

import model as original_model
from splitcross import SplitCrossEntropyLoss
from utils import repackage_hidden
from entry_common import TINY, VOCAB, RandomBatches, awd_loss


def train_sh_args() -> SimpleNamespace:
    """The model arguments of ``train.sh`` (``argparser.py`` names; ``tie_weights`` is forced on there)."""
    if TINY:
        sizes = dict(emsize=16, nhid=16, rrnn_size=8, cxtsize=8, parser_size=8, max_span_length=4)
    else:
        sizes = dict(emsize=400, nhid=1120, rrnn_size=400, cxtsize=400, parser_size=100, max_span_length=10)
    return SimpleNamespace(nlayers=3, dropout=0.4, dropouti=0.4, dropouth=0.3, dropoute=0.1, wdrop=0.5,
                           tie_weights=True, **sizes)


class OriginalStep:
    """The original model, criterion and both optimisers; ``step()`` is one training iteration."""

    def __init__(self, device: torch.device):
        args = train_sh_args()
        self.batch, self.bptt = (4, 8) if TINY else (20, 70)
        torch.manual_seed(0)
        self.model = original_model.RNNModel(ntoken=VOCAB, args=args).to(device)
        self.criterion = SplitCrossEntropyLoss(args.emsize, splits=[], verbose=False).to(device)
        named = list(self.model.named_parameters()) + list(self.criterion.named_parameters())
        self.params = [p for n, p in named if "_att_" not in n]
        self.parser_params = [p for n, p in named if "_att_" in n]
        self.optimizer = torch.optim.SGD(self.params, lr=30.0, weight_decay=1.2e-6)
        self.parser_optimizer = torch.optim.Adam(self.parser_params, lr=1e-3, weight_decay=1.2e-6)
        self.hidden = self.model.init_hidden(self.batch)
        self.c_hidden = self.model.init_c_hidden(self.batch)
        self.batches = RandomBatches(self.batch, self.bptt, device)

    def step(self) -> None:
        data, targets = self.batches.next()
        self.model.train()
        self.hidden = repackage_hidden(self.hidden)
        self.c_hidden = repackage_hidden(self.c_hidden)
        self.optimizer.zero_grad()
        self.parser_optimizer.zero_grad()
        output, _, self.hidden, self.c_hidden, rnn_hs, dropped_rnn_hs = self.model(
            data, self.hidden, self.c_hidden, return_h=True)
        loss = awd_loss(self.criterion, self.model.decoder, output, targets, rnn_hs, dropped_rnn_hs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 0.25)
        self.optimizer.step()
        torch.nn.utils.clip_grad_norm_(self.parser_params, 1.0)
        self.parser_optimizer.step()


def make_trainer(device="cpu"):
    return OriginalStep(torch.device(device))
