"""ON-LSTM (Shen, Tan, Sordoni and Courville, 2019): ordered neurons with cumax master gates.

Equations (Stratos' note, section 2): the state of a layer of size ``H`` is split into ``p = H / C``
chunks of ``C`` units. From ``A x_t + B h_{t-1} + b`` come ``p`` master-forget and ``p`` master-input
logits and the usual forget / input / output gates and cell candidate (``H`` each)::

    cf = cumax(v1)            ci = 1 - cumax(v2)         # [B, p]
    w  = cf * ci                                         # overlap, stretched over each chunk
    f^ = f * w + (cf - w)     i^ = i * w + (ci - w)
    c_t = f^ * c_{t-1} + i^ * tanh(u4)      h_t = o * tanh(c_t)

The syntactic distance of word ``t`` at layer ``l`` is the expected breaking point of the master
forget gate, normalised: ``1 - mean_j cf_t[j]`` (Shen et al.'s ``distance_cforget``); a large
value means many levels are erased, i.e. a high-level constituent starts at ``w_t``.

**Regularisation: the released code (yikangshen/Ordered-Neurons) against AWD-LSTM.** ON-LSTM's code
departs from AWD-LSTM (whose pieces it otherwise reuses) in two places; both are options here and
``induce/models/onlstm/onlstm.yaml`` (and the class defaults) follow the released code, since that is what
produced the published perplexity and parsing F1:

* ``ar_target`` — the activation regulariser ``alpha * mean(h^2)``. ``main.py``'s ``train()`` applies
  it to ``dropped_rnn_hs[-1]``, the last entry of ``ONLSTMStack.forward``'s ``outputs``, and that
  stack never drops its last layer's output (``lockdrop`` only for ``l < len(cells) - 1``; the output
  dropout comes later, in ``model.RNNModel.forward``). So AR sees the *raw* last-layer output
  (``raw``, default). AWD-LSTM applies it after the output dropout (``dropped``): with ``dropout =
  0.45`` that is ``1 / 0.55 = 1.8x`` stronger in expectation. The trainer applies AR to
  ``LMOutput.dropped_outputs[-1]``, so with ``raw`` that entry is the raw last-layer output (as in
  the original's ``outputs`` list); the output fed to the softmax is dropped either way.
* ``dropconnect_scale`` — DropConnect on the hidden-to-hidden matrix. ``ON_LSTM.LinearDropConnect``
  zeroes entries with probability ``wdrop`` and does *not* rescale the kept ones in training; at
  evaluation it uses ``weight * (1 - wdrop)`` (the bias is not scaled) — ``eval``, default.
  AWD-LSTM's ``WeightDrop`` (``F.dropout``) rescales the kept entries by ``1 / (1 - wdrop)`` and
  evaluates with the plain weight — ``train``. The products agree in expectation, but the learned
  matrix differs by ``1 / (1 - wdrop)``, which changes what the initialisation and the weight decay
  mean. One mask per forward (per BPTT segment) in both, as ``ONLSTMStack.forward`` samples it.

The ASGD restart of the released ``main.py`` (``--finetuning 500``) is the trainer's
``optim.asgd_restart_epoch`` (:mod:`induce.training.optim`).

**Initialisation, read from the released code.** ``model.RNNModel.init_weights``: the
embedding (tied to the decoder) ``U(-0.1, 0.1)`` (``init_range``), the decoder bias 0. Everything
else keeps the PyTorch default of its module: each ``ONLSTMCell`` has two ``nn.Linear`` layers,
``ih`` (input -> gates) and ``hh`` (``LinearDropConnect``, hidden -> gates), each with its own bias,
so weight and bias of ``ih`` are ``U(+-1/sqrt(input size))`` and those of ``hh``
``U(+-1/sqrt(hidden size))``. That is the same in the PyTorch 0.4 the code was written for
(``stdv = 1/sqrt(in_features)`` for weight and bias) and in PyTorch >= 1.0 (weight
``kaiming_uniform_(a=sqrt(5))``, whose bound is again ``1/sqrt(in_features)``; bias
``U(+-1/sqrt(fan_in))``). The initial state is zeros.

* ``gate_biases: two`` (default, ``induce/models/onlstm/onlstm.yaml``) — two bias vectors per layer as in the
  code: ``bias`` (the ``ih`` bias) and ``bias_hh``, drawn as above and summed before the cell
  step (the gate pre-activation of a unit is biased by the sum of two independent uniforms, and
  under SGD the sum moves twice as fast as one bias would: each gets the same gradient).
  DropConnect leaves biases alone in both, and at evaluation only the weight is scaled.
* ``one`` — one zero-initialised bias. Checkpoints written before the option existed were trained so
  and load as ``one`` (``ONLSTMConfig.stored_defaults``). The untrained trees are the same with either
  (``bench/results/models.md``, "Initialisation and untrained models").

The code's gate layout (``[master input | master forget | out | cell | in | forget]``) differs from
ours (below); every row of a matrix is drawn from the same distribution, so the order does not
change the initial distribution.
"""
from __future__ import annotations

