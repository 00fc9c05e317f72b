"""PaLM as released (Noahs-ARK/PaLM) vs as in the paper: ``model.variant`` and the released schedule
(``optim.scorer_optimizer: adam``). Each point of the released code is pinned on tiny inputs, checked
by hand-written loops, not by the implementation's own formulas."""
from __future__ import annotations

import inspect
import json
import math

import pytest
import torch

from induce.config import ConfigError, load_config, model_config_path
from induce.models.configs import resolve_config
from induce.models.palm.model import RELEASED_DEFAULTS, SCORER_MARK, PaLM, PaLMConfig, SpanAttention
from induce.models.registry import get_model_class
from induce.training import checkpoint
from induce.training import optim as optim_module
from induce.training.optim import Schedule, ScorerSplitOptimizer, averaged_parameters, build_optimizer, clip_gradients
from induce.trees.decoders import parse_batch

from helpers import TinyLSTM, make_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 23
TINY = dict(emb_size=12, hidden_size=16, rrnn_size=5, attention_size=7, max_span_length=4)
NO_DROPOUT = dict(dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0, wdrop=0.0)


def make(variant: str, name: str = "palm", seed: int = 0, **config) -> PaLM:
    cls = get_model_class(name)
    torch.manual_seed(seed)
    return cls(VOCAB, cls.Config(**{**TINY, **config, "variant": variant}))


# ------------------------------------------------------------------------------------------- config


def test_released_variant_defaults_to_train_sh_sizes_and_explicit_values_win():
    released = PaLMConfig(variant="released")
    assert {k: getattr(released, k) for k in RELEASED_DEFAULTS} == {
        "hidden_size": 1120, "wdrop": 0.5, "dropouth": 0.3, "max_span_length": 10}
    paper = PaLMConfig()
    assert (paper.variant, paper.hidden_size, paper.wdrop, paper.dropouth, paper.max_span_length) == (
        "paper", 1020, 0.45, 0.2, 20)
    assert PaLMConfig(variant="released", hidden_size=64).hidden_size == 64
    with pytest.raises(ValueError, match="relevant_set"):
        PaLMConfig(variant="released", relevant_set=2)


def test_configs_use_the_released_variant_and_schedule():
    for name in ("palm", "palm-s", "palm-rb"):
        cfg = resolve_config(load_config(name))
        assert cfg.model["variant"] == "released" and cfg.model["hidden_size"] == 1120
        o = cfg.optim
        assert (o.optimizer, o.lr, o.asgd, o.nonmono, o.clip) == ("sgd", 30.0, "nonmono", 15, 0.25)
        assert (o.scorer_optimizer, o.scorer_lr, o.scorer_clip) == ("adam", 1e-3, 1.0)
    paper = resolve_config(load_config(config_file=model_config_path("palm").parent / "palm-paper.yaml"))
    assert paper.model["variant"] == "paper" and paper.model["hidden_size"] == 1020
    assert (paper.optim.optimizer, paper.optim.asgd, paper.optim.scorer_optimizer) == ("adam", "epoch", "shared")
    # the scorer's own Adam needs a model that has a span scorer: a config error naming the key
    with pytest.raises(ConfigError, match=r"optim\.scorer_optimizer.*'onlstm'"):
        resolve_config(load_config("onlstm", overrides=["optim.scorer_optimizer=adam"]))
    # the variant alone flips the sizes (the base configs leave them to it)
    assert resolve_config(load_config("palm", overrides=["model.variant=paper"])).model["hidden_size"] == 1020


# ------------------------------------------------------------------------------------------- model


@pytest.mark.parametrize("variant,n_spans", [("paper", 4), ("released", 3)])
def test_number_of_scored_spans(variant, n_spans):
    """released scores m-1 spans per row (span_parser.py builds max_span_length - 1), the paper m."""
    m = TINY["max_span_length"]
    model = make(variant).eval()
    steps = 7
    scores = model(torch.randint(0, VOCAB, (2, steps)), model.init_state(2)).structure["span_scores"]
    assert scores.shape == (2, steps, m)
    for t in range(steps - 1):  # the last row has no next query
        for k in range(m):
            assert bool(torch.isfinite(scores[:, t, k]).all()) == (k < n_spans and t - k >= 0), (t, k)
    # with a carried memory every row has all its spans
    first = model(torch.randint(0, VOCAB, (2, steps)), model.init_state(2))
    out = model(torch.randint(0, VOCAB, (2, steps)), first.state)
    assert int(torch.isfinite(out.structure["span_scores"][:, :-1]).sum(-1).unique().item()) == n_spans


