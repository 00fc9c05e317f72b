"""One training step of sustcsonglin/TN-PCFG's N-PCFG, C-PCFG and TN-PCFG for ``bench/pcfg_models.py``.

Not part of the toolkit: ``bench/originals/prepare.py`` copies this file next to the original ``parser/``
package (the modules ``parser.model`` imports: ``parser/model/*.py``, ``parser/pcfgs/*.py``,
``parser/modules/res.py``, ``parser/triton/fn.py``), unchanged. The models are built as the repository's
``get_model`` builds them, from the config's ``model`` section (attribute access, as its ``easydict``
config gives) and a stand-in for its ``DataModule`` (``device``, ``word_vocab`` of 10,000 words); its data
pipeline (fastNLP) is not imported. One step = one iteration of ``CMD.train`` (``parser/cmds/cmd.py``) on
random sentences that are all ``length`` words long: ``optimizer.zero_grad()``, ``model.loss(x)`` with
``x = {"word": [batch, length], "seq_len": [batch]}``, ``backward()``, ``clip_grad_norm_`` at 3
(``train.clip``), ``optimizer.step()`` (``get_optimizer``: Adam lr 1e-3, betas 0.75 / 0.999) and the
``loss.item()`` of its progress bar.

Sizes: ``NeuralPCFG`` and ``CompoundPCFG`` at 30 nonterminals / 60 preterminals, s_dim 256 (C-PCFG: z 64,
w_dim 512, h_dim 512: ``config/cpcfg_nt30_t60_curriculum1.yaml``; the repository's
``config/npcfg_nt30_t60_curriculum0.yaml`` says NT 250 / T 500 despite its name, the N-PCFG here has Kim
et al.'s 30 / 60, as our ``npcfg`` config); ``TNPCFG`` at ``config/tnpcfg_r500_nt250_t500_curriculum0.yaml``
(250 / 500, rank 500, s_dim 256). Their inside passes checkpoint with ``torch.utils.checkpoint`` without
``use_reentrant``, which PyTorch 2.x answers with a warning on every call (silenced here; the default it
warns about, the reentrant variant, is what runs). ``tiny=True`` (or ``INDUCE_BENCH_TINY=1``): 3 / 4 symbols,
rank 4, widths 8, a quick check that the entry runs; its numbers mean nothing.
"""
import warnings
from types import SimpleNamespace

import torch

from parser.model import CompoundPCFG, NeuralPCFG, TNPCFG
from entry_common import TINY, VOCAB, RandomSentences

warnings.filterwarnings("ignore", message="torch.utils.checkpoint: the use_reentrant parameter")

#: the models this code base implements (``bench/pcfg_models.py`` names)
MODELS = ("npcfg", "cpcfg", "tnpcfg")

#: (class, the config's ``model`` section) per model, and the same at tiny sizes
SIZES = {
    "npcfg": (NeuralPCFG, dict(NT=30, T=60, s_dim=256), dict(NT=3, T=4, s_dim=8)),
    "cpcfg": (CompoundPCFG, dict(NT=30, T=60, s_dim=256, w_dim=512, h_dim=512, z_dim=64),
              dict(NT=3, T=4, s_dim=8, w_dim=8, h_dim=8, z_dim=4)),
    "tnpcfg": (TNPCFG, dict(NT=250, T=500, r_dim=500, s_dim=256, word_emb_size=200),
               dict(NT=3, T=4, r_dim=4, s_dim=8, word_emb_size=8)),
}


class OriginalStep:
    """The original model and optimiser; ``step()`` is one iteration of ``CMD.train``."""

    def __init__(self, model: str, batch: int, length: int, device: torch.device, tiny: bool):
        if model not in MODELS:
            raise ValueError(f"sustcsonglin/TN-PCFG has no {model!r} here (timed: {', '.join(MODELS)})")
        cls, sizes, tiny_sizes = SIZES[model]
        self.batch, self.length = batch, length
        torch.manual_seed(0)
        dataset = SimpleNamespace(device=device, word_vocab=range(VOCAB))
        self.model = cls(SimpleNamespace(**(tiny_sizes if tiny else sizes)), dataset).to(device)
        self.model.train()  # CMD.train, once per epoch
        self.optimizer = torch.optim.Adam(params=self.model.parameters(), lr=0.001, betas=(0.75, 0.999))
        self.sentences = RandomSentences(batch, length, device)

    def step(self) -> None:
        words, lengths = self.sentences.next()
        self.optimizer.zero_grad()
        loss = self.model.loss({"word": words, "seq_len": lengths})
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 3.0)
        self.optimizer.step()
        loss.item()


def make_trainer(device="cpu", model="tnpcfg", batch=4, length=20, tiny=None):
    return OriginalStep(model, batch, length, torch.device(device), TINY if tiny is None else tiny)
