"""Relevancy screening in the models: RelLSTM / RelRNN / MemLSTM through the registry,
the config and the trainer; the ``relevant_set`` option of PaLM's span attention and of PRPN's
memory tape (off = the plain model; on = extra spans / slots, checked against brute force)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

from induce.config import ConfigError, load_config
from induce.errors import InduceError
from induce.kernels import span_representations
from induce.models.common.relevancy import RelevancyMemory, relevant_indices
from induce.models.configs import resolve_config
from induce.models.palm import attention as palm_module  # where SpanAttention calls relevant_indices
from induce.models.palm.attention import SpanAttention, relevant_span_representations, relevant_span_starts
from induce.models.prpn import model as prpn_module
from induce.models.prpn import reading as prpn_reading
from induce.models.prpn.model import ReadingLayer, fresh_relevant_state
from induce.models.registry import get_model_class, list_models
from induce.training.trainer import detach_state

from helpers import make_corpus

VOCAB = 23
PALM_TINY = dict(emb_size=12, hidden_size=16, rrnn_size=5, attention_size=7, max_span_length=4)
PRPN_TINY = dict(emb_size=12, hidden_size=16, n_slots=4, n_lookback=2)
RELMEM_TINY = ["model.emb_size=8", "model.hidden_size=10", "model.attention_size=6", "model.nu=3", "model.rho=2"]
LM_ONLY = ("rellstm", "relrnn", "memlstm")


pytestmark = pytest.mark.usefixtures("one_thread")


def make(name: str, seed: int = 0, **config):
    cls = get_model_class(name)
    torch.manual_seed(seed)
    return cls(VOCAB, cls.Config(**config))


def top_rho(beta: list[float], candidates: range, rho: int) -> set[int]:
    """Brute force: the ``rho`` candidates with the largest ``beta``, earlier positions winning ties."""
    return set(sorted(candidates, key=lambda i: (-beta[i], i))[:rho])


# ------------------------------------------------------------------------ LM-only models end to end


def test_lm_only_models_are_registered_with_configs():
    listed = list_models()
    for name in LM_ONLY:
        assert name in listed
        assert not get_model_class(name).parser_kind.parses
        config = load_config(name)  # induce/models/relmem/<name>.yaml over the typed defaults
        assert config.model_name == name and config.train.select_by == "valid_ppl"
        assert config.optim.optimizer == "adam" and config.train.alpha == config.train.beta == 0.0


@pytest.mark.parametrize("name", LM_ONLY)
def test_select_by_dev_f1_is_a_config_error_naming_the_model(name):
    with pytest.raises(ConfigError, match=rf"train\.select_by.*{name}.*parser_kind 'none'"):
        resolve_config(load_config(name, overrides=["train.select_by=dev_f1"]))
    resolve_config(load_config("onlstm", overrides=["train.select_by=dev_f1"]))  # parsing models may select by F1


@pytest.fixture(scope="module")
def rellstm_run(tmp_path_factory):
    """A tiny rellstm trained for one epoch through the trainer on a corpus WITH trees, dev_f1 on."""
    from induce.training import train

    root = tmp_path_factory.mktemp("rellstm")
    corpus = make_corpus(root / "corpora", train=60, valid=10, test=5)
    torch.set_num_threads(1)
    config = load_config("rellstm", overrides=[
        f"data.corpus={corpus}", *RELMEM_TINY, "data.batch_size=4", "data.eval_batch_size=3", "data.bptt=8",
        "train.epochs=1", "train.device=cpu", "train.dev_f1=true", "train.log_interval=5",
    ])
    result = train(config, root / "runs" / "rel", console=Console(quiet=True), progress=False)
    return root, corpus, result


def test_rellstm_trains_through_the_trainer_without_dev_f1(rellstm_run):
    root, _, result = rellstm_run
    assert result.epochs_done == 1 and result.stop_reason == "epochs"
    (metrics,) = result.history
    assert "dev_f1" not in metrics and math.isfinite(metrics["valid_ppl"]) and metrics["best"]
    assert (root / "runs" / "rel" / "best.safetensors").is_file()


def test_rellstm_checkpoint_cannot_parse_with_a_clear_error(rellstm_run, monkeypatch):
    from typer.testing import CliRunner

    from induce.cli.main import app
    from induce.inference.language_model import lm_perplexity
    from induce.inference.loading import load_run
    from induce.inference.predict import predict_trees

    root, corpus, result = rellstm_run
    run = load_run(root / "runs" / "rel")
    with pytest.raises(InduceError, match="'rellstm' cannot parse"):
        predict_trees(run, [["the", "cat", "sat"]])
    assert math.isfinite(lm_perplexity(run, corpus))  # it is a language model
    (root / "in.txt").write_text("the cat sat .\n", encoding="utf-8")
    monkeypatch.chdir(root)
    runner = CliRunner()
    for args in (["parse", "in.txt", "--checkpoint", "runs/rel"],
                 ["eval", "--checkpoint", "runs/rel", "--corpus", str(corpus)]):
        outcome = runner.invoke(app, args)
        assert outcome.exit_code == 2, outcome.output
        assert "'rellstm' cannot parse" in outcome.output and "Traceback" not in outcome.output


# ------------------------------------------------------------------------------------ PaLM: option off


def test_palm_relevant_set_off_is_the_plain_model(monkeypatch):
    """No new parameters (same initial weights for a seed); a sequence with no start beyond the window
    gives bit-identical outputs with the option on; with it off the screening is never called."""
    plain, on = make("palm", **PALM_TINY), make("palm", **PALM_TINY, relevant_set=2)
    assert plain.config.relevant_set == 0
    for (name, a), (_, b) in zip(plain.state_dict().items(), on.state_dict().items()):
        assert torch.equal(a, b), name
    plain.eval(), on.eval()
    m = PALM_TINY["max_span_length"]
    tokens = torch.randint(0, VOCAB, (2, m + 1))  # rows 0..m-1: every start is inside its window
    a, b = plain(tokens, plain.init_state(2)), on(tokens, on.init_state(2))
    assert torch.equal(a.hidden, b.hidden) and torch.equal(a.structure["span_scores"], b.structure["span_scores"])

    def refuse(*args, **kwargs):
        raise AssertionError("relevancy screening ran with relevant_set = 0")

    monkeypatch.setattr(palm_module, "relevant_indices", refuse)
    plain.train()
    out = plain(torch.randint(0, VOCAB, (2, 15)), plain.init_state(2))
    out.hidden.sum().backward()


# ------------------------------------------------------------------------------------- PaLM: option on


@pytest.mark.parametrize("name", ["palm", "palm-s", "palm-rb"])
@pytest.mark.parametrize("batch,steps,m,rho", [(1, 6, 2, 1), (3, 11, 3, 2), (2, 9, 4, 6)])
def test_palm_relevant_set_forward_backward_odd_shapes(name, batch, steps, m, rho):
    model = make(name, **{**PALM_TINY, "max_span_length": m}, relevant_set=rho).train()
    state = model.init_state(batch)
    for segment in (steps, steps - 3):  # the second segment starts from the carried memory
        tokens = torch.randint(0, VOCAB, (batch, segment))
        gold = None
        if name == "palm-s":
            gold = torch.zeros(batch, segment, m)
            gold[:, 1, 1] = 1.0
        out = model(tokens, state, gold_spans=gold)
        assert out.structure["span_scores"].shape == (batch, segment, m)  # the parser reads the window
        loss = F.cross_entropy(model.logits(out.hidden).reshape(-1, VOCAB), tokens.reshape(-1))
        if out.extra_loss is not None:
            loss = loss + out.extra_loss
        model.zero_grad()
        loss.backward()
        assert torch.isfinite(loss)
        relevant = model.span_attention.last_relevant
        assert relevant is not None and relevant["valid"].any()
        unused = {"span_attention.w_span", "span_attention.v", "span_attention.query.weight",
                  "span_attention.query.bias"}
        for param_name, param in model.named_parameters():
            if name == "palm-rb" and param_name in unused:
                continue
            assert param.grad is not None and torch.isfinite(param.grad).all(), param_name
        state = detach_state(out.state)


def _span_module(rho: int, hidden: int = 6, rrnn: int = 3, attention: int = 5, seed: int = 0) -> SpanAttention:
    torch.manual_seed(seed)
    module = SpanAttention(hidden, rrnn, attention, relevant_set=rho).double()
    with torch.no_grad():  # peaked scores: relevance differs between starts
        module.v.mul_(6.0)
    return module


def _rrnn_gates(module: SpanAttention, seq: torch.Tensor):
    """``(f_fwd, u_fwd, f_bwd, u_bwd)``: the rational RNN's forget gates and inputs, recomputed."""
    a_fwd, b_fwd, a_bwd, b_bwd = module.rrnn(seq).chunk(4, -1)
    f_fwd, f_bwd = torch.sigmoid(a_fwd), torch.sigmoid(a_bwd)
    return f_fwd, (1 - f_fwd) * torch.tanh(b_fwd), f_bwd, (1 - f_bwd) * torch.tanh(b_bwd)