def _tiny_rrnn(variant: str) -> tuple[SpanAttention, torch.Tensor]:
    """A 1-unit-per-direction rational RNN on 2-d inputs with update logits far from tanh's linear range."""
    att = SpanAttention(hidden_size=2, rrnn_size=1, attention_size=3, variant=variant)
    with torch.no_grad():
        # rows: [f_fwd, u_fwd, f_bwd, u_bwd]
        att.rrnn.weight.copy_(torch.tensor([[0.5, -0.2], [2.0, 1.0], [-0.3, 0.4], [-1.5, 2.5]]))
        if variant == "released":
            att.rrnn_forget_bias.copy_(torch.tensor([[0.1], [-0.2]]))
        else:
            att.rrnn.bias.copy_(torch.tensor([0.1, 0.0, -0.2, 0.0]))
    h = torch.tensor([[[1.0, 2.0], [-1.0, 0.5], [2.0, -1.0]]])  # [B=1, T=3, 2]
    return att, h


@pytest.mark.parametrize("variant", ["paper", "released"])
def test_rational_rnn_update_tanh_only_in_paper(variant):
    att, h = _tiny_rrnn(variant)
    c_fwd, logf_fwd, c_bwd, logf_bwd = att.span_inputs(h)
    squash = math.tanh if variant == "paper" else (lambda x: x)
    rows = h[0].tolist()
    wf, wu, wfb, wub = att.rrnn.weight.tolist()
    bf, bfb = (0.1, -0.2)

    def run(order, w_f, w_u, b_f):
        c, out = 0.0, {}
        for t in order:
            f = 1 / (1 + math.exp(-(w_f[0] * rows[t][0] + w_f[1] * rows[t][1] + b_f)))
            u = (1 - f) * squash(w_u[0] * rows[t][0] + w_u[1] * rows[t][1])
            c = f * c + u
            out[t] = (c, math.log(f))
        return [out[t] for t in range(len(rows))]

    fwd, bwd = run([0, 1, 2], wf, wu, bf), run([2, 1, 0], wfb, wub, bfb)
    assert c_fwd[0, :, 0].tolist() == pytest.approx([c for c, _ in fwd], abs=1e-6)
    assert logf_fwd[0, :, 0].tolist() == pytest.approx([lf for _, lf in fwd], abs=1e-6)
    assert c_bwd[0, :, 0].tolist() == pytest.approx([c for c, _ in bwd], abs=1e-6)
    assert logf_bwd[0, :, 0].tolist() == pytest.approx([lf for _, lf in bwd], abs=1e-6)
    if variant == "released":  # the update logit 2*1 + 1*2 = 4 is far outside tanh's range: tanh would show
        assert c_fwd[0, 0, 0].item() > 1.0


def test_released_span_gate_scores_and_context_by_hand():
    """span_parser.py: g' = tanh(sigmoid(W_g h_query + b) * g(span)); s = v . tanh(W_q h_query + b + W_s g');
    context = sum softmax(s) g'; m - 1 spans ending at t - 1 for the query at t."""
    torch.manual_seed(3)
    m, steps, hid, d = 4, 6, 5, 2
    att = SpanAttention(hidden_size=hid, rrnn_size=d, attention_size=3, variant="released").double().eval()
    captured = {}
    att.mix_context = lambda h, context, residual=None: captured.setdefault("context", context)
    h = torch.randn(1, steps, hid, dtype=torch.float64)
    _, scores = att(h, None, m)
    context = captured["context"]
    def sig(x):
        return 1 / (1 + math.exp(-x))

    W, b = att.rrnn.weight.tolist(), att.rrnn_forget_bias.tolist()
    x = h[0].tolist()
    def dot(w, v):
        return sum(a * c for a, c in zip(w, v))

    def span_rep(i, j):
        """Run each direction's rational RNN over [i, j] alone (no tanh on u, no u bias)."""
        rep = []
        for direction, order in ((0, range(i, j + 1)), (1, range(j, i - 1, -1))):
            for unit in range(d):
                w_f, w_u = W[direction * 2 * d + unit], W[direction * 2 * d + d + unit]
                c = 0.0
                for t in order:
                    f = sig(dot(w_f, x[t]) + b[direction][unit])
                    c = f * c + (1 - f) * dot(w_u, x[t])
                rep.append(c)
        return rep

    w_span, v = att.w_span.tolist(), att.v.tolist()
    for t in range(1, steps):  # query position t attends over the spans ending at t - 1
        end = t - 1
        gate = [sig(dot(wg, x[t]) + bg) for wg, bg in zip(att.span_gate.weight.tolist(), att.span_gate.bias.tolist())]
        query = [dot(wq, x[t]) + bq for wq, bq in zip(att.query.weight.tolist(), att.query.bias.tolist())]
        reps, expect = [], []
        for k in range(m - 1):
            if end - k < 0:
                expect.append(-math.inf)
                continue
            g = [math.tanh(gi * ri) for gi, ri in zip(gate, span_rep(end - k, end))]
            reps.append(g)
            hidden = [math.tanh(query[a] + sum(g[r] * w_span[r][a] for r in range(2 * d))) for a in range(3)]
            expect.append(dot(v, hidden))
        assert scores[0, end, : m - 1].tolist() == pytest.approx(expect, abs=1e-9)
        assert scores[0, end, m - 1].item() == -math.inf
        finite = [s for s in expect if s != -math.inf]
        z = sum(math.exp(s) for s in finite)
        ctx = [sum(math.exp(s) / z * rep[r] for s, rep in zip(finite, reps)) for r in range(2 * d)]
        assert context[0, t].tolist() == pytest.approx(ctx, abs=1e-9)
    assert context[0, 0].abs().sum().item() == 0.0  # nothing before the first position


