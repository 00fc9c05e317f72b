"""PRPN (Shen, Lin, Huang and Courville, 2018): Parsing-Reading-Predict Networks.

Equations from Stratos' note, section 3 (defaults: ``E = 800``, ``d = 1200``, ``M = 15`` memory slots,
``Q = 5`` look-back words, ``tau = 20``, 2 layers):

* **Parsing network.** ``d_t, d^_{t+1} = sigmoid(Conv_1x1(Drop(ReLU(BN(Conv_{Q+1}(Drop([E_{x_{t-Q}} ..
  E_{x_t}])))))))``: one convolution over the current and ``Q`` previous embeddings, then a grouped
  1x1 convolution with one output per group: ``d_t`` (distance between ``w_{t-1}`` and ``w_t``) and
  ``d^_{t+1}`` (a guess of the next word's distance, from separate parameters).
* **Gates** over the memory slots from :func:`induce.kernels.stick_breaking_gates` (``tau``):
  ``g_i^t ~ [no distance in (i, t) exceeds d_t]``.
* **Reading network**, per layer: gated scaled-dot-product attention over the memory tape of the
  last ``M`` states ``(h, c)`` with key ``Drop(A Drop([h_{t-1}; h_t^{(l-1)}]) + b)``, then an LSTM
  cell with layer normalisation that starts from the attended ``(h~, c~)`` instead of
  ``(h_{t-1}, c_{t-1})``.
* **Predict network**: the top layer's memory ``h_{t-M} .. h_{t-1}`` (not ``h_t``) read with the
  gates of ``d^_{t+1}`` (``h_{t-1}`` gated by ``alpha(d^_{t+1} - d_t)``) and key ``h_t``;
  ``tanh(BN(W Drop([h_t; h~_t]) + b))`` is the hidden state fed to the tied output.

**Fidelity to the released code (yikangshen/PRPN).** Where the code and Stratos' note differ,
``induce/models/prpn/prpn.yaml`` and the class defaults follow the code, which is what produced the published
perplexity and F1:

* *Predict read* (fixed, no option): ``PredictNetwork.attention`` reads its memory before pushing
  ``h_t``, so it attends over ``h_{t-1} .. h_{t-M}`` with ``memory_gate_next`` (``ParsingNetwork``:
  slot ``k``, i.e. ``h_{t-1-k}``, gets ``cumprod_{j<=k} alpha(d^_{t+1} - d_{t-j})``). Reading
  ``h_t .. h_{t-M+1}`` instead would read ``h_t`` twice (it is already in ``[h_t; h~_t]``) and never
  ``h_{t-M}``; Stratos' ``g^_i^{t+1}``, ``i = t-M+1..t``, are the same slots as the code's.
* ``dropout_masks: per_step`` — every ``nn.Dropout`` of the code acts on one step's ``[B, D]``
  (inside the time loop) or on all positions element-wise, so each position gets a new mask: the
  inputs of each reading layer (``ReadingNetwork.drop``), the key inputs and keys (``projector_summ``,
  ``projector_pred``), ``[h_t; h~_t]`` (``PredictNetwork.ffd``) and the output (``PRPN.drop``).
  Only ``h~`` has one mask per forward (``rmask``), shared by the whole batch; kept here.
  ``locked``: AWD-LSTM's variational masks, one per sequence (``h~``: one per sequence); 4-10% faster
  on CPU (``bench/results/training.md``, "Model training speed on CPU").
* ``key_dropout: 0.5, wdrop: 0`` — the attention keys are ``Drop(Linear(Drop([x_t; h_{t-1}])))``
  with the code's ``idropout`` (0.5) twice (``projector_summ``; ``projector_pred`` on ``h_t``);
  the key reads the layer input before the cell's dropout. Stratos' note (B.1) writes DropConnect
  on the key matrix (``ADrop_0.5``) instead: ``wdrop: 0.5, key_dropout: 0``. The key's outer
  dropout is ``rdropout`` here (the code's ``idropout``; both 0.5 in the configs).
* ``init_range: 0.01`` — ``PRPN.init_weights`` draws the (tied) embedding from ``U(-0.01, 0.01)``
  (AWD-LSTM and the other models here: 0.1) and sets the decoder bias to 0; untied, the decoder
  weight is its own draw from the same range (not a copy of the embedding).

**Initialisation.** Every other parameter of the code keeps its module's PyTorch
default, and the code ran on PyTorch 0.3 (README), whose defaults differ from today's for two of
its modules. Read from ``ParsingNetwork.py``, ``ReadingNetwork.py``, ``PredictNetwork.py``,
``LSTMCell.py`` and ``model_PRPN.py``:

* ``nn.Linear`` (the LSTM cell's ``ih`` and ``hh``, with biases; ``projector_pred``; ``ffd``'s
  projection): weight and bias ``U(+-1/sqrt(fan_in))`` in 0.3 and in PyTorch >= 1.0 alike. Its ``LayerNorm``
  (own class): scale 1, shift 0, as ``nn.LayerNorm`` here.
* The attention key (fixed, no option): ``projector_summ`` is *one* ``nn.Linear`` over
  ``[x_t; h_{t-1}]``, so weight and bias are ``U(+-1/sqrt(I + d))``. Here the key is split into
  ``key_x`` (input half, with the bias) and ``key_h`` (recurrent half) for speed; they had the
  the joint bound too (not the bounds of their halves, ``1/sqrt(I)`` and ``1/sqrt(d)``).
* ``nn.Conv1d(E, d, Q + 1)`` (the distance convolution): ``U(+-1/sqrt(E (Q + 1)))`` for weight and
  bias in 0.3 and in PyTorch >= 1.0 alike.
* ``module_defaults: torch-0.3`` (default) — the two modules whose default changed in PyTorch 1.0:
  ``nn.BatchNorm1d`` (the parsing network's and the predict network's) had its scale drawn from
  ``U(0, 1)`` (1 since PyTorch 1.0; shift 0 in both); the grouped ``nn.Conv1d(d, 2, 1, groups=2)``
  that gives ``d_t`` and ``d^_{t+1}`` drew from ``U(+-1/sqrt(d))``: 0.3's bound counted all ``d``
  input channels, where PyTorch >= 1.0 counts the ``d / 2`` of a group (``1/sqrt(d/2)``, sqrt 2
  wider). ``torch-1`` keeps the installed PyTorch's defaults (scale 1, the group's bound): what
  checkpoints written before the option existed were initialised with (``PRPNConfig.stored_defaults``).
  Neither moves the untrained trees (``bench/results/models.md``, "Initialisation and untrained models").

Left as they are (not part of the fidelity issue): the code's ``LayerNorm`` divides by the
unbiased standard deviation plus ``1e-6`` (``nn.LayerNorm`` here: biased variance, ``eps`` inside
the root); for a fresh state the code's first read slot, the zero initial state, has gate 1 where
the kernel gives 0 (it reads zeros either way; only the softmax mass differs in the first ``M``
positions of a fresh state).

**Relevant set beyond the tape** (``relevant_set: rho``, default 0 = off: exactly the model above).
Kerg et al.'s (2020) relevancy screening (:mod:`induce.models.common.relevancy`) on each reading layer's tape:
a state's relevance ``beta`` is the total reading attention it received while on the tape (the
``M`` reads after it was written; detached, as in the paper). When it leaves the tape it replaces
the least relevant member of the layer's relevant set (at most ``rho`` states ``(h, c)``) if it is
strictly more relevant (or a slot is free); so the set is the top-``rho`` of all states that left
the tape, earlier states winning ties (:class:`induce.models.common.relevancy.RelevancyMemory`'s rule, run inside
the reading loop with the joint attention, as in that class). At every read the relevant states
are extra memory slots, attended together with the tape in one gated softmax, and the predict
network reads the top layer's relevant set the same way (the set the reading layer read at step
``t``, before the push of ``h_t`` moves ``h_{t-M}``, still on the predict network's tape, into it).

The reading layer (:class:`~induce.models.prpn.reading.ReadingLayer`: the attention over the tape,
the layer-normalised cell, the relevant set's screening and its gate 1) lives in
:mod:`induce.models.prpn.reading`, with its speed notes.
"""
from __future__ import annotations