from typing import ClassVar, Literal

import pydantic
import torch
from torch import nn

from induce.kernels import onlstm_cell
from induce.models.base import LMOutput
from induce.models.common.awd import (
    AWDConfig,
    DropoutRate,
    PositiveInt,
    RecurrentProjection,
    TiedLanguageModel,
    dropconnect,
    locked_dropout,
)
from induce.models.registry import register
from induce.trees.kinds import DISTANCE


class ONLSTMConfig(AWDConfig):
    """ON-LSTM hyper-parameters (defaults: Shen et al. 2019, PTB)."""

    emb_size: PositiveInt = 400
    hidden_size: PositiveInt = 1150
    n_layers: int = pydantic.Field(3, ge=2)
    chunk_size: int = pydantic.Field(10, ge=1, description="units per chunk (C); sizes must be multiples")
    dropout: DropoutRate = 0.45
    dropouth: DropoutRate = 0.3
    dropouti: DropoutRate = 0.5
    dropoute: DropoutRate = 0.1
    wdrop: DropoutRate = 0.45
    distance_layer: int = pydantic.Field(1, ge=0, description="layer (0-based) whose distances parse")
    ar_target: Literal["raw", "dropped"] = pydantic.Field(
        "raw", description="AR on the last layer's raw output (ON-LSTM code) or after the output dropout (AWD-LSTM)"
    )
    dropconnect_scale: Literal["eval", "train"] = pydantic.Field(
        "eval",
        description="DropConnect: no rescale in training, weight * (1 - wdrop) at evaluation (ON-LSTM code), "
        "or kept weights / (1 - wdrop) in training (AWD-LSTM)",
    )
    gate_biases: Literal["two", "one"] = pydantic.Field(
        "two",
        description="two: input and recurrent bias per gate, each U(+-1/sqrt(fan_in)) (ON-LSTM code's two "
        "nn.Linear); one: a single zero-initialised bias (what checkpoints without this key were trained with)",
    )

    #: Checkpoints written before ``gate_biases`` existed have one zero-initialised bias per layer.
    stored_defaults: ClassVar[dict] = {"gate_biases": "one"}

    @pydantic.model_validator(mode="after")
    def _check_sizes(self):
        for size in (self.hidden_size, self.emb_size):
            if size % self.chunk_size:
                raise ValueError(f"size {size} is not a multiple of chunk_size {self.chunk_size}")
        if self.distance_layer >= self.n_layers:
            raise ValueError(f"distance_layer {self.distance_layer} >= n_layers {self.n_layers}")
        return self