def _span_by_recurrence(gates, b: int, i: int, t: int) -> torch.Tensor:
    """Alg. 1 by definition: each direction's RNN ``c = f c + u`` run over ``[i, t]`` alone, ``[2D]``."""
    f_fwd, u_fwd, f_bwd, u_bwd = gates
    fwd = torch.zeros_like(u_fwd[b, 0])
    for j in range(i, t + 1):
        fwd = f_fwd[b, j] * fwd + u_fwd[b, j]
    bwd = torch.zeros_like(u_bwd[b, 0])
    for j in range(t, i - 1, -1):
        bwd = f_bwd[b, j] * bwd + u_bwd[b, j]
    return torch.cat([fwd, bwd])


@pytest.mark.parametrize("first_row", [0, 3])
def test_palm_extra_spans_are_alg1_spans(first_row):
    """The O(1) extra-span formula equals the RNN over the span alone and the kernel's Alg. 1 (with
    m lifted to the length), for every gathered start, in both directions."""
    module = _span_module(rho=3)
    batch, rows, rho = 2, 13, 3
    seq = torch.randn(batch, rows, 6, dtype=torch.float64)
    states = module.span_inputs(seq)
    gen = torch.Generator().manual_seed(1)
    index = torch.zeros(batch, rows - first_row, rho, dtype=torch.long)
    valid = torch.rand(batch, rows - first_row, rho, generator=gen) < 0.8
    for j in range(rows - first_row):
        t = first_row + j
        index[:, j] = torch.randint(0, t + 1, (batch, rho), generator=gen)
    fwd, bwd = relevant_span_representations(*states, index, valid, first_row)
    kernel_fwd = span_representations(states[0], states[1], rows, backend="reference")  # [B, R, R, D]
    kernel_bwd = span_representations(states[2], states[3], rows, reverse=True, backend="reference")
    gates = _rrnn_gates(module, seq)
    checked = 0
    for b in range(batch):
        for j in range(rows - first_row):
            t = first_row + j
            for s in range(rho):
                got = torch.cat([fwd[b, j, s], bwd[b, j, s]])
                if not valid[b, j, s]:
                    assert (got == 0).all()
                    continue
                i = int(index[b, j, s])
                torch.testing.assert_close(got, _span_by_recurrence(gates, b, i, t), rtol=1e-9, atol=1e-11)
                torch.testing.assert_close(got, torch.cat([kernel_fwd[b, t, t - i], kernel_bwd[b, t, t - i]]),
                                           rtol=1e-9, atol=1e-11)
                checked += 1
    assert checked > 30


