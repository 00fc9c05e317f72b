"""Neural PCFGs of Kim, Dyer & Rush (2019): N-PCFG (``npcfg``) and the compound PCFG (``cpcfg``).

A PCFG in Chomsky normal form without unary chains: a root rule ``S -> A`` (``A`` one of ``NT``
nonterminals), binary rules ``A -> B C`` (``B, C`` any of the ``S = NT + T`` symbols, nonterminals first),
and emissions ``P -> w`` (``P`` one of ``T`` preterminals). Every rule probability comes from a network
over symbol embeddings (``state_dim``), as in harvardnlp/compound-pcfg ``models.py`` (``CompPCFG``):

* roots ``[B, NT]``: ``log_softmax(root_mlp([root_emb; z]))`` (Linear, two :class:`ResidualLayer`, Linear);
* rules ``[B, NT, S, S]``: ``log_softmax(rule_mlp([nt_emb; z]))`` over the ``S * S`` child pairs (one Linear);
* emissions ``[B, N, T]``: ``log_softmax(vocab_mlp([t_emb; z]))`` over the vocabulary (Linear, two residual
  layers, Linear), read at each word.

The compound PCFG draws a sentence-level ``z ~ N(0, I)`` (``z_dim``, 64) that every rule network reads;
the inference network ``q(z | x)`` is a bi-LSTM (``w_dim``, ``h_dim``) over the words, max-pooled over the
positions, then a Linear to ``[mean; logvar]``. The loss of a sentence is the negative ELBO
``-log p(x | z) + KL(q(z | x) || N(0, I))`` with one reparameterised sample of ``z`` (N-PCFG: ``z_dim = 0``,
no ``z``, the loss is ``-log p(x)``). ``log p(x | z)`` is the inside algorithm (:func:`induce.kernels.inside`).

Parsing (parser kind :data:`induce.trees.kinds.GRAMMAR`): ``parse_structure`` returns the span posteriors
(the gradient of ``log Z`` with respect to a span score, :func:`induce.kernels.span_marginals`) and the
Viterbi tree's span indicator, with ``z`` the inference network's mean (compound-pcfg ``eval.py``:
``use_mean=True``). Decoders ``mbr`` (the default: CKY over the posteriors, as Kim et al. and Yang et
al. report) and ``viterbi`` (the best derivation; compound-pcfg's ``train.py`` prints these trees).

**Fidelity to the released code** (each difference that matters is an option; ``bench/results/decisions.md``'s
fidelity table says which one the configs use):

* ``init: xavier`` (default): every parameter of two or more dimensions from ``xavier_uniform_``
  (``train.py``), the embeddings and the inference LSTM included; ``init: torch`` keeps PyTorch's defaults.
* ``valid_z: sample`` (default): the validation bound draws ``z`` as training does (``train.py``'s
  ``eval`` keeps the sample "since we want a valid upper bound on PPL"), here from a generator seeded
  afresh at each call, so that validation neither depends on nor moves the training RNG (exact resume);
  ``valid_z: mean`` validates (selects the checkpoint) with ``z`` at the mean, the grammar the parser uses
  (not a bound). A reported perplexity (:meth:`perplexity_loss`, ``induce eval --lm``) is the sampled bound
  either way.
* The inference network reads padded batches (compound-pcfg batches sentences of one length): the
  bi-LSTM runs over packed sequences and the max pool skips the padding, which gives the released values
  on unpadded sentences.
* The emissions are computed once per grammar (``[B, T, V]``), not once per word position as
  ``CompPCFG.forward`` does (``[B, N, T, V]``): the same numbers, without the ``N``-fold memory; their
  normaliser and the lookup of the words are one function (:func:`induce.kernels.pcfg.emissions.emission_scores`).
* One-word sentences have no binary derivation: the sentence-level objective leaves them out of training
  and validation (:attr:`shortest_sentence`), as compound-pcfg's ``train.py`` does; they parse as the word.

Generation (``induce generate``): the grammar is a generative model of sentences; :meth:`sample_sentences`
draws derivations top-down (:func:`sample_sentence`), the compound PCFG's ``z`` from its prior.
"""
from __future__ import annotations

from typing import ClassVar, Literal, Optional, Sequence

import pydantic
import torch
from torch import nn

