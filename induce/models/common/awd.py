"""Shared AWD-LSTM pieces (Merity et al., 2018) used by every language model here.

* :func:`embedded_dropout` drops whole word types from the embedding matrix;
* :func:`locked_dropout` (variational dropout) uses one mask per sequence, shared over time;
* :func:`dropconnect` / :class:`WeightDropLSTM`: DropConnect on hidden-to-hidden matrices, the
  dropped matrix computed afresh on every training forward (one mask per BPTT segment) and passed
  explicitly to the computation (no ``_flat_weights`` patching);
* :class:`RecurrentProjection`: ``h_{t-1} @ W`` for Python time loops, with the weight gradient
  computed once per segment instead of once per step (and bf16 under ``torch.autocast``);
* :class:`AWDConfig` holds the hyper-parameters the three models share;
* :class:`TiedLanguageModel` owns the embedding, embedding dropout and the tied output layer.

Every model returns its per-layer outputs before / after dropout in ``LMOutput.raw_outputs`` /
``dropped_outputs``, so the trainer applies AR / TAR.

All tensors are batch-first: tokens ``[B, T]``, states ``[B, T, H]``.
"""
from __future__ import annotations

import functools
from typing import Annotated, ClassVar, Literal, Optional

import pydantic
import torch
import torch.nn.functional as F
from torch import _VF, nn

from induce.models.base import LanguageModel, ModelConfig

# Field types that keep their bounds when a model's config overrides only the default (pydantic drops
# a parent's Field(gt=...) constraints when a subclass redeclares the field with a plain default).
PositiveInt = Annotated[int, pydantic.Field(gt=0)]
DropoutRate = Annotated[float, pydantic.Field(ge=0, lt=1)]


class AWDConfig(ModelConfig):
    """Regularisation and size fields shared by ON-LSTM, PRPN and PaLM (AWD-LSTM names)."""

    emb_size: int = pydantic.Field(400, gt=0, description="word embedding size (= tied output size)")
    hidden_size: int = pydantic.Field(1150, gt=0, description="recurrent state size of the inner layers")
    n_layers: int = pydantic.Field(3, ge=1, description="number of recurrent layers")
    dropout: float = pydantic.Field(0.4, ge=0, lt=1, description="locked dropout on the last layer's output")
    dropouth: float = pydantic.Field(0.25, ge=0, lt=1, description="locked dropout between layers")
    dropouti: float = pydantic.Field(0.5, ge=0, lt=1, description="locked dropout on the embeddings")
    dropoute: float = pydantic.Field(0.1, ge=0, lt=1, description="embedding dropout (whole word types)")
    wdrop: float = pydantic.Field(0.5, ge=0, lt=1, description="DropConnect on hidden-to-hidden weights")
    tie_weights: bool = pydantic.Field(True, description="share the embedding with the output layer")
    init_range: float = pydantic.Field(0.1, gt=0, description="uniform init range of the embedding")