def _window_scores(rows: int, m: int, batch: int, seed: int) -> torch.Tensor:
    """Random window scores ``[B, R, m]`` with ``-inf`` for spans starting before position 0."""
    gen = torch.Generator().manual_seed(seed)
    scores = 3 * torch.randn(batch, rows, m, generator=gen, dtype=torch.float64)
    t = torch.arange(rows)[:, None]
    return scores.masked_fill(t - torch.arange(m)[None] < 0, float("-inf"))


@pytest.mark.parametrize("first_row", [0, 2])
def test_palm_chosen_starts_are_the_top_rho_by_beta(first_row):
    """beta = the window attention each start received; the extra starts of row t are the top-rho
    starts i <= t - m (brute force), exactly what RelevancyMemory holds when driven by the same attention."""
    batch, rows, m, rho = 3, 16, 3, 2
    scores = _window_scores(rows, m, batch, seed=first_row)
    beta, index, valid = relevant_span_starts(scores, rho, first_row)
    weights = torch.softmax(scores, -1)
    for b in range(batch):
        expected = [0.0] * rows
        for t in range(first_row, rows):
            for k in range(min(m, t + 1)):
                expected[t - k] += float(weights[b, t, k])
        torch.testing.assert_close(beta[b], torch.tensor(expected, dtype=beta.dtype))
        for t in range(rows):
            chosen = {int(i) for i, ok in zip(index[b, t], valid[b, t]) if ok}
            assert chosen == top_rho(beta[b].tolist(), range(0, t - m + 1), rho), (b, t)
    # The step-by-step memory (nu = m slots: the window's starts t-m+1 .. t) driven by the same weights.
    memory = RelevancyMemory(nu=m, rho=rho, dim=2).double()
    memory.reset(batch)
    for t in range(rows):
        memory.push(torch.zeros(batch, 2, dtype=torch.float64))
        assert torch.equal(torch.where(valid[:, t], index[:, t], -1), memory.relevant_times), t
        slot_weights = torch.zeros(batch, m + rho, dtype=torch.float64)
        if t >= first_row:
            for slot, start in enumerate(memory.buffer_times[0].tolist()):
                if start >= 0:
                    slot_weights[:, slot] = weights[:, t, t - start]
        memory.record_attention(slot_weights)