from induce.kernels import inside
from induce.kernels.pcfg.emissions import emission_scores
from induce.models.base import SENTENCE_LEVEL, LanguageModel, LMOutput, ModelConfig, StepTensor
from induce.models.common.grammar import (
    InferenceNetwork,
    draw_sentences,
    gaussian_kl,
    grammar_structure,
    lengths_at_least_two,
    sampling_probabilities,
    symbol_mlp,
    without_words,
    xavier_init_,
)
from induce.models.registry import register
from induce.trees.kinds import GRAMMAR


class PCFGConfig(ModelConfig):
    """Hyper-parameters (defaults: compound-pcfg ``train.py``, the sizes of Kim et al. 2019)."""

    nt_states: int = pydantic.Field(30, gt=0, description="nonterminals NT")
    t_states: int = pydantic.Field(60, gt=0, description="preterminals T")
    state_dim: int = pydantic.Field(256, gt=0, description="symbol embedding and rule-network width")
    z_dim: int = pydantic.Field(64, ge=0, description="compound variable size (0: N-PCFG, no z)")
    h_dim: int = pydantic.Field(512, gt=0, description="inference bi-LSTM hidden size per direction")
    w_dim: int = pydantic.Field(512, gt=0, description="inference network word embedding size")
    init: Literal["xavier", "torch"] = pydantic.Field(
        "xavier", description="xavier: xavier_uniform_ on every matrix (compound-pcfg train.py); torch: defaults")
    valid_z: Literal["sample", "mean"] = pydantic.Field(
        "sample", description="validation bound: z sampled (a bound, as compound-pcfg) or its mean")


class NPCFGConfig(PCFGConfig):
    z_dim: int = pydantic.Field(0, ge=0, le=0, description="N-PCFG has no z (the compound PCFG is --model cpcfg)")


class DenseGrammar(nn.Module):
    """The rule networks of :mod:`induce.models.pcfg.model` (module docstring). ``forward(tokens [B, N], z [B, z_dim]
    or None) -> (terms [B, N, T], rules [B, NT, S, S], roots [B, NT])`` in log space."""

    def __init__(self, vocab_size: int, cfg: PCFGConfig):
        super().__init__()
        self.nt, self.t, self.z_dim = cfg.nt_states, cfg.t_states, cfg.z_dim
        self.symbols = self.nt + self.t
        dim = cfg.state_dim
        self.t_emb = nn.Parameter(torch.randn(self.t, dim))
        self.nt_emb = nn.Parameter(torch.randn(self.nt, dim))
        self.root_emb = nn.Parameter(torch.randn(1, dim))
        self.rule_mlp = nn.Linear(dim + self.z_dim, self.symbols ** 2)
        self.root_mlp = symbol_mlp(dim + self.z_dim, dim, self.nt)
        self.vocab_mlp = symbol_mlp(dim + self.z_dim, dim, vocab_size)

    def roots_and_rules(self, batch: int, z: Optional[torch.Tensor]):
        """``(roots [B, NT], rules [B, NT, S, S])``, log space: one grammar expanded over the batch (stride 0)
        when there is no ``z``."""
        if z is None:
            roots = self.root_mlp(self.root_emb).log_softmax(-1).expand(batch, self.nt)
            rules = self.rule_mlp(self.nt_emb).log_softmax(-1).view(1, self.nt, self.symbols, self.symbols)
            return roots, rules.expand(batch, -1, -1, -1)
        roots = self.root_mlp[1:](linear_with_z(self.root_mlp[0], self.root_emb, z))[:, 0].log_softmax(-1)
        rules = linear_with_z(self.rule_mlp, self.nt_emb, z).log_softmax(-1)
        return roots, rules.view(batch, self.nt, self.symbols, self.symbols)

    def emission_hidden(self, z: Optional[torch.Tensor]) -> torch.Tensor:
        """The emission network's last hidden layer ``[1 or B, T, state_dim]`` (before the layer over the
        vocabulary, ``vocab_mlp[-1]``)."""
        return self.vocab_mlp[1:-1](linear_with_z(self.vocab_mlp[0], self.t_emb, z))

    def distributions(self, batch: int, z: Optional[torch.Tensor]):
        """``(roots [B, NT], rules [B, NT, S, S], emissions [B, T, V])``, log space: the grammar of each of
        ``batch`` sentences (one grammar expanded over the batch when there is no ``z``)."""
        roots, rules = self.roots_and_rules(batch, z)
        emissions = self.vocab_mlp[-1](self.emission_hidden(z)).log_softmax(-1)  # [1 or B, T, V]
        return roots, rules, emissions.expand(batch, -1, -1)

    def forward(self, tokens: torch.Tensor, z: Optional[torch.Tensor]):
        """The emissions over the vocabulary are normalised and read at the words in one function
        (:func:`induce.kernels.pcfg.emissions.emission_scores`): the ``[B, T, V]`` log-probabilities are not kept."""
        roots, rules = self.roots_and_rules(tokens.shape[0], z)
        last = self.vocab_mlp[-1]
        terms = emission_scores(self.emission_hidden(z), last.weight, last.bias, tokens)  # [B, N, T]
        return terms, rules, roots