import math
from typing import ClassVar, Literal, Optional

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from induce.kernels import stick_breaking_gates
from induce.models.base import LMOutput
from induce.models.common.awd import AWDConfig, DropoutRate, PositiveInt, TiedLanguageModel, dropconnect
from induce.models.common.relevancy import EMPTY_RELEVANCE
from induce.models.registry import register
from induce.trees.kinds import DISTANCE

from .reading import ReadingLayer, drop, fresh_relevant_state, gated_attention_weights, step_masks

__all__ = ["PRPN", "PRPNConfig", "ParsingNetwork", "ReadingLayer", "drop", "fresh_relevant_state",
           "gated_attention_weights", "step_masks"]


class PRPNConfig(AWDConfig):
    """PRPN hyper-parameters (defaults: Shen et al. 2018, PTB language model)."""

    emb_size: PositiveInt = 800
    hidden_size: PositiveInt = 1200
    n_layers: PositiveInt = 2
    dropout: float = pydantic.Field(0.7, ge=0, lt=1, description="dropout before the tied output layer")
    dropouth: float = pydantic.Field(0.5, ge=0, lt=1, description="dropout on inputs of layers >= 2")
    dropouti: float = pydantic.Field(0.7, ge=0, lt=1, description="dropout on the first layer's input")
    dropoute: DropoutRate = 0.0
    wdrop: float = pydantic.Field(
        0.0, ge=0, lt=1, description="DropConnect on the attention key projections (Stratos' ADrop; the code: 0)"
    )
    key_dropout: float = pydantic.Field(
        0.5, ge=0, lt=1, description="dropout on the attention keys' inputs [x_t; h_{t-1}] and h_t (PRPN code)"
    )
    rdropout: float = pydantic.Field(
        0.5, ge=0, lt=1, description="dropout on the attended memory h~ (not c~: see ReadingLayer.forward) and the keys"
    )
    dropout_masks: Literal["per_step", "locked"] = pydantic.Field(
        "per_step", description="per_step: a new mask at every position (PRPN code); locked: one per sequence"
    )
    init_range: float = pydantic.Field(0.01, gt=0, description="uniform init range of the embedding (PRPN code: 0.01)")
    parser_dropout: float = pydantic.Field(0.5, ge=0, lt=1, description="dropouts of the parsing network")
    n_slots: int = pydantic.Field(15, ge=1, description="M: memory slots")
    n_lookback: int = pydantic.Field(5, ge=0, description="Q: previous words the distance convolution sees")
    tau: float = pydantic.Field(20.0, gt=0, description="gate sharpness (1 / resolution * 2)")
    relevant_set: int = pydantic.Field(
        0, ge=0, description="rho: states screened by relevance when they leave the tape, read with gate 1 (0 = off)"
    )
    module_defaults: Literal["torch-0.3", "torch-1"] = pydantic.Field(
        "torch-0.3",
        description="init of BatchNorm scales and the grouped distance conv: PyTorch 0.3's defaults, which the PRPN "
        "code ran with (scale U(0,1); bound 1/sqrt(all input channels)), or PyTorch >= 1.0's (scale 1; group's "
        "channels)",
    )

    #: Checkpoints written before ``module_defaults`` existed were initialised with PyTorch >= 1.0's defaults.
    stored_defaults: ClassVar[dict] = {"module_defaults": "torch-1"}