class ONLSTMLayer(nn.Module):
    """One ON-LSTM layer with DropConnect on the hidden-to-hidden matrix (``scale_at_eval``: see
    :func:`induce.models.common.awd.dropconnect`).

    Parameters (``G = 2p + 4H`` gate rows): ``weight_ih [G, I]``, ``weight_hh [G, H]``, ``bias [G]``
    (the input projection's) and, with ``gate_biases="two"``, ``bias_hh [G]`` (the recurrent
    projection's); see the module docstring for their initialisation.

    forward: ``x [B, T, I]``, ``(h [B, H], c [B, H])`` ->
    ``(out [B, T, H], (h [B, H], c [B, H]), distances [B, T])``.
    """

    def __init__(self, input_size: int, hidden_size: int, chunk_size: int, wdrop: float, scale_at_eval: bool = False,
                 gate_biases: str = "two"):
        super().__init__()
        if gate_biases not in ("two", "one"):
            raise ValueError(f"gate_biases {gate_biases!r}: use 'two' or 'one'")
        self.input_size, self.hidden_size, self.chunk_size, self.wdrop = input_size, hidden_size, chunk_size, wdrop
        self.scale_at_eval = scale_at_eval
        self.n_chunks = hidden_size // chunk_size
        gate_size = 2 * self.n_chunks + 4 * hidden_size
        # Layout of the gate vector: [master forget (p) | master input (p) | f | i | o (H each) | cell (H)]
        # so that one sigmoid covers f, i, o.
        self.weight_ih = nn.Parameter(torch.empty(gate_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(gate_size, hidden_size))
        self.bias = nn.Parameter(torch.zeros(gate_size))
        # Registered after the others: with one bias the parameters (and the optimiser's indices)
        # are those of checkpoints written before the second bias existed.
        self.bias_hh = nn.Parameter(torch.zeros(gate_size)) if gate_biases == "two" else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s default for the code's ``ih`` and ``hh`` layers: weight and bias of each
        ``U(+-1/sqrt(fan_in))``; with one bias, that bias is 0. Draws in parameter order."""
        bound_ih, bound_hh = self.input_size**-0.5, self.hidden_size**-0.5
        with torch.no_grad():
            self.weight_ih.uniform_(-bound_ih, bound_ih)
            self.weight_hh.uniform_(-bound_hh, bound_hh)
            if self.bias_hh is None:
                self.bias.zero_()
            else:
                self.bias.uniform_(-bound_ih, bound_ih)
                self.bias_hh.uniform_(-bound_hh, bound_hh)

    def gate_bias(self) -> torch.Tensor:
        """``[G]`` bias added to the gate pre-activations (the sum of both with two biases)."""
        return self.bias if self.bias_hh is None else self.bias + self.bias_hh

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        batch, steps, _ = x.shape
        p = self.n_chunks
        # Input projections of all time steps in one matmul; time-major for cheap per-step slices.
        # Both biases join here, once per forward: the cell step (and its fused kernel) sees the sum.
        pre = torch.addmm(self.gate_bias(), x.transpose(0, 1).reshape(steps * batch, -1), self.weight_ih.t()).float()
        # unbind (not pre[t]): its backward stacks the step gradients once instead of filling a
        # full-size zero tensor per step.
        pre = pre.view(steps, batch, -1).unbind(0)
        # One DropConnect mask per forward (per BPTT segment), as in AWD-LSTM; stored [H, G] so the
        # per-step product is a plain row-major GEMM.
        weight_hh = dropconnect(self.weight_hh, self.wdrop, self.training, scale_at_eval=self.scale_at_eval)
        recurrent = RecurrentProjection(weight_hh.t().contiguous())
        h, c = state
        outputs, distances = [], []
        for t in range(steps):
            # The cell step (both cumax, the gates, the state update): on CUDA one fused Triton
            # kernel forward and one backward; on CPU, or with --kernels torch, the same step as
            # separate PyTorch ops (induce.kernels.onlstm_cell; the kernels option picks the tier).
            h, c, master_forget = onlstm_cell(recurrent(pre[t], h), c, p)  # [B, H], [B, H], [B, p]
            outputs.append(h)
            distances.append(master_forget)
        out = torch.stack(outputs, 1)
        # 1 - mean over chunks of cf: expected breaking point / p (computed once for all steps).
        dist = 1.0 - torch.stack(distances, 1).mean(-1)
        return out, (h, c), dist


@register
class ONLSTM(TiedLanguageModel):
    """ON-LSTM language model; parses with the distances of ``config.distance_layer``."""

    name = "onlstm"
    description = "ON-LSTM (Shen et al., 2019): cumax master gates; distances from the master forget gate"
    display_name = "ON-LSTM"
    published = {"lm": {"value": 56.17, "source": "Shen et al. 2019, ON-LSTM, Table 1, PTB test"},
                 "all_lengths": {"value": 47.7, "std": 1.5, "source": "Shen et al. 2019, ON-LSTM, Table 2",
                                 "note": "48.1 in Kim, Dyer & Rush 2019, Table 1"}}
    parser_kind = DISTANCE
    Config = ONLSTMConfig
    untied_output_init = "uniform"  # init_weights: the decoder weight U(+-initrange), its own draw

    def __init__(self, vocab_size: int, config: ONLSTMConfig | None = None):
        super().__init__(vocab_size, config)
        cfg = self.config
        sizes = [cfg.emb_size] + [cfg.hidden_size] * (cfg.n_layers - 1) + [cfg.emb_size]
        self.layers = nn.ModuleList(
            ONLSTMLayer(sizes[depth], sizes[depth + 1], cfg.chunk_size, cfg.wdrop,
                        scale_at_eval=cfg.dropconnect_scale == "eval",
                        gate_biases=cfg.gate_biases)
            for depth in range(cfg.n_layers)
        )

    def init_state(self, batch_size: int, device="cpu"):
        """List of ``(h [B, H_l], c [B, H_l])`` per layer, zeros."""
        weight = self.embedding.weight
        return [
            (weight.new_zeros(batch_size, layer.hidden_size, device=device),
             weight.new_zeros(batch_size, layer.hidden_size, device=device))
            for layer in self.layers
        ]

    def _run(self, tokens: torch.Tensor, state, n_layers: int | None = None):
        """Run the first ``n_layers`` layers (all by default).

        ``dropped_outputs[l]`` is layer ``l``'s output after its dropout, except the last layer's with
        ``ar_target = raw``: its raw output (what AR sees; see the module docstring).
        """
        cfg = self.config
        x = locked_dropout(self.embed(tokens), cfg.dropouti, self.training)
        raw_outputs, dropped_outputs, new_state, layer_distances = [], [], [], []
        for depth, layer in enumerate(self.layers[:n_layers]):
            out, layer_state, dist = layer(x, state[depth])
            new_state.append(layer_state)
            raw_outputs.append(out)
            layer_distances.append(dist)
            last = depth == len(self.layers) - 1
            x = locked_dropout(out, cfg.dropout if last else cfg.dropouth, self.training)
            dropped_outputs.append(out if last and cfg.ar_target == "raw" else x)
        return x, new_state, raw_outputs, dropped_outputs, torch.stack(layer_distances, 0)

    def forward(self, tokens: torch.Tensor, state, gold_spans=None) -> LMOutput:
        """``tokens [B, T]`` -> hidden ``[B, T, E]``; structure ``distances [B, T]`` and
        ``layer_distances [L, B, T]``."""
        hidden, new_state, raw, dropped, layer_distances = self._run(tokens, state)
        return LMOutput(
            hidden=hidden, state=new_state, raw_outputs=raw, dropped_outputs=dropped,
            structure={"distances": layer_distances[self.config.distance_layer], "layer_distances": layer_distances},
        )

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Distances ``[B, T]`` of right-padded sentences (padding only follows, so it cannot leak).

        Only the layers up to ``distance_layer`` run; ``layer_distances [L', B, T]`` holds theirs.
        """
        state = self.init_state(tokens.size(0), tokens.device)
        *_, layer_distances = self._run(tokens, state, n_layers=self.config.distance_layer + 1)
        return {"distances": layer_distances[self.config.distance_layer], "layer_distances": layer_distances}