def linear_with_z(layer: nn.Linear, emb: torch.Tensor, z: Optional[torch.Tensor]) -> torch.Tensor:
    """``layer([emb; z_b])`` for each sentence ``b``: ``emb [K, D]``, ``z [B, Z]`` -> ``[B, K, out]`` (``[1, K, out]``
    without ``z``), over the concatenation. Not split into the symbols' part ``emb @ W_emb^T`` once plus each
    sentence's ``z`` part: the same function, but in float32 at the paper's sizes its gradients of the emission
    network came out ~1e-2 (relative) from the float64 ones, the concatenation's ~1e-5."""
    if z is None:
        return layer(emb)[None]
    symbols = emb.unsqueeze(0).expand(z.shape[0], *emb.shape)
    return layer(torch.cat([symbols, z.unsqueeze(1).expand(-1, emb.shape[0], -1)], -1))


@register
class CompoundPCFG(LanguageModel):
    """The compound PCFG (``z_dim > 0``) and, with ``z_dim = 0``, the N-PCFG (module docstring)."""

    name: ClassVar[str] = "cpcfg"
    description: ClassVar[str] = "compound PCFG (Kim, Dyer & Rush 2019): a neural PCFG with a sentence-level z"
    display_name: ClassVar[str] = "C-PCFG"
    published: ClassVar[dict] = {"all_lengths": {"value": 55.2, "source": "Kim, Dyer & Rush 2019, Table 1"}}
    parser_kind = GRAMMAR
    objective = SENTENCE_LEVEL
    Config = PCFGConfig
    #: A CNF grammar without unary rules derives no one-word sentence.
    shortest_sentence: ClassVar[int] = 2
    #: The rule network's output has ``(nt_states + t_states)^2`` columns of ``state_dim + z_dim`` weights.
    size_keys: ClassVar[tuple[str, ...]] = ("nt_states", "t_states", "state_dim")

    def __init__(self, vocab_size: int, config: Optional[PCFGConfig] = None):
        super().__init__()
        self.config = config if config is not None else self.Config()
        self.vocab_size = vocab_size
        self.grammar = DenseGrammar(vocab_size, self.config)
        self.encoder = InferenceNetwork(vocab_size, self.config) if self.config.z_dim > 0 else None
        if self.config.init == "xavier":
            xavier_init_(self)

    @property
    def perplexity_is_bound(self) -> bool:
        """With ``z`` (C-PCFG), the loss is the negative ELBO: its perplexity is an upper bound."""
        return self.encoder is not None

    @property
    def validation_loss_text(self) -> str:
        if self.encoder is None:
            return "validation perplexity"
        if self.config.valid_z == "sample":
            return "validation bound (z sampled: an upper bound on the perplexity)"
        return "validation loss with z at the mean of q(z | x) (the parser's z; not a bound)"

    def latent(self, tokens: torch.Tensor, lengths: torch.Tensor, mode: str):
        """``(z [B, z_dim] or None, kl [B])``: ``mode`` ``sample`` (global RNG), ``fixed`` (a sample from a
        generator seeded afresh) or ``mean``."""
        if self.encoder is None:
            return None, torch.zeros(tokens.size(0), device=tokens.device)
        mean, logvar = self.encoder(tokens, lengths)
        if mode == "mean":
            z = mean
        else:
            generator = None
            if mode == "fixed":
                generator = torch.Generator(device=mean.device).manual_seed(0)
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
            z = mean + (0.5 * logvar).exp() * noise
        return z, gaussian_kl(mean, logvar)

    def sentence_loss(self, tokens: torch.Tensor, lengths: torch.Tensor, z_mode: Optional[str] = None) -> torch.Tensor:
        """The negative ELBO of each sentence ``[B]`` (nats): ``-log p(x | z) + KL`` (N-PCFG: ``-log p(x)``);
        ``z`` sampled in training, in eval mode (validation) as ``valid_z`` says; ``z_mode`` overrides
        (:meth:`latent`'s modes)."""
        lengths_at_least_two(self.name, lengths)
        mode = z_mode or ("sample" if self.training else ("fixed" if self.config.valid_z == "sample" else "mean"))
        z, kl = self.latent(tokens, lengths, mode)
        terms, rules, roots = self.grammar(tokens, z)
        return -inside(terms, rules, roots, lengths) + kl

    def perplexity_loss(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The bound a reported perplexity reads, whatever ``valid_z`` chose for validation: ``z`` sampled from a
        generator seeded afresh (``valid_z: mean`` selects with ``z`` at its mean, which is not a bound)."""
        return self.sentence_loss(tokens, lengths, None if self.training else "fixed")

    def step_tensors(self, batch_size: int, length: int) -> list[StepTensor]:
        """The rule tensor's size ``[B, NT, S, S]``, held once or twice by a training step: the inside pass
        returns the rules' gradient at that size (whatever the kernel tier: the rules are its input, one
        grammar per sentence or one expanded over the batch), and the compound PCFG (``z_dim > 0``) also keeps
        each sentence's rule log-probabilities for ``log_softmax``'s backward pass. At 300 nonterminals, 600
        preterminals and 8 sentences that is 7.2 GiB each; the chart (``[B, N, N, NT]``) is small beside it."""
        shape = (batch_size, self.config.nt_states, self.grammar.symbols, self.grammar.symbols)
        keys = ("data.batch_size", "model.nt_states", "model.t_states")
        tensors = [StepTensor("the rules' gradient", shape, keys)]
        if self.encoder is not None:
            tensors.insert(0, StepTensor("the rule log-probabilities", shape, keys))
        return tensors

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """``{"span_posteriors": [B, N + 1, N + 1, 2]}``: span marginals and the Viterbi tree's spans, ``z`` = the
        mean of ``q(z | x)``. One-word sentences get zeros (they parse as the word)."""
        z, _ = self.latent(tokens, lengths, "mean")
        terms, rules, roots = (x.detach() for x in self.grammar(tokens, z))
        return {"span_posteriors": grammar_structure(
            lambda s: inside(terms, rules, roots, lengths, span_scores=s), terms, lengths,
            best=lambda s: inside(terms, rules, roots, lengths, span_scores=s, semiring="max"))}

    @torch.no_grad()
    def sample_sentences(self, count: int, generator: torch.Generator, temperature: float = 1.0,
                         max_words: int = 100, banned: Sequence[int] = ()) -> list[list[int]]:
        """Sentences drawn from the grammar top-down (:func:`sample_sentence`): the compound PCFG draws its ``z``
        from the prior ``N(0, I)`` for each sentence (and each draw again), the N-PCFG has one grammar. See
        :meth:`LanguageModel.sample_sentences`."""
        parameter = next(self.parameters())
        symbols = self.grammar.symbols

        def grammar_tables(z: Optional[torch.Tensor]):
            roots, rules, emissions = (x[0] for x in self.grammar.distributions(1, z))
            rules = sampling_probabilities(rules.reshape(self.grammar.nt, symbols * symbols), temperature)
            return (sampling_probabilities(roots, temperature),
                    lambda a: divmod(int(torch.multinomial(rules[a], 1, generator=generator)), symbols),
                    without_words(sampling_probabilities(emissions, temperature), banned), self.grammar.nt)

        if self.config.z_dim == 0:
            fixed = grammar_tables(None)
            return draw_sentences(count, lambda: fixed, generator, max_words, self.name)

        def compound_tables():
            z = torch.randn(1, self.config.z_dim, generator=generator, dtype=torch.float64)
            return grammar_tables(z.to(parameter.device, parameter.dtype))

        return draw_sentences(count, compound_tables, generator, max_words, self.name)

    def forward(self, tokens, state, gold_spans=None) -> LMOutput:
        raise NotImplementedError(f"{self.name} is trained sentence by sentence (sentence_loss)")


@register
class NPCFG(CompoundPCFG):
    name: ClassVar[str] = "npcfg"
    description: ClassVar[str] = "neural PCFG (Kim, Dyer & Rush 2019): rule probabilities from symbol embeddings"
    display_name: ClassVar[str] = "N-PCFG"
    published: ClassVar[dict] = {"all_lengths": {"value": 50.8, "source": "Kim, Dyer & Rush 2019, Table 1"}}
    Config = NPCFGConfig