@pytest.mark.parametrize("variant", ["paper", "released"])
def test_residual_form(variant):
    torch.manual_seed(1)
    hid, d = 4, 2
    att = SpanAttention(hidden_size=hid, rrnn_size=d, attention_size=3, variant=variant, dropout=0.5).double()
    h, a, raw = (torch.randn(2, 3, n, dtype=torch.float64) for n in (hid, 2 * d, hid))
    att.eval()
    out = att.mix_context(h, a, raw)
    if variant == "released":  # model.py: raw_rnn_h * gate + tanh(W a) * (1 - gate), gate on [h; a]
        gate = torch.sigmoid(att.mix_gate(torch.cat([h, a], -1)))
        expect = raw * gate + torch.tanh(att.mix_mlp(a)) * (1 - gate)
    else:  # Eq. 6: g * tanh(W [h; a]) + (1 - g) * h
        w = att.mix.weight
        gate = torch.sigmoid(torch.cat([h, a], -1) @ w[hid:].T + att.mix.bias[hid:])
        expect = gate * torch.tanh(torch.cat([h, a], -1) @ w[:hid].T + att.mix.bias[:hid]) + (1 - gate) * h
    torch.testing.assert_close(out, expect)
    att.train()
    torch.manual_seed(7)
    out = att.mix_context(h, a, raw)
    if variant == "paper":  # no dropout inside the paper's block
        torch.testing.assert_close(out, expect)
        return
    # released: three locked dropouts (context, tanh(W a), the mix), [B, 1, D] masks drawn in that order
    torch.manual_seed(7)
    masks = [torch.empty(2, 1, n, dtype=torch.float64).bernoulli_(0.5) / 0.5 for n in (2 * d, hid, hid)]
    a_d = a * masks[0]
    gate = torch.sigmoid(att.mix_gate(torch.cat([h, a_d], -1)))
    expect = (raw * gate + torch.tanh(att.mix_mlp(a_d)) * masks[1] * (1 - gate)) * masks[2]
    torch.testing.assert_close(out, expect)


def test_released_model_uses_the_undropped_layer_output_as_residual():
    """With only dropouth on, the released residual is the raw output: h_hat differs from the paper's
    use of the dropped output, and with dropouth = 0 the two inputs coincide."""
    model = make("released", **{**NO_DROPOUT, "dropouth": 0.0}).train()
    seen = {}
    original = model.span_attention.mix_context

    def spy(h, context, residual=None):
        seen["h"], seen["residual"] = h, residual
        return original(h, context, residual)

    model.span_attention.mix_context = spy
    model(torch.randint(0, VOCAB, (2, 5)), model.init_state(2))
    torch.testing.assert_close(seen["h"], seen["residual"])
    model.config.dropouth = 0.5  # the layer's dropout now differs from its raw output
    model(torch.randint(0, VOCAB, (2, 5)), model.init_state(2))
    assert not torch.allclose(seen["h"], seen["residual"])