def embedded_dropout(embedding: nn.Embedding, tokens: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Look up ``tokens [B, T]`` -> ``[B, T, E]``, dropping each word type with probability ``p``.

    The same types are dropped everywhere in the batch (rows of the matrix are zeroed and the
    rest rescaled by ``1 / (1 - p)``), as in AWD-LSTM.
    """
    weight = embedding.weight
    if training and p > 0:
        keep = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)
        weight = weight * keep
    return F.embedding(tokens, weight, embedding.padding_idx)


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout on ``x [B, T, D]``: one ``[B, 1, D]`` mask shared over the time axis."""
    if not training or p == 0:
        return x
    mask = x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(1 - p) / (1 - p)
    return x * mask


def dropconnect(weight: torch.Tensor, p: float, training: bool, scale_at_eval: bool = False) -> torch.Tensor:
    """DropConnect: ``weight`` with each entry zeroed with probability ``p``.

    Two scalings with the same expected product:

    * ``scale_at_eval=False`` (inverted, AWD-LSTM's ``WeightDrop`` through ``F.dropout``): in
      training the kept entries are multiplied by ``1 / (1 - p)``; at evaluation the weight is used
      as it is.
    * ``scale_at_eval=True`` (ON-LSTM's ``LinearDropConnect``): in training the kept entries are
      used as they are (no rescale); at evaluation the whole weight is multiplied by ``1 - p``.
    """
    if p == 0:
        return weight
    if not training:
        return weight * (1.0 - p) if scale_at_eval else weight
    # A uniform draw compared with p, not F.dropout: on CPU its bernoulli_ takes ~110 ms for one
    # 1150 x 4830 matrix (2 threads), the comparison ~40 ms; same distribution (keep w.p. 1 - p).
    with torch.no_grad():
        keep = torch.rand_like(weight).ge_(p)  # 1.0 / 0.0 in the weight's dtype
        if not scale_at_eval:
            keep.mul_(1.0 / (1.0 - p))
    return weight * keep


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The lower-precision dtype of an active ``torch.autocast`` on ``device_type``, else ``None``."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


@functools.cache
def _onednn_packing_available() -> bool:
    """Whether this torch build has oneDNN's pre-packed linear ops and they work on this CPU.

    Checked once: a tiny packed product against ``torch.mm`` (the ops are internal to torch, so
    a build or CPU where they are missing or wrong falls back to plain products instead of failing).
    """
    ops = torch.ops.mkldnn
    if not (torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise")):
        return False
    try:
        with torch.no_grad():
            # A private generator: a draw from the global one here, at the first training forward of
            # a process, would shift every later dropout mask (a resumed run would part from the
            # uninterrupted one after its first batch).
            generator = torch.Generator().manual_seed(0)
            x, weight = torch.randn(3, 5, generator=generator), torch.randn(7, 5, generator=generator)
            packed = ops._reorder_linear_weight(weight, 3)
            got = ops._linear_pointwise(x, packed, None, "none", [], "")
            return bool(torch.allclose(got, x @ weight.t(), rtol=1e-4, atol=1e-5))
    except (RuntimeError, NotImplementedError):
        return False


class PackedLinear:
    """``x @ weight.T`` through oneDNN with ``weight [N, K]`` re-laid out once (CPU, fp32).

    A time loop multiplies the same matrix by a small ``[B, K]`` state at every step; a plain GEMM
    call re-packs the whole matrix each time, which for ``B = 20`` costs as much as the product.
    Packed once per forward, the per-step product runs 1.6-1.7x faster with 2 threads at ON-LSTM's
    and PaLM's sizes (1.1-1.3x at PRPN's ``B = 64``; ``bench/results/training.md``). Not differentiable:
    used inside :class:`_RecurrentAddmm`, which has its own backward.
    """

    def __init__(self, weight: torch.Tensor, batch_size: int):
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), batch_size)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")


class _RecurrentAddmm(torch.autograd.Function):
    """``bias + h @ weight`` for one step of a time loop, with the weight gradient deferred.

    Autograd would compute ``h_{t-1}^T g_t`` (a full ``[H, G]`` matrix) and add it to the weight
    gradient at every step: memory-bound work that costs as much as the step itself. Here each step
    only records ``(h_{t-1}, g_t)``; the backward of the *first* step — which autograd runs last,
    since every later step depends on it — turns them into one ``[H, T*B] @ [T*B, G]`` GEMM.
    The per-step products use ``projection``'s oneDNN-packed copies of the weight when it has them.
    """

    @staticmethod
    def forward(ctx, bias, h, weight, projection, is_first):
        ctx.set_materialize_grads(False)  # an unused or undefined gradient comes as None: see backward
        ctx.save_for_backward(h, weight)
        ctx.projection, ctx.is_first = projection, is_first
        with torch.autocast(h.device.type, enabled=False):
            packed = projection.packed_forward(h)
            out = packed(h) if packed is not None else torch.mm(h.to(weight.dtype), weight)
            return bias + out.to(bias.dtype)

    @staticmethod
    def backward(ctx, grad):
        # grad is None when undefined upstream (materialize_grads is off): this step adds nothing, but
        # the first step still turns the other steps' records into the weight gradient.
        h, weight = ctx.saved_tensors
        grad_h = grad_weight = None
        if grad is not None and ctx.needs_input_grad[1]:
            packed = ctx.projection.packed_backward(grad)
            if packed is not None:
                grad_h = packed(grad).to(h.dtype)
            else:
                grad_h = torch.mm(grad.to(weight.dtype), weight.t()).to(h.dtype)
        if ctx.needs_input_grad[2]:
            store = ctx.projection.store
            if grad is not None:
                store.append((h, grad))
            if ctx.is_first and store:
                hs = torch.cat([x for x, _ in store]).to(weight.dtype)
                gs = torch.cat([g for _, g in store]).to(weight.dtype)
                grad_weight = torch.mm(hs.t(), gs)
                store.clear()
        return grad, grad_h, grad_weight, None, None