def _brute_force_span_attention(module: SpanAttention, h, memory, m: int, rho: int) -> torch.Tensor:
    """``h_hat`` of the span attention with relevant set, from definitions only: window + extra spans
    by recurrence, MLP scores, beta from the window softmax of the real rows, brute-force top-rho,
    one softmax over window and extra spans."""
    batch, steps, _ = h.shape
    prev = 0 if memory is None else memory.size(1)
    seq = h if memory is None else torch.cat([memory, h], 1)
    rows = prev + steps - 1
    first_row = max(prev - 1, 0)
    gates = _rrnn_gates(module, seq[:, :rows])
    query = module.query(h)

    def score(b, t, i):
        g = _span_by_recurrence(gates, b, i, t)
        return module.v @ torch.tanh(query[b, t + 1 - prev] + g @ module.w_span), g

    context = torch.zeros(batch, steps, 2 * module.rrnn_size, dtype=h.dtype)
    for b in range(batch):
        beta = [0.0] * rows
        for t in range(first_row, rows):
            window = [score(b, t, i) for i in range(max(0, t - m + 1), t + 1)]
            weights = torch.softmax(torch.stack([s for s, _ in window]), 0)
            for i, w in zip(range(max(0, t - m + 1), t + 1), weights):
                beta[i] += float(w.detach())
        for t in range(first_row, rows):
            starts = list(range(max(0, t - m + 1), t + 1)) + sorted(top_rho(beta, range(0, t - m + 1), rho))
            spans = [score(b, t, i) for i in starts]
            weights = torch.softmax(torch.stack([s for s, _ in spans]), 0)
            context[b, t + 1 - prev] = sum(w * g for w, (_, g) in zip(weights, spans))
    mlp, gate = module.mix(torch.cat([h, context], -1)).chunk(2, -1)
    gate = torch.sigmoid(gate)
    return gate * torch.tanh(mlp) + (1 - gate) * h


@pytest.mark.parametrize("prev", [0, 3])
def test_palm_span_attention_with_relevant_set_matches_brute_force(prev):
    m, rho = 3, 2
    module = _span_module(rho)
    torch.manual_seed(4)
    h = torch.randn(2, 11, 6, dtype=torch.float64)
    memory = torch.randn(2, prev, 6, dtype=torch.float64) if prev else None
    h_hat, _ = module(h, memory, m)
    assert module.last_relevant["valid"].any()
    torch.testing.assert_close(h_hat, _brute_force_span_attention(module, h, memory, m, rho), rtol=1e-9, atol=1e-11)