@pytest.mark.parametrize("name", ["palm", "palm-s", "palm-rb"])
def test_released_variant_trains(name):
    model = make("released", name=name).train()
    tokens = torch.randint(0, VOCAB, (2, 6))
    gold = None
    if name == "palm-s":
        gold = torch.zeros(2, 6, TINY["max_span_length"])
        gold[:, :, 1] = 1.0
    out = model(tokens, model.init_state(2), gold_spans=gold)
    loss = model.logits(out.hidden).logsumexp(-1).mean() + (out.extra_loss if out.extra_loss is not None else 0)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["span_attention.span_gate.weight"] is not None or name == "palm-rb"
    assert grads["span_attention.mix_mlp.weight"] is not None and grads["span_attention.rrnn_forget_bias"] is not None
    if name == "palm-rb":  # fixed scores k + 1 over the m - 1 spans
        scores = out.structure["span_scores"][0, 3]
        assert scores[:3].tolist() == [1.0, 2.0, 3.0] and scores[3].item() == -math.inf


# ------------------------------------------------------------------------------------------- parsing


def test_state_carried_across_parsed_sentences_only_in_released(monkeypatch):
    s1, s1_other, s2 = [3, 4, 5, 6], [9, 10, 11, 12, 13], [7, 8, 9]
    eos = 0
    released = make("released", max_span_length=3).eval()
    after_s1 = released.parse_stream([s1, s2], eos)
    after_other = released.parse_stream([s1_other, s2], eos)
    assert after_s1[1].shape == (3, 5)  # 3 words; span count lifted to the segment length + 1
    assert not torch.allclose(after_s1[1][:, :3], after_other[1][:, :3])  # s2's scores depend on s1
    # the first sentence is read from a fresh state, exactly as the batched parser reads it
    fresh = released.parse_structure(torch.tensor([[eos, *s1, eos]]), torch.tensor([6]))["span_scores"][0]
    torch.testing.assert_close(after_s1[0], fresh[1:5])
    # the span memory does not carry: no span of s2 reaches into s1 (row i has i + 1 spans)
    assert torch.isfinite(after_s1[1]).sum(-1).tolist() == [1, 2, 3]

    calls = []
    real = type(released).parse_stream
    monkeypatch.setattr(type(released), "parse_stream", lambda self, *a: calls.append(a) or real(self, *a))
    trees = parse_batch(released, [s1, s2], eos_id=eos)
    assert len(calls) == 1 and [t.leaves() for t in trees] == [[str(i) for i in s1], [str(i) for i in s2]]
    paper = make("paper", max_span_length=3).eval()
    calls.clear()
    parse_batch(paper, [s1, s2], eos_id=eos)
    assert calls == [] and not paper.parse_state_carry and released.parse_state_carry