def torch_03_batch_norm_init(norm: nn.BatchNorm1d) -> None:
    """PyTorch 0.3's ``_BatchNorm.reset_parameters``: scale ``U(0, 1)``, shift 0 (the scale is 1
    since PyTorch 1.0)."""
    with torch.no_grad():
        norm.weight.uniform_(0.0, 1.0)
        norm.bias.zero_()


def torch_03_conv_init(conv: nn.Conv1d) -> None:
    """PyTorch 0.3's ``_ConvNd.reset_parameters``: weight and bias ``U(+-1/sqrt(n))`` with ``n =
    in_channels * kernel size``, *all* input channels even when the convolution is grouped
    (PyTorch >= 1.0 counts ``in_channels / groups``; the same bound when ``groups = 1``)."""
    bound = 1.0 / math.sqrt(conv.in_channels * math.prod(conv.kernel_size))
    with torch.no_grad():
        conv.weight.uniform_(-bound, bound)
        if conv.bias is not None:
            conv.bias.uniform_(-bound, bound)


class ParsingNetwork(nn.Module):
    """Distances from a convolution over ``Q + 1`` embeddings.

    forward: ``emb [B, T, E]``, ``history [B, Q, E]`` -> ``(d [B, T], d_next [B, T])`` in ``(0, 1)``.

    ``module_defaults="torch-0.3"``: the batch norm's scale ``U(0, 1)`` and the grouped output
    convolution ``U(+-1/sqrt(hidden_size))`` (PyTorch 0.3's defaults; see the module docstring).
    """

    def __init__(self, emb_size: int, hidden_size: int, n_lookback: int, dropout: float,
                 module_defaults: str = "torch-0.3"):
        super().__init__()
        self.n_lookback, self.dropout = n_lookback, dropout
        self.conv = nn.Conv1d(emb_size, hidden_size, n_lookback + 1)
        self.norm = nn.BatchNorm1d(hidden_size)
        # groups=2: d_t and d^_{t+1} each read their own half of the hidden channels.
        self.out = nn.Conv1d(hidden_size, 2, 1, groups=2)
        if module_defaults == "torch-0.3":
            torch_03_batch_norm_init(self.norm)
            torch_03_conv_init(self.out)

    def forward(self, emb: torch.Tensor, history: torch.Tensor):
        x = torch.cat([history, emb], 1)  # [B, Q + T, E]
        x = F.dropout(x, self.dropout, self.training).transpose(1, 2)
        hidden = F.relu(self.norm(self.conv(x)))
        hidden = F.dropout(hidden, self.dropout, self.training)
        d = torch.sigmoid(self.out(hidden))  # [B, 2, T]
        return d[:, 0], d[:, 1]