class RecurrentProjection:
    """``h_{t-1} @ W`` inside a Python time loop (``W: [H, G]``, already DropConnect-ed).

    Call it once per step, first step first: ``gates_t = projection(pre_t [B, G], h [B, H])``.
    Under ``torch.autocast`` the product runs in the autocast dtype (``W`` is cast once per
    forward, not per step) and the result comes back in ``pre_t``'s dtype, so the recurrent state
    stays in full precision. The weight gradient is one GEMM over all steps (see ``_RecurrentAddmm``).
    On CPU in fp32 the per-step products (forward and backward) use oneDNN-packed copies of ``W``
    (:class:`PackedLinear`, made once per forward); ``packing=False`` or the class attribute
    ``use_packing = False`` keeps plain ``torch.mm`` (same values up to fp32 summation order).
    """

    #: Class-wide switch for the oneDNN-packed per-step products (CPU fp32); ``False`` = plain mm.
    use_packing = True

    def __init__(self, weight: torch.Tensor, packing: Optional[bool] = None):
        dtype = autocast_dtype(weight.device.type)
        self.weight = weight if dtype is None else weight.to(dtype)
        self.store: list = []  # (h_{t-1}, grad_t) of every step, for the deferred weight gradient
        self._first = True
        packing = self.use_packing if packing is None else packing
        self._packable = (
            packing and self.weight.device.type == "cpu" and self.weight.dtype == torch.float32
            and _onednn_packing_available()
        )
        self._forward_pack: Optional[PackedLinear] = None
        self._backward_pack: Optional[PackedLinear] = None

    def packed_forward(self, h: torch.Tensor) -> Optional[PackedLinear]:
        """``h @ W`` packed (made on the first step), or None where packing does not apply."""
        if not self._packable or h.dtype != torch.float32:
            return None
        if self._forward_pack is None:
            self._forward_pack = PackedLinear(self.weight.t(), h.size(0))
        return self._forward_pack

    def packed_backward(self, grad: torch.Tensor) -> Optional[PackedLinear]:
        """``grad @ W^T`` packed (made on the backward's first step), or None."""
        if not self._packable or grad.dtype != torch.float32:
            return None
        if self._backward_pack is None:
            self._backward_pack = PackedLinear(self.weight, grad.size(0))
        return self._backward_pack

    def __call__(self, bias: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        first, self._first = self._first, False
        return _RecurrentAddmm.apply(bias, h, self.weight, self, first)


def weights_in_one_chunk(weights: list[torch.Tensor], dtype: Optional[torch.dtype] = None) -> list[torch.Tensor]:
    """``[W_ih, W_hh, b_ih, b_hh]`` as views of one new buffer (of ``dtype``, default the weights'),
    in that order, differentiably.

    cuDNN wants an LSTM's weights in one contiguous chunk laid out as its weight buffer; given
    separate tensors it warns ("RNN module weights are not part of single contiguous chunk of
    memory") and copies them into such a buffer on every call. With DropConnect the dropped
    ``W_hh`` is a new tensor each forward, so the parameters cannot simply be flattened once (as
    ``nn.LSTM.flatten_parameters`` does). Instead the four are concatenated here: the same one copy
    cuDNN would make, but done by us, so that the op finds one chunk and uses it as it is, with no
    warning. For one unidirectional layer cuDNN's layout is, to our reading of PyTorch's
    ``try_get_weight_buf``, exactly this concatenation. Not verified on a GPU in this session: if
    cuDNN still warns, the layout differs and it copies once more (correct values either way; the
    copy is ~2x the weight bytes per layer per forward, well under 1% of a step).

    Under autocast the buffer is cast as a whole (``dtype``): the op's autocast wrapper then finds
    the weights already in its dtype and leaves them (and their one chunk) alone.
    """
    flat = torch.cat([w.reshape(-1) for w in weights])
    if dtype is not None:
        flat = flat.to(dtype)
    return [part.view_as(w) for part, w in zip(flat.split([w.numel() for w in weights]), weights)]


class WeightDropLSTM(nn.Module):
    """One batch-first LSTM layer with DropConnect (``wdrop``) on the hidden-to-hidden matrix.

    The dropped matrix is computed on each forward in training mode (one mask per BPTT segment) and
    passed explicitly to the computation, so gradients reach ``weight_hh`` through the mask and eval
    mode uses the plain weights. Parameters and gate order (i, f, g, o) are PyTorch's.

    Two paths, same result: by default the fused kernel (``torch._VF.lstm`` with explicit
    weights: cuDNN on CUDA, oneDNN on CPU); with ``fused=False`` a time loop with all input
    projections in one GEMM and :class:`RecurrentProjection` for ``h_{t-1} @ W_hh^T``. Measured on
    the 2-core CPU at PaLM's size (3 x 1120, batch 20 x 70, quiet machine) the fused path trains
    PaLM 1.18x faster with 2 threads (317 vs 269 tokens/s) and 1.08x with 1 thread, hence the default
    (a measurement under heavy load had favoured the loop). Under CPU bf16 autocast
    the loop is used (oneDNN has no such LSTM primitive).

    forward: ``x [B, T, I]``, ``(h0 [B, H], c0 [B, H])`` -> ``(out [B, T, H], (h [B, H], c [B, H]))``.
    """

    def __init__(self, input_size: int, hidden_size: int, wdrop: float = 0.0, fused: Optional[bool] = None,
                 one_chunk: Optional[bool] = None, init: Literal["uniform", "orthogonal"] = "uniform"):
        super().__init__()
        self.input_size, self.hidden_size, self.wdrop, self.fused = input_size, hidden_size, wdrop, fused
        self.one_chunk = one_chunk  # None: on CUDA (weights_in_one_chunk)
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size))
        self.reset_parameters(init)

    def reset_parameters(self, init: Literal["uniform", "orthogonal"] = "uniform") -> None:
        """Draw the parameters afresh (called once, at construction; a loaded checkpoint replaces them).

        ``uniform``: every parameter, biases included, from ``U(-1/sqrt(H), 1/sqrt(H))`` (PyTorch's
        ``nn.LSTM``, which AWD-LSTM keeps). ``orthogonal``: the four gate blocks ``[H, I]`` of ``weight_ih``
        and ``[H, H]`` of ``weight_hh`` each orthogonal (:func:`induce.models.common.init.block_orthogonal_`),
        biases zero (PaLM's released ``model.py``, ``init_weights``).
        """
        if init == "uniform":
            bound = self.hidden_size**-0.5
            for weight in self.parameters():
                nn.init.uniform_(weight, -bound, bound)
        elif init == "orthogonal":
            from .init import block_orthogonal_

            block_orthogonal_(self.weight_ih, 4)
            block_orthogonal_(self.weight_hh, 4)
            nn.init.zeros_(self.bias_ih)
            nn.init.zeros_(self.bias_hh)
        else:
            raise ValueError(f"WeightDropLSTM init {init!r}: use uniform or orthogonal")

    @staticmethod
    def _fused_by_default(x: torch.Tensor) -> bool:
        """cuDNN on CUDA; oneDNN on CPU for fp32 only (it has no bf16 autocast LSTM primitive)."""
        if x.is_cuda:
            return True
        return x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")

    @staticmethod
    def _one_chunk_by_default(x: torch.Tensor) -> bool:
        """On CUDA (cuDNN's weight buffer, see :func:`weights_in_one_chunk`); oneDNN on CPU has none."""
        return x.is_cuda

    def effective_weight_hh(self) -> torch.Tensor:
        """``[4H, H]`` hidden-to-hidden matrix this forward uses (dropped in training mode)."""
        return dropconnect(self.weight_hh, self.wdrop, self.training)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        h0, c0 = state
        weight_hh = self.effective_weight_hh()
        fused = self._fused_by_default(x) if self.fused is None else self.fused
        if fused:
            # The carried state keeps the dtype it came in with (fp32 from ``init_state``): under
            # autocast the fused op returns h, c in the autocast dtype, and a state that left an
            # autocast step in bf16/fp16 made the next full-precision step fail ("input and hidden
            # tensors are not the same dtype"). Outside autocast the op needs state and input alike.
            state_dtype = h0.dtype
            if autocast_dtype(x.device.type) is None:
                h0, c0 = h0.to(x.dtype), c0.to(x.dtype)
            weights = [self.weight_ih, weight_hh, self.bias_ih, self.bias_hh]
            one_chunk = self._one_chunk_by_default(x) if self.one_chunk is None else self.one_chunk
            if one_chunk:
                weights = weights_in_one_chunk(weights, autocast_dtype(x.device.type))
            out, h, c = _VF.lstm(
                x, (h0.unsqueeze(0).contiguous(), c0.unsqueeze(0).contiguous()), weights,
                True, 1, 0.0, self.training, False, True,
            )
            return out, (h.squeeze(0).to(state_dtype), c.squeeze(0).to(state_dtype))
        batch, steps, _ = x.shape
        hidden = self.hidden_size
        pre = torch.addmm(self.bias_ih + self.bias_hh, x.transpose(0, 1).reshape(steps * batch, -1), self.weight_ih.t())
        pre = pre.float().view(steps, batch, 4 * hidden).unbind(0)
        recurrent = RecurrentProjection(weight_hh.t().contiguous())
        state_dtype = h0.dtype
        # The loop's state is at least fp32 (pre is fp32): a bf16 state from an autocast step is
        # widened; a float64 state (gradient checks) stays float64, as before.
        loop_dtype = torch.promote_types(torch.float32, h0.dtype)
        h, c = h0.to(loop_dtype), c0.to(loop_dtype)
        outputs = []
        for t in range(steps):
            # chunk, not slicing: the backward of a slice fills a full-size zero tensor per slice.
            in_gate, forget_gate, candidate, out_gate = recurrent(pre[t], h).chunk(4, 1)
            c = torch.addcmul(torch.sigmoid(forget_gate) * c, torch.sigmoid(in_gate), torch.tanh(candidate))
            h = torch.sigmoid(out_gate) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, 1), (h.to(state_dtype), c.to(state_dtype))