@pytest.mark.parametrize("chunk_tokens", [1, 7, 4096])
def test_parse_stream_equals_segment_by_segment_reading(chunk_tokens):
    """The layers below the span attention run over several segments per call (chunk_tokens); the result
    is the released eval_parsing.py's reading: one segment at a time, LSTM states carried, span memory reset."""
    eos = 0
    model = make("released", max_span_length=3).eval()
    torch.manual_seed(2)
    sentences = [torch.randint(1, VOCAB, (n,)).tolist() for n in (4, 1, 6, 2, 5)]
    got = model.parse_stream(sentences, eos, chunk_tokens=chunk_tokens)
    state = model.init_state(1)
    with torch.no_grad():
        for index, sentence in enumerate(sentences):
            ids = ([eos] if index == 0 else []) + sentence + [eos]
            tokens = torch.tensor([ids])
            _, (lstm_states, _), _, _, scores = model._run(tokens, state, len(ids) + 1, scores_only=True)
            state = (lstm_states + state[0][len(lstm_states):], None)
            offset = 1 if index == 0 else 0
            torch.testing.assert_close(got[index], scores[0, offset : offset + len(sentence)], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------- schedule


def released_optim(*overrides):
    return load_config("palm", overrides=list(overrides)).optim


def test_scorer_parameters_are_marked():
    model = make("released")
    marked = {n for n, p in model.named_parameters() if getattr(p, SCORER_MARK, False)}
    assert marked == {"span_attention.rrnn.weight", "span_attention.rrnn_forget_bias",
                      "span_attention.span_gate.weight", "span_attention.span_gate.bias",
                      "span_attention.query.weight", "span_attention.query.bias",
                      "span_attention.w_span", "span_attention.v"}
    model.to(torch.float64)  # the mark lives on the parameter objects, which .to keeps
    assert sum(getattr(p, SCORER_MARK, False) for p in model.parameters()) == len(marked)


def test_released_schedule_splits_lm_sgd_and_scorer_adam():
    model = make("released")
    cfg = released_optim()
    opt = build_optimizer(model.parameters(), cfg, groups=model.param_groups(cfg))
    assert isinstance(opt, ScorerSplitOptimizer)
    sgd, adam = opt.optimizers
    assert isinstance(sgd, torch.optim.SGD) and isinstance(adam, torch.optim.Adam)
    scorer = {id(p) for p in model.parameters() if getattr(p, SCORER_MARK, False)}
    assert {id(p) for g in adam.param_groups for p in g["params"]} == scorer
    assert {id(p) for g in sgd.param_groups for p in g["params"]} == {id(p) for p in model.parameters()} - scorer
    assert sgd.param_groups[0]["lr"] == 30 and adam.param_groups[0]["lr"] == 1e-3
    assert adam.param_groups[0]["weight_decay"] == cfg.wdecay == sgd.param_groups[0]["weight_decay"]
    # the segment-length lr scaling touches the LM's SGD only
    Schedule(cfg).step_lr(opt, 0.5)
    assert sgd.param_groups[0]["lr"] == 15 and adam.param_groups[0]["lr"] == 1e-3
    # each part clipped at its own norm: LM at 0.25, scorer at 1.0
    for p in model.parameters():
        p.grad = torch.full_like(p, 3.0)
    clip_gradients(opt, list(model.parameters()), cfg.clip)
    def norm(ps):
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ps])).item()

    lm_params = [p for p in model.parameters() if id(p) not in scorer]
    scorer_params = [p for p in model.parameters() if id(p) in scorer]
    assert norm(lm_params) == pytest.approx(0.25) and norm(scorer_params) == pytest.approx(1.0)
    # the split is PaLM's own (its param_groups hook): the optimiser names no family, and a model with the
    # default hook gets the plain optimiser (the config check refuses optim.scorer_optimizer=adam for it)
    assert not any(name in inspect.getsource(optim_module).lower() for name in ("scorer_mark", "scorer_lr"))
    (group,) = get_model_class("onlstm").param_groups(TinyLSTM(11), cfg)
    assert group.adam_lr is None and len(group.params) == len(list(TinyLSTM(11).parameters()))
    plain = build_optimizer(model.parameters(), cfg.model_copy(update={"scorer_optimizer": "shared"}),
                            groups=model.param_groups(cfg.model_copy(update={"scorer_optimizer": "shared"})))
    assert isinstance(plain, torch.optim.SGD)


def test_released_schedule_switches_on_nonmono_15_to_one_asgd_over_everything():
    model = make("released")
    cfg = released_optim()
    schedule = Schedule(cfg)
    losses = [10.0 - 0.1 * i for i in range(16)]  # 16 improving evaluations, then one worse than 15 back
    assert not any(schedule.after_evaluation(e, loss) for e, loss in enumerate(losses, 1))
    assert schedule.after_evaluation(17, losses[0] + 0.05)
    assert schedule.base_lr == 30
    opt = build_optimizer(model.parameters(), cfg, asgd=True, groups=model.param_groups(cfg))
    (asgd,) = opt.optimizers
    assert isinstance(asgd, torch.optim.ASGD) and asgd.param_groups[0]["lr"] == 30
    assert len(asgd.param_groups[0]["params"]) == len(list(model.parameters()))
    # main.py after the switch: only the LM parameters are clipped
    for p in model.parameters():
        p.grad = torch.full_like(p, 3.0)
    clip_gradients(opt, list(model.parameters()), cfg.clip)
    for p in model.parameters():
        if getattr(p, SCORER_MARK, False):
            assert torch.all(p.grad == 3.0)
    # the window is 15 evaluations: after 15 the same bad loss does not switch yet, with nonmono 14 it does
    for nonmono, switched in ((15, False), (14, True)):
        early = Schedule(released_optim(f"optim.nonmono={nonmono}"))
        calls = [early.after_evaluation(e, loss) for e, loss in enumerate([*losses[:15], losses[0] + 0.05], 1)]
        assert calls[-1] == switched