@register
class PRPN(TiedLanguageModel):
    """PRPN language model; parses with the parsing network's distances ``d_t``."""

    name = "prpn"
    description = "PRPN (Shen et al., 2018): convolutional distances gate attention over a memory tape"
    display_name = "PRPN"
    published = {"table3": {"value": 52.4, "source": "Peng, Schwartz and Smith (2019), PaLM, Table 3",
                            "note": "taken by PaLM from Drozdov et al. (2019)"},
                 "lm": {"value": 61.98, "source": "Shen et al. 2018, PRPN, Table 2, PTB test"},
                 "all_lengths": {"value": 37.4, "source": "Kim, Dyer & Rush 2019, Table 1",
                                 "note": "the released code; 47.3 tuned"}}
    parser_kind = DISTANCE
    Config = PRPNConfig
    untied_output_init = "uniform"  # init_weights: the decoder weight U(+-initrange), its own draw

    def __init__(self, vocab_size: int, config: PRPNConfig | None = None):
        super().__init__(vocab_size, config)
        cfg = self.config
        self.parser = ParsingNetwork(cfg.emb_size, cfg.hidden_size, cfg.n_lookback, cfg.parser_dropout,
                                     module_defaults=cfg.module_defaults)
        sizes = [cfg.emb_size] + [cfg.hidden_size] * cfg.n_layers
        self.layers = nn.ModuleList(
            ReadingLayer(sizes[depth], cfg.hidden_size, cfg.wdrop, cfg.rdropout, cfg.relevant_set,
                         key_dropout=cfg.key_dropout, dropout_masks=cfg.dropout_masks)
            for depth in range(cfg.n_layers)
        )
        # Predict network: attention key projection for the output read, then W, BN, tanh.
        self.output_key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.output_proj = nn.Linear(2 * cfg.hidden_size, cfg.emb_size)
        self.output_norm = nn.BatchNorm1d(cfg.emb_size)
        if cfg.module_defaults == "torch-0.3":
            torch_03_batch_norm_init(self.output_norm)

    def init_state(self, batch_size: int, device="cpu"):
        """Dict: ``emb_history [B, Q, E]`` (zeros), ``distances [B, P]`` of previous positions (P = 0
        fresh), ``memory`` per layer ``(h [B, M, d], c [B, M, d])`` (zeros: gated off when fresh);
        with ``relevant_set > 0`` also ``relevant``: per layer an empty set (:func:`fresh_relevant_state`)."""
        cfg = self.config
        weight = self.embedding.weight
        zeros = lambda *shape: weight.new_zeros(*shape, device=device)  # noqa: E731
        state = {
            "emb_history": zeros(batch_size, cfg.n_lookback, cfg.emb_size),
            "distances": zeros(batch_size, 0),
            "memory": [(zeros(batch_size, cfg.n_slots, cfg.hidden_size), zeros(batch_size, cfg.n_slots,
                                                                               cfg.hidden_size))
                       for _ in range(cfg.n_layers)],
        }
        if cfg.relevant_set:
            like = zeros(batch_size, 1)
            state["relevant"] = [fresh_relevant_state(batch_size, cfg.n_slots, cfg.relevant_set, cfg.hidden_size, like)
                                 for _ in range(cfg.n_layers)]
        return state

    def _gates(self, distances: torch.Tensor, history: torch.Tensor, d_next: torch.Tensor):
        """Gates for the current positions, given the ``history [B, P]`` distances before them.

        Both ``[B, T, M]`` over the same slots: slot ``w`` is position ``t-M+w`` (the tape before
        ``w_t`` is written: ``h_{t-M} .. h_{t-1}``), gate ``prod_{j=i+1..t} alpha(q_t - d_j)`` (the
        kernel's convention) with query ``q_t = d_t`` (read) or ``q_t = d^_{t+1}`` (predict). So the
        predict network gates ``h_{t-1}`` by ``alpha(d^_{t+1} - d_t)``, as PRPN's code does
        (``ParsingNetwork.forward``'s ``memory_gate_next``, read in ``PredictNetwork.attention``
        before ``h_t`` is pushed) and as Stratos' ``g^_i^{t+1}``, ``i = t-M+1..t``, index them.
        """
        cfg = self.config
        prev = history.size(1)
        full = torch.cat([history, distances], 1)
        read = stick_breaking_gates(full, cfg.n_slots, cfg.tau)[:, prev:]
        # the history positions' queries are never used (sliced off): any filler does
        predict = stick_breaking_gates(full, cfg.n_slots, cfg.tau, d_next=torch.cat([history, d_next], 1))[:, prev:]
        return read, predict

    def _distances(self, emb: torch.Tensor, state):
        return self.parser(emb, state["emb_history"])

    def forward(self, tokens: torch.Tensor, state, gold_spans=None) -> LMOutput:
        """``tokens [B, T]`` -> hidden ``[B, T, E]``; ``structure = {"distances": d [B, T]}``."""
        cfg = self.config
        per_step = cfg.dropout_masks == "per_step"
        emb = self.embed(tokens)
        distances, d_next = self._distances(emb, state)
        read_gates, predict_gates = self._gates(distances, state["distances"], d_next)
        raw_outputs, dropped_outputs, memories, relevants = [], [], [], []
        top_set = None
        layer_input = emb
        for depth, layer in enumerate(self.layers):
            x = drop(layer_input, cfg.dropouti if depth == 0 else cfg.dropouth, self.training, per_step)
            if depth > 0:
                dropped_outputs.append(x)
            if cfg.relevant_set:
                carried = None if state.get("relevant") is None else state["relevant"][depth]
                out, memory, relevant, top_set = layer(x, read_gates, state["memory"][depth], carried,
                                                       key_input=layer_input)
                relevants.append(relevant)
                if depth == len(self.layers) - 1:
                    top_set = self._set_before_push(top_set, carried)
            else:
                out, memory = layer(x, read_gates, state["memory"][depth], key_input=layer_input)
            raw_outputs.append(out)
            memories.append(memory)
            layer_input = out
        top = layer_input
        read = self._read_output_memory(top, state["memory"][-1][0], predict_gates, top_set)
        joined = drop(torch.cat([top, read], -1), cfg.dropouth, self.training, per_step)
        projected = self.output_proj(joined)
        projected = self.output_norm(projected.transpose(1, 2)).transpose(1, 2)
        hidden = drop(torch.tanh(projected), cfg.dropout, self.training, per_step)
        dropped_outputs.append(hidden)  # the last "dropped output" is the [B, T, E] fed to the softmax
        new_state = {
            "emb_history": torch.cat([state["emb_history"], emb], 1)[:, -cfg.n_lookback :]
            if cfg.n_lookback else state["emb_history"],
            "distances": torch.cat([state["distances"], distances], 1)[:, -cfg.n_slots :],
            "memory": memories,
        }
        if cfg.relevant_set:
            new_state["relevant"] = relevants
        return LMOutput(hidden=hidden, state=new_state, raw_outputs=raw_outputs, dropped_outputs=dropped_outputs,
                        structure={"distances": distances})

    @staticmethod
    def _set_before_push(after_push: tuple[torch.Tensor, torch.Tensor], carried: Optional[dict]):
        """The top layer's relevant set as read at each step (before that step's push):
        ``(h [B, T, rho, d], valid [B, T, rho])`` after the pushes -> the same, shifted one step, the
        carried-in set (or an empty one) first. The predict network's tape ends at ``h_{t-M}``, which
        the push of step ``t`` screens into the set: read after it, that state would count twice."""
        set_h, set_valid = after_push
        if carried is None:
            first_h, first_valid = torch.zeros_like(set_h[:, :1]), torch.zeros_like(set_valid[:, :1])
        else:
            first_h = carried["h"].unsqueeze(1).to(set_h.dtype)
            first_valid = (carried["relevance"] > EMPTY_RELEVANCE).unsqueeze(1)
        return torch.cat([first_h, set_h[:, :-1]], 1), torch.cat([first_valid, set_valid[:, :-1]], 1)

    def _read_output_memory(self, top: torch.Tensor, old_memory: torch.Tensor, gates: torch.Tensor,
                            relevant: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """Predict-network read, batched over time: position t reads ``h_{t-M} .. h_{t-1}`` of the top
        layer (PRPN code: ``PredictNetwork.attention`` reads its memory before pushing ``h_t``) with
        key ``Drop_r(W Drop_k(h_t) + b)`` (``projector_pred``; ``k = key_dropout``, ``r = rdropout``,
        DropConnect ``wdrop`` on ``W``).

        top ``[B, T, d]``, old_memory ``[B, M, d]`` (positions -M .. -1), gates ``[B, T, M]`` -> ``[B, T, d]``.
        ``relevant``: the top layer's relevant set read at each step (before its push),
        ``(h [B, T, rho, d], valid [B, T, rho])``, read as extra slots with gate 1 in the same softmax
        (``relevant_set > 0``).
        """
        cfg = self.config
        per_step = cfg.dropout_masks == "per_step"
        steps, n_slots = top.size(1), cfg.n_slots
        weight = dropconnect(self.output_key.weight, cfg.wdrop, self.training)
        key_in = drop(top, cfg.key_dropout, self.training, per_step)
        key = drop(F.linear(key_in, weight, self.output_key.bias), cfg.rdropout, self.training, per_step)
        seq = torch.cat([old_memory, top], 1)  # position p sits at index p + M
        # slot w of position t is position t-M+w, index t+w: M shifted views instead of a
        # [B, T, M, d] copy.
        scores = torch.stack([(seq[:, w : w + steps] * key).sum(-1) for w in range(n_slots)], -1)
        if relevant is not None:
            set_h, set_valid = relevant
            extra = torch.matmul(set_h, key.unsqueeze(-1)).squeeze(-1).masked_fill(~set_valid, float("-inf"))
            scores = torch.cat([scores, extra], -1)  # [B, T, M + rho]
            gates = torch.cat([gates, set_valid.to(gates.dtype)], -1)
        attn = gated_attention_weights(scores / math.sqrt(cfg.hidden_size), gates)
        read = attn[..., 0:1] * seq[:, :steps]
        for w in range(1, n_slots):
            read = read + attn[..., w : w + 1] * seq[:, w : w + steps]
        if relevant is not None:
            read = read + torch.matmul(attn[..., n_slots:].unsqueeze(-2), set_h).squeeze(-2)
        return read

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Distances ``[B, T]`` from the parsing network alone (they do not depend on the LSTMs).

        Batch norm runs in eval mode (running statistics), so padding cannot change the values.
        """
        state = self.init_state(tokens.size(0), tokens.device)
        distances, _ = self._distances(self.embed(tokens), state)
        return {"distances": distances}