class TiedLanguageModel(LanguageModel):
    """Embedding, embedding dropout and the (tied) output layer shared by the models.

    Subclasses build their recurrent layers in ``__init__`` after calling this one and implement
    ``init_state`` / ``forward`` / ``parse_structure``. Constructor contract for every model:
    ``Model(vocab_size, config=None)`` (``config`` defaults to ``Model.Config()``).

    Initialisation: embedding ``U(+-init_range)``, output bias 0. An untied output weight (``tie_weights:
    false``) starts as a copy of the embedding, or, in a model that sets ``untied_output_init =
    "uniform"``, as its own draw from ``U(+-init_range)`` (what ``init_weights`` does to the decoder
    in the PRPN and ON-LSTM code).
    """

    #: "copy": an untied output weight starts as a copy of the embedding; "uniform": its own draw.
    untied_output_init: ClassVar[str] = "copy"

    def __init__(self, vocab_size: int, config: Optional[AWDConfig] = None):
        super().__init__()
        self.config = config if config is not None else self.Config()
        self.vocab_size = vocab_size
        cfg = self.config
        self.embedding = nn.Embedding(vocab_size, cfg.emb_size)
        nn.init.uniform_(self.embedding.weight, -cfg.init_range, cfg.init_range)
        self.output_bias = nn.Parameter(torch.zeros(vocab_size))
        # Untied output layer only when asked for; tied is the default of all three papers.
        self.output_weight = None
        if not cfg.tie_weights:
            self.output_weight = nn.Parameter(self.embedding.weight.detach().clone())
            if self.untied_output_init == "uniform":
                nn.init.uniform_(self.output_weight, -cfg.init_range, cfg.init_range)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [B, T]`` -> embeddings ``[B, T, E]`` after embedding dropout (no locked dropout)."""
        return embedded_dropout(self.embedding, tokens, self.config.dropoute, self.training)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden [B, T, E]`` -> ``[B, T, V]`` (tied weights: ``hidden @ E^T + b``)."""
        weight = self.embedding.weight if self.output_weight is None else self.output_weight
        return F.linear(hidden, weight, self.output_bias)