def test_palm_gradient_reaches_a_relevant_start_outside_the_window():
    m, rho, steps = 3, 1, 12
    module = _span_module(rho)
    torch.manual_seed(5)
    h = torch.randn(1, steps, 6, dtype=torch.float64, requires_grad=True)

    def grad_of_last_position():
        h.grad = None
        h_hat, _ = module(h, None, m)
        h_hat[:, -1].sum().backward()  # position T-1 reads row T-2
        return h.grad[0].norm(dim=-1)

    grad = grad_of_last_position()
    relevant = module.last_relevant
    last_row = steps - 2
    assert relevant["valid"][0, last_row, 0]
    start = int(relevant["index"][0, last_row, 0])
    assert start <= last_row - m  # outside the window of the last row
    assert grad[start] > 1e-4
    assert (grad[:start] < 1e-12).all()  # before the extra span nothing is read (up to rounding)
    module.relevant_set = 0
    assert grad_of_last_position()[: last_row - m + 1].max() < 1e-12  # the window alone does not reach it


# ------------------------------------------------------------------------------------------------ PRPN


def test_prpn_relevant_set_off_is_the_plain_model(monkeypatch):
    plain, on = make("prpn", **PRPN_TINY), make("prpn", **PRPN_TINY, relevant_set=2)
    for (name, a), (_, b) in zip(plain.state_dict().items(), on.state_dict().items()):
        assert torch.equal(a, b), name
    assert "relevant" not in plain.init_state(2) and len(on.init_state(2)["relevant"]) == 2
    plain.eval(), on.eval()
    tokens = torch.randint(0, VOCAB, (2, PRPN_TINY["n_slots"]))  # no state has left the tape yet
    a, b = plain(tokens, plain.init_state(2)), on(tokens, on.init_state(2))
    torch.testing.assert_close(a.hidden, b.hidden, rtol=1e-6, atol=1e-7)
    assert not on.layers[0].last_relevant["valid"].any()

    def refuse(*args, **kwargs):
        raise AssertionError("relevant-set code ran with relevant_set = 0")

    monkeypatch.setattr(prpn_module, "fresh_relevant_state", refuse)
    monkeypatch.setattr(prpn_reading, "fresh_relevant_state", refuse)
    plain.train()
    out = plain(torch.randint(0, VOCAB, (2, 15)), plain.init_state(2))
    out.hidden.sum().backward()
    assert all(layer.last_relevant is None for layer in plain.layers)


@pytest.mark.parametrize("batch,steps,slots,rho", [(1, 7, 2, 1), (3, 10, 3, 2), (2, 9, 4, 6)])
def test_prpn_relevant_set_forward_backward_odd_shapes(batch, steps, slots, rho):
    model = make("prpn", **{**PRPN_TINY, "n_slots": slots}, relevant_set=rho).train()
    state = model.init_state(batch)
    for segment in (steps, steps - 4):
        tokens = torch.randint(0, VOCAB, (batch, segment))
        out = model(tokens, state)
        loss = F.cross_entropy(model.logits(out.hidden).reshape(-1, VOCAB), tokens.reshape(-1))
        model.zero_grad()
        loss.backward()
        assert torch.isfinite(loss)
        for name, param in model.named_parameters():
            assert param.grad is not None and torch.isfinite(param.grad).all(), name
        for relevant in out.state["relevant"]:
            assert relevant["h"].shape == relevant["c"].shape == (batch, rho, PRPN_TINY["hidden_size"])
            assert relevant["relevance"].shape == relevant["times"].shape == (batch, rho)
            assert relevant["tape_relevance"].shape == (batch, slots)
        state = detach_state(out.state)
    assert model.layers[0].last_relevant["valid"].any()


def test_prpn_relevant_set_carries_over_segments():
    """In eval mode two segments with the carried state (tape + relevant sets) equal one pass."""
    model = make("prpn", **PRPN_TINY, relevant_set=2).eval()
    tokens = torch.randint(0, VOCAB, (2, 17))
    whole = model(tokens, model.init_state(2))
    first = model(tokens[:, :9], model.init_state(2))
    second = model(tokens[:, 9:], first.state)
    torch.testing.assert_close(torch.cat([first.hidden, second.hidden], 1), whole.hidden)
    for a, b in zip(second.state["relevant"], whole.state["relevant"]):
        assert torch.equal(a["times"], b["times"])
        torch.testing.assert_close(a["h"], b["h"])


