"""Building blocks shared by the grammar families (:mod:`induce.models.pcfg`, :mod:`induce.models.tnpcfg`,
:mod:`induce.models.simple_pcfg`): the residual symbol networks, the compound PCFG's inference network
``q(z | x)`` and its KL term, the xavier initialisation of compound-pcfg, the span structure the parsers read
(span marginals and the Viterbi indicator), and top-down sampling of sentences from a grammar in Chomsky
normal form. Shapes are stated per function; ``B`` sentences of ``N`` words, ``T`` preterminals, ``V`` words.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from induce.errors import InduceError
from induce.kernels import span_marginals
from induce.kernels.pcfg.marginals import score_and_span_gradient


class ResidualLayer(nn.Module):
    """``x + relu(lin2(relu(lin1(x))))`` (compound-pcfg's ``ResidualLayer``; TN-PCFG's ``ResLayer`` is the same
    function). ``[..., D] -> [..., D]``."""

    def __init__(self, dim: int):
        super().__init__()
        self.lin1 = nn.Linear(dim, dim)
        self.lin2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.lin2(F.relu(self.lin1(x)))) + x


def symbol_mlp(in_dim: int, state_dim: int, out_dim: int) -> nn.Sequential:
    """The root and emission networks: Linear ``in_dim -> state_dim``, two residual layers, Linear ``-> out_dim``."""
    return nn.Sequential(nn.Linear(in_dim, state_dim), ResidualLayer(state_dim), ResidualLayer(state_dim),
                         nn.Linear(state_dim, out_dim))


def xavier_init_(module: nn.Module) -> None:
    """``xavier_uniform_`` on every parameter of two dimensions or more (compound-pcfg ``train.py``)."""
    for parameter in module.parameters():
        if parameter.dim() > 1:
            nn.init.xavier_uniform_(parameter)


def lengths_at_least_two(model_name: str, lengths: torch.Tensor) -> None:
    """A ``ValueError`` naming the model when a sentence has fewer than two words (no binary derivation)."""
    if lengths.numel() and int(lengths.min()) < 2:
        raise ValueError(f"{model_name}: a sentence of one word has no binary derivation; the sentence-level "
                         "objective leaves such sentences out (LanguageModel.shortest_sentence)")


class InferenceNetwork(nn.Module):
    """``q(z | x)``: bi-LSTM over the words, max pool over the positions, Linear -> ``(mean, logvar)`` ``[B, z]``.
    ``cfg`` holds ``z_dim``, ``w_dim`` (word embeddings) and ``h_dim`` (each LSTM direction)."""

    def __init__(self, vocab_size: int, cfg):
        super().__init__()
        self.z_dim = cfg.z_dim
        self.embedding = nn.Embedding(vocab_size, cfg.w_dim)
        self.rnn = nn.LSTM(cfg.w_dim, cfg.h_dim, bidirectional=True, batch_first=True)
        self.params = nn.Linear(2 * cfg.h_dim, 2 * cfg.z_dim)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        packed = nn.utils.rnn.pack_padded_sequence(self.embedding(tokens), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        states, _ = self.rnn(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=tokens.size(1),
                                                     padding_value=float("-inf"))
        params = self.params(states.max(1).values)
        return params[:, : self.z_dim], params[:, self.z_dim :]


def gaussian_kl(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """``KL(N(mean, exp(logvar)) || N(0, I))`` summed over the last dimension: ``[B, z] -> [B]``."""
    return (-0.5 * (logvar - mean.pow(2) - logvar.exp() + 1)).sum(-1)


#: Derivations drawn at most for one sentence before :func:`sample_sentence` gives up (every one ran past the
#: length cap: a grammar whose sentences are far longer than the cap).
MAX_DRAWS = 1000


def sampling_probabilities(log_probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """``softmax(log_probs / temperature)`` over the last dimension, in float64 on the CPU (what the sampler
    draws from): ``[..., K] -> [..., K]``."""
    return torch.softmax(log_probs.detach().double().cpu() / temperature, -1)


def without_words(emissions: torch.Tensor, banned) -> torch.Tensor:
    """Emission probabilities ``[T, V]`` with the ``banned`` word ids at zero, each row summing to one again."""
    banned = list(banned)
    if not banned:
        return emissions
    emissions = emissions.clone()
    emissions[:, banned] = 0.0
    return emissions / emissions.sum(-1, keepdim=True)


def sample_sentence(roots: torch.Tensor, children, emissions: torch.Tensor, nt: int, generator: torch.Generator,
                    max_words: int) -> Optional[list[int]]:
    """One derivation of a grammar in Chomsky normal form drawn top-down, leftmost symbol first: a root
    nonterminal from ``roots [NT]``; a nonterminal ``A`` rewritten as ``children(A) -> (B, C)`` (symbols
    ``0 .. NT-1`` nonterminals, ``NT ..`` preterminals); a preterminal ``P`` emits a word from
    ``emissions[P - NT] [V]`` (probabilities, float64). The word ids, or None as soon as the derivation
    holds more than ``max_words`` words (every pending symbol yields one word at least)."""
    def draw(probabilities: torch.Tensor) -> int:
        return int(torch.multinomial(probabilities, 1, generator=generator))

    pending, words = [draw(roots)], []
    while pending:
        symbol = pending.pop()
        if symbol >= nt:
            words.append(draw(emissions[symbol - nt]))
        else:
            left, right = children(symbol)
            pending += [right, left]
        if len(words) + len(pending) > max_words:
            return None
    return words


def draw_sentences(count: int, tables, generator: torch.Generator, max_words: int, model_name: str) -> list[list[int]]:
    """``count`` sentences of :func:`sample_sentence`, each from the ``(roots, children, emissions, nt)`` that
    ``tables()`` returns for it (a compound PCFG draws a new ``z`` there), drawn again while longer than
    ``max_words`` (at most :data:`MAX_DRAWS` times; then an :class:`InduceError`)."""
    out = []
    for _ in range(count):
        for _ in range(MAX_DRAWS):
            roots, children, emissions, nt = tables()
            words = sample_sentence(roots, children, emissions, nt, generator, max_words)
            if words is not None:
                out.append(words)
                break
        else:
            raise InduceError(f"{model_name}: {MAX_DRAWS} sentences drawn in a row were longer than {max_words} "
                              "words: this grammar's sentences are far longer than the cap")
    return out


def grammar_structure(log_partition, like: torch.Tensor, lengths: torch.Tensor,
                      best: Optional[callable] = None) -> torch.Tensor:
    """``span_posteriors [B, N + 1, N + 1, C]``: channel 0 the span marginals of ``log_partition`` (spans as
    :mod:`induce.kernels`), channel 1 (when ``best`` is given: the max-product log partition) the 0/1 indicator
    of the Viterbi tree's spans. ``like``: a ``[B, N, ...]`` tensor giving batch, length, dtype and device."""
    channels = [span_marginals(log_partition, like)]
    if best is not None:
        channels.append(score_and_span_gradient(best, like)[1])
    return torch.stack(channels, -1)