@pytest.mark.parametrize("asgd", [False, True])
def test_split_optimizer_state_round_trips_through_the_checkpoint_format(asgd):
    cfg = released_optim()

    def steps(model, opt, n):
        for i in range(n):
            torch.manual_seed(100 + i)
            opt.zero_grad(set_to_none=True)
            out = model(torch.randint(0, VOCAB, (2, 5)), model.init_state(2))
            model.logits(out.hidden).logsumexp(-1).mean().backward()
            clip_gradients(opt, list(model.parameters()), cfg.clip)
            opt.step()

    a, b = make("released", **NO_DROPOUT), make("released", **NO_DROPOUT)
    opt_a = build_optimizer(a.parameters(), cfg, asgd=asgd, groups=a.param_groups(cfg))
    steps(a, opt_a, 2)
    tensors, meta = checkpoint.split_optimizer_state(opt_a.state_dict())
    tensors = {k: v.clone() for k, v in tensors.items()}  # as read from a file: not a's own state tensors
    meta = json.loads(json.dumps(meta))
    b.load_state_dict(a.state_dict())
    opt_b = build_optimizer(b.parameters(), cfg, asgd=asgd, groups=b.param_groups(cfg))
    opt_b.load_state_dict(checkpoint.join_optimizer_state(tensors, meta))
    steps(a, opt_a, 1)
    steps(b, opt_b, 1)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    if asgd:
        with averaged_parameters(a, opt_a):
            averaged = [p.detach().clone() for p in a.parameters()]
        assert not all(torch.equal(x, p) for x, p in zip(averaged, a.parameters()))


def test_trainer_runs_the_released_schedule_and_resumes(tmp_path):
    """Through the trainer: SGD + scorer Adam, the switch to ASGD, a kill and a resume (same weights)."""
    from rich.console import Console

    from induce.training import resume, train

    corpus = make_corpus(tmp_path / "corpora", train=40, valid=8, test=4)
    cfg = load_config("palm", overrides=[
        f"data.corpus={corpus}", "data.batch_size=4", "data.eval_batch_size=3", "data.bptt=8", "data.min_bptt=2",
        "data.bptt_std=2", "train.epochs=2", "train.log_interval=4", "train.device=cpu", "train.dev_f1=false",
        "train.checkpoint_every=3", "model.emb_size=8", "model.hidden_size=8", "model.rrnn_size=3",
        "model.attention_size=4", "model.max_span_length=3", "optim.lr=2", "optim.asgd=epoch",
        "optim.asgd_after_epochs=1",
    ])
    quiet = Console(quiet=True)
    straight = tmp_path / "straight"
    train(cfg, straight, console=quiet, progress=False)
    lines = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    assert [line["optimizer"] for line in lines] == ["ScorerSplitOptimizer"] * 2
    assert all(math.isfinite(line["valid_loss"]) for line in lines)

    class Killed(Exception):
        pass

    def kill(trainer, epoch, batch):
        if epoch == 2 and batch == 4:
            raise Killed

    killed = tmp_path / "killed"
    with pytest.raises(Killed):
        train(cfg, killed, console=quiet, progress=False, on_batch=kill)
    _, meta = checkpoint.load_checkpoint(killed / "last")
    assert meta["schedule"]["asgd_active"] and meta["optimizer_kind"] == "ScorerSplitOptimizer"
    resume(killed, console=quiet, progress=False)
    a, _ = checkpoint.load_checkpoint(straight / "last")
    b, _ = checkpoint.load_checkpoint(killed / "last")
    for key in a:
        if key.startswith("model."):
            assert torch.equal(a[key], b[key]), key


def test_predict_trees_parses_a_released_model_as_one_stream_in_corpus_order(monkeypatch):
    """induce.inference.predict.predict_trees groups sentences by length for speed; a released model gets
    them all, in the given order, in one stream (so the carried state follows the corpus)."""
    from pathlib import Path

    from induce.data.corpus import Vocab
    from induce.inference.loading import LoadedRun
    from induce.inference.predict import predict_trees

    vocab = Vocab(["<unk>", "<eos>", *[f"w{i}" for i in range(VOCAB - 2)]])
    sentences = [["w1", "w2", "w3", "w4", "w5"], ["w6", "w7"], ["w8", "w9", "w10"]]
    streams = []
    for variant, expected_calls in (("released", 1), ("paper", 0)):
        model = make(variant, max_span_length=3).eval()
        real = type(model).parse_stream

        def recorded(self, sents, eos, real=real):
            streams.append(list(sents))
            return real(self, sents, eos)

        monkeypatch.setattr(type(model), "parse_stream", recorded)
        streams.clear()
        trees = predict_trees(LoadedRun(model, vocab, {}, Path(".")), sentences)
        assert [t.leaves() for t in trees] == sentences
        assert len(streams) == expected_calls
        if expected_calls:
            assert streams[0] == [vocab.encode(s) for s in sentences]