def test_prpn_chosen_states_are_the_top_rho_by_beta():
    """A reading layer's relevant set at every read is the top-rho (brute force, earlier winning ties) of
    the states that left the tape, by the reading attention they received on it; the parallel plug-in
    ``relevant_indices`` gives the same sets, and the set holds those positions' states. Random 0/1
    gates per example (no start-up bias towards the first positions) make the sets differ."""
    slots, rho, steps, batch, d = 3, 2, 16, 4, 6
    torch.manual_seed(2)
    layer = ReadingLayer(5, d, wdrop=0.0, rdropout=0.0, relevant_set=rho).eval()
    with torch.no_grad():  # peaked attention: relevance differs between positions
        layer.key_x.weight.mul_(8.0)
    x = torch.randn(batch, steps, 5)
    position = torch.arange(steps)[:, None] - slots + torch.arange(slots)[None]  # [T, M]
    gates = ((torch.rand(batch, steps, slots) < 0.6) & (position >= 0)).float()
    memory = (torch.zeros(batch, slots, d), torch.zeros(batch, slots, d))
    out, _, relevant, (set_h, set_valid) = layer(x, gates, memory, fresh_relevant_state(batch, slots, rho, d, x))
    seen = layer.last_relevant
    attention, positions, valid = seen["attention"], seen["positions"], seen["valid"]  # [B, T, M], [B, T, rho]
    beta = torch.zeros(batch, steps, dtype=attention.dtype)
    for t in range(steps):  # position t - M + w sits in slot w of the read at step t
        for w in range(slots):
            if t - slots + w >= 0:
                beta[:, t - slots + w] += attention[:, t, w]
    for b in range(batch):
        for t in range(steps):
            chosen = {int(p) for p, ok in zip(positions[b, t], valid[b, t]) if ok}
            assert chosen == top_rho(beta[b].tolist(), range(0, t - slots), rho), (b, t)
    index, plug_valid = relevant_indices(beta, slots, rho)  # the set after the push of step t = read at t + 1
    assert torch.equal(torch.where(plug_valid[:, :-1], index[:, :-1], -1),
                       torch.where(valid[:, 1:], positions[:, 1:], -1))
    assert len({tuple(sorted(p)) for p in positions[:, -1].tolist()}) > 1  # not the same set in every example
    for b in range(batch):
        for t in range(steps - 1):
            for s in range(rho):
                if set_valid[b, t, s]:
                    assert torch.equal(set_h[b, t, s], out[b, positions[b, t + 1, s]])
    final = torch.where(relevant["relevance"] > float("-inf"), relevant["times"] + steps, -1)
    assert torch.equal(final, torch.where(set_valid[:, -1], index[:, -1], -1))  # state: positions of the next segment


def test_prpn_gradient_reaches_a_relevant_state_beyond_the_tape():
    """Gates cut the tape at t0 (no read after t0 sees a position before it): with the option off the
    positions before t0 get no gradient from the last output (up to the normaliser's eps); with it on
    the relevant ones do, through the relevant set (gate 1)."""
    torch.manual_seed(6)
    batch, steps, slots, t0, d = 1, 10, 2, 7, 5
    layer = ReadingLayer(4, d, wdrop=0.0, rdropout=0.0, relevant_set=3).eval()  # the layer computes in float32
    x = torch.randn(batch, steps, 4, requires_grad=True)
    gates = torch.zeros(batch, steps, slots)
    for t in range(steps):
        for w in range(slots):
            position = t - slots + w
            gates[:, t, w] = float(position >= 0 and (t < t0 or position >= t0))
    memory = (torch.zeros(batch, slots, d), torch.zeros(batch, slots, d))

    def grads(relevant):
        x.grad = None
        out = layer(x, gates, memory, relevant)[0]
        out[:, -1].sum().backward()
        return x.grad[0].norm(dim=-1)

    with_set = grads(fresh_relevant_state(batch, slots, 3, d, memory[0]))
    final_set = layer.last_relevant["positions"][0, -1][layer.last_relevant["valid"][0, -1]].tolist()
    assert final_set and all(p < t0 for p in final_set)
    assert all(with_set[p] > 1e-3 for p in final_set)
    layer.relevant_set = 0
    without = grads(None)
    assert without[:t0].max() < 1e-5 * without[t0:].max()
