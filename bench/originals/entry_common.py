"""What the ``bench_entry.py`` files share; ``bench/originals/prepare.py`` copies it next to each of them.

``TINY`` (``INDUCE_BENCH_TINY=1``): the entries build tiny models, a quick check that they run.
"""
import os

import torch

VOCAB = 10_000
TINY = os.environ.get("INDUCE_BENCH_TINY") == "1"


class RandomBatches:
    """Time-major ``[bptt + 1, batch]`` batches of random token ids, as the original loops read them, drawn
    up front (8 of them, used in turn) so that a timed step holds only the training work, as for ours."""

    def __init__(self, batch: int, bptt: int, device: torch.device, count: int = 8):
        self.batches = [torch.randint(0, VOCAB, (bptt + 1, batch), device=device) for _ in range(count)]
        self.used = 0

    def next(self) -> tuple:
        """``(inputs [bptt, batch], flat targets [bptt * batch])``."""
        tokens = self.batches[self.used % len(self.batches)]
        self.used += 1
        return tokens[:-1], tokens[1:].reshape(-1)


class RandomSentences:
    """Batch-major ``[batch, length]`` batches of random token ids, every sentence ``length`` words long (the
    PCFG entries and ``bench/pcfg_models.py``'s own step), drawn up front from a generator seeded with 0 (8 of
    them, used in turn), so that a timed step holds only the training work."""

    def __init__(self, batch: int, length: int, device: torch.device, count: int = 8):
        generator = torch.Generator().manual_seed(0)
        self.batches = [torch.randint(0, VOCAB, (batch, length), generator=generator).to(device)
                        for _ in range(count)]
        self.lengths = torch.full((batch,), length, dtype=torch.long, device=device)
        self.used = 0

    def next(self) -> tuple:
        """``(tokens [batch, length], lengths [batch])``."""
        tokens = self.batches[self.used % len(self.batches)]
        self.used += 1
        return tokens, self.lengths


def awd_loss(criterion, decoder, output, targets, rnn_hs, dropped_rnn_hs, alpha: float = 2.0, beta: float = 1.0):
    """The loss of the training loop ON-LSTM's and PaLM's ``main.py`` keep from AWD-LSTM: the split
    cross-entropy of the tied decoder, AR (``alpha`` x mean square of the dropped last-layer output) and TAR
    (``beta`` x mean square of the raw last-layer output's step differences)."""
    loss = criterion(decoder.weight, decoder.bias, output, targets)
    loss = loss + alpha * dropped_rnn_hs[-1].pow(2).mean()
    return loss + beta * (rnn_hs[-1][1:] - rnn_hs[-1][:-1]).pow(2).mean()
