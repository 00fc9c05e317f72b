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
``configs/onlstm.yaml`` (and the class defaults) follow the released code, since that is what
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
"""
from __future__ import annotations

import math
from typing import Literal

import pydantic
import torch
from torch import nn

from induce.kernels import onlstm_cell

from .awd import AWDConfig, DropoutRate, PositiveInt, RecurrentProjection, TiedLanguageModel, dropconnect, locked_dropout
from .base import LMOutput
from .registry import register


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
    :func:`induce.models.awd.dropconnect`).

    forward: ``x [B, T, I]``, ``(h [B, H], c [B, H])`` ->
    ``(out [B, T, H], (h [B, H], c [B, H]), distances [B, T])``.
    """

    def __init__(self, input_size: int, hidden_size: int, chunk_size: int, wdrop: float, scale_at_eval: bool = False):
        super().__init__()
        self.hidden_size, self.chunk_size, self.wdrop = hidden_size, chunk_size, wdrop
        self.scale_at_eval = scale_at_eval
        self.n_chunks = hidden_size // chunk_size
        gate_size = 2 * self.n_chunks + 4 * hidden_size
        # Layout of the gate vector: [master forget (p) | master input (p) | f | i | o (H each) | cell (H)]
        # so that one sigmoid covers f, i, o.
        self.weight_ih = nn.Parameter(torch.empty(gate_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(gate_size, hidden_size))
        self.bias = nn.Parameter(torch.zeros(gate_size))
        nn.init.uniform_(self.weight_ih, -1 / math.sqrt(input_size), 1 / math.sqrt(input_size))
        nn.init.uniform_(self.weight_hh, -1 / math.sqrt(hidden_size), 1 / math.sqrt(hidden_size))

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        batch, steps, _ = x.shape
        p = self.n_chunks
        # Input projections of all time steps in one matmul; time-major for cheap per-step slices.
        pre = torch.addmm(self.bias, x.transpose(0, 1).reshape(steps * batch, -1), self.weight_ih.t()).float()
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
    parser_kind = "distance"
    Config = ONLSTMConfig

    def __init__(self, vocab_size: int, config: ONLSTMConfig | None = None):
        super().__init__(vocab_size, config)
        cfg = self.config
        sizes = [cfg.emb_size] + [cfg.hidden_size] * (cfg.n_layers - 1) + [cfg.emb_size]
        self.layers = nn.ModuleList(
            ONLSTMLayer(sizes[l], sizes[l + 1], cfg.chunk_size, cfg.wdrop, scale_at_eval=cfg.dropconnect_scale == "eval")
            for l in range(cfg.n_layers)
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
        for l, layer in enumerate(self.layers[:n_layers]):
            out, layer_state, dist = layer(x, state[l])
            new_state.append(layer_state)
            raw_outputs.append(out)
            layer_distances.append(dist)
            last = l == len(self.layers) - 1
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
