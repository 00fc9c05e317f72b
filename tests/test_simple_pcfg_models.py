"""The simple PCFGs (snpcfg, scpcfg): the released parameterisation (sizes, initialisation), losses against
brute-force enumeration of every tree and labelling, both decoders against brute force, sentences sampled from
the grammar against its distribution, the declared step tensors, and each model through the CLI (train,
resume exactly, parse, generate, eval, show the tree and the span marginals)."""
from __future__ import annotations

import json
import math
import os
import signal

import nltk
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import induce.models.simple_pcfg.model as simple
from induce.cli.main import app
from induce.config import load_config
from induce.data.corpus import Vocab
from induce.inference.loading import LoadedRun
from induce.inference.show import sentence_structure, structure_table
from induce.models.registry import get_model_class
from induce.training import load_checkpoint
from induce.training.trainer import TrainingInterrupted, resume, train
from induce.trees.grammar_decoders import mbr_decoder, viterbi_decoder

from helpers import derivations, internal_nodes, make_corpus, shapes, span_posteriors

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = 7
TINY = {
    "snpcfg": dict(nt_states=2, t_states=3, state_dim=8, viterbi=True),
    "scpcfg": dict(nt_states=2, t_states=3, state_dim=8, z_dim=3, h_dim=5, w_dim=6, valid_z="mean", viterbi=True),
}
NAMES = sorted(TINY)


def tiny_model(name: str, seed: int = 0, **changes):
    torch.manual_seed(seed)
    cls = get_model_class(name)
    return cls(VOCAB, cls.Config(**{**TINY[name], **changes})).double()


def probabilities(model, z=None):
    """``(roots [NT], rules [NT, S, S], emit [T, V])`` probabilities written out from the parameters as the released
    ``forward`` computes them (the rule tensor built from its two independent factors), for brute force."""
    nt = model.nt
    e = model.rule_state_emb
    nonterminals, preterminals = e[:nt], e[nt:]
    extra = [] if z is None else [z.view(1, -1).expand(nt, -1)]
    parent = model.parent_mlp(torch.cat([nonterminals, *extra], -1)) + nonterminals
    left = ((model.left_mlp(e) + e) @ parent.t()).softmax(0)  # [S, NT], over the children
    right = ((model.right_mlp(e) + e) @ parent.t()).softmax(0)
    rules = torch.einsum("ba,ca->abc", left, right)
    roots = (model.root_emb @ nonterminals.t()).softmax(-1)[0]
    if z is None:
        emit = ((model.term_mlp(preterminals) + preterminals) @ model.vocab_emb).softmax(-1)
    else:
        emit = model.term_mlp(torch.cat([preterminals, z.view(1, -1).expand(model.t, -1)], -1)).softmax(-1)
    return roots, rules, emit


SENTENCES = [[3, 1, 5], [2, 6, 0]]  # padded: the second sentence has two words (id 0 pads)
LENGTHS = [3, 2]


# ----------------------------------------------------------------------------- the released parameterisation
def released_parameter_count(name: str, NT: int, T: int, s: int, V: int, z: int = 64, h: int = 512, w: int = 512):
    """The parameter count of the released ``Simple_N_PCFG`` / ``Simple_C_PCFG`` (their layers listed by hand)."""
    linear = lambda i, o: i * o + o  # noqa: E731
    res = 2 * linear(s, s)
    shared = s + (NT + T) * s + 2 * linear(s, s)  # root_emb, rule_state_emb, left_mlp, right_mlp
    if name == "snpcfg":  # parent_mlp1, term_mlp (Linear + 3 ResLayer), vocab_emb
        return shared + linear(s, s) + linear(s, s) + 3 * res + s * V
    lstm = 2 * (4 * h * (w + h) + 8 * h)  # one bidirectional layer, two bias vectors per direction
    return (shared + linear(s + z, s) + linear(s + z, s) + 2 * res + linear(s, V)
            + V * w + lstm + linear(2 * h, 2 * z))


@pytest.mark.parametrize("name,NT,T", [("snpcfg", 4096, 8192), ("scpcfg", 2048, 4096), ("scpcfg", 512, 1024)])
def test_the_shipped_sizes_have_the_released_parameter_count(name, NT, T):
    cls = get_model_class(name)
    config = load_config(name, overrides=[f"model.nt_states={NT}", f"model.t_states={T}"])
    with torch.device("meta"):
        model = cls(10_000, cls.Config(**config.model))
    assert sum(p.numel() for p in model.parameters()) == released_parameter_count(name, NT, T, 512, 10_000)


@pytest.mark.parametrize("name", NAMES)
def test_xavier_everywhere_by_default_and_torch_is_the_option(name):
    model = tiny_model(name)
    for parameter in model.parameters():
        if parameter.dim() > 1:  # xavier_uniform_: within sqrt(6 / (fan_in + fan_out))
            fan_out, fan_in = parameter.shape[0], parameter[0].numel()
            assert float(parameter.detach().abs().max()) <= math.sqrt(6 / (fan_in + fan_out)) + 1e-12
    torch.manual_seed(0)
    defaults = get_model_class(name)(VOCAB, get_model_class(name).Config(**{**TINY[name], "init": "torch"}))
    assert float(defaults.rule_state_emb.detach().abs().max()) > math.sqrt(6 / (8 + 5))  # N(0, 1), not xavier


# ----------------------------------------------------------------------------- against brute force
@torch.no_grad()
def test_the_sn_loss_is_the_negative_log_likelihood_summed_over_every_derivation():
    model = tiny_model("snpcfg").eval()
    loss = model.sentence_loss(torch.tensor(SENTENCES), torch.tensor(LENGTHS))
    for b, n in enumerate(LENGTHS):
        logs = [lp for lp, _ in derivations(SENTENCES[b][:n], *probabilities(model))]
        assert math.isclose(float(loss[b]), -torch.tensor(logs, dtype=torch.float64).logsumexp(0).item(), rel_tol=1e-9)


@torch.no_grad()
def test_the_sc_loss_is_the_nll_given_z_plus_the_gaussian_kl():
    model = tiny_model("scpcfg").eval()  # valid_z=mean: z is the inference network's mean
    tokens, lengths = torch.tensor(SENTENCES), torch.tensor(LENGTHS)
    loss = model.sentence_loss(tokens, lengths)
    mean, logvar = model.encoder(tokens, lengths)
    for b, n in enumerate(LENGTHS):
        kl = 0.5 * float((mean[b] ** 2 + logvar[b].exp() - 1 - logvar[b]).sum())
        logs = [lp for lp, _ in derivations(SENTENCES[b][:n], *probabilities(model, mean[b]))]
        assert math.isclose(float(loss[b]), -torch.tensor(logs, dtype=torch.float64).logsumexp(0).item() + kl,
                            rel_tol=1e-9)


@torch.no_grad()
def test_sc_validation_and_parsing_draw_z_from_a_fresh_generator_when_asked():
    model = tiny_model("scpcfg", valid_z="sample", parse_z="sample").eval()
    tokens, lengths = torch.tensor(SENTENCES), torch.tensor(LENGTHS)
    state = torch.get_rng_state()
    first = model.sentence_loss(tokens, lengths)
    parsed = model.parse_structure(tokens, lengths)["span_posteriors"]
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, model.sentence_loss(tokens, lengths))
    assert torch.equal(parsed, model.parse_structure(tokens, lengths)["span_posteriors"])
    model.config = model.config.model_copy(update={"valid_z": "mean", "parse_z": "mean"})
    assert not torch.equal(first, model.sentence_loss(tokens, lengths))
    assert not torch.equal(parsed, model.parse_structure(tokens, lengths)["span_posteriors"])


def test_a_one_word_sentence_is_refused_with_the_models_name():
    with pytest.raises(ValueError, match="snpcfg: a sentence of one word"):
        tiny_model("snpcfg").sentence_loss(torch.tensor([[1, 2], [3, 0]]), torch.tensor([2, 1]))


@torch.no_grad()
@pytest.mark.parametrize("name", NAMES)
def test_decoders_give_the_brute_force_trees(name):
    """mbr: the tree of the largest summed posterior over its spans; viterbi: the most probable derivation's."""
    model = tiny_model(name).eval()
    tokens, lengths = torch.tensor([[3, 1, 5, 2], [2, 6, 0, 0]]), torch.tensor([4, 2])
    structure = model.parse_structure(tokens, lengths)["span_posteriors"]
    assert structure.shape[-1] == 2
    for b, n in enumerate(lengths.tolist()):
        z = model.encoder(tokens[b: b + 1, :n], lengths[b: b + 1])[0][0] if name == "scpcfg" else None
        found = list(derivations(tokens[b, :n].tolist(), *probabilities(model, z)))
        posterior = span_posteriors(found)
        for (i, j), p in posterior.items():
            assert math.isclose(float(structure[b, i, j, 0]), p, rel_tol=1e-6, abs_tol=1e-9)

        def as_index_tree(tree):
            return tree if isinstance(tree, int) else (as_index_tree(tree[0]), as_index_tree(tree[1]))

        best_mbr = max(shapes(0, n), key=lambda tree: sum(posterior[node[2]] for node in internal_nodes(tree)))
        assert mbr_decoder(structure[b, :n].numpy(), n) == as_index_tree(best_mbr)
        assert viterbi_decoder(structure[b, :n].numpy(), n) == as_index_tree(max(found, key=lambda x: x[0])[1])
    plain = tiny_model(name, viterbi=False).eval().parse_structure(tokens, lengths)["span_posteriors"]
    assert torch.equal(plain[..., 0], structure[..., 0]) and plain.shape[-1] == 1
    with pytest.raises(Exception, match=r"best derivation's spans.*trained with model\.viterbi=true"):
        viterbi_decoder(plain[0, :4].numpy(), 4)


def two_word_probabilities(roots, rules, emit, nt: int) -> torch.Tensor:
    """``[V, V]``: the probability of each two-word sentence, summed over its derivations (root, two preterminals)."""
    return torch.einsum("a,abc,bx,cy->xy", roots, rules[:, nt:, nt:], emit, emit)


def offspring_radius(rules, nt: int) -> float:
    """The spectral radius of the expected nonterminal children of each nonterminal: below 1, derivations end
    (and are short: the sampler never draws a runaway derivation)."""
    expected = rules[:, :nt, :].sum(2) + rules[:, :, :nt].sum(1)  # [NT, NT]
    return float(torch.linalg.eigvals(expected).abs().max())


@torch.no_grad()
@pytest.mark.parametrize("name", NAMES)
def test_sampled_sentences_follow_the_grammars_distribution(name):
    """The two-word sentences drawn (1,500) against their exact probabilities (Pearson's statistic below 5 sigma
    of its 48 degrees of freedom); SC-PCFG's ``z`` from the prior, so its exact probabilities are averaged over
    400 draws of ``z`` (the statistic's bound allows their error). Eight preterminals: a grammar whose
    derivations end quickly (checked), so that no draw runs away."""
    model = tiny_model(name, t_states=8).eval()
    drawn = model.sample_sentences(1500, torch.Generator().manual_seed(0), max_words=10_000)
    assert drawn == model.sample_sentences(1500, torch.Generator().manual_seed(0), max_words=10_000)
    zs = [None] if name == "snpcfg" else torch.randn(400, 3, generator=torch.Generator().manual_seed(5),
                                                      dtype=torch.float64)
    grammars = [probabilities(model, z) for z in zs]
    assert max(offspring_radius(g[1], model.nt) for g in grammars) < 0.8
    exact = sum(two_word_probabilities(*g, model.nt) for g in grammars) / len(grammars)  # [V, V]
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    for x in drawn:
        if len(x) == 2:
            counts[x[0], x[1]] += 1
    expected = len(drawn) * exact
    pearson = float(((counts - expected) ** 2 / expected).sum())
    assert pearson < 48 + 5 * math.sqrt(2 * 48), pearson
    assert all(len(x) >= 2 for x in drawn)
    banned = model.sample_sentences(300, torch.Generator().manual_seed(1), banned=[0, 1])
    assert banned and not any(w in (0, 1) for x in banned for w in x)


@torch.no_grad()
@pytest.mark.parametrize("name", NAMES)
def test_show_gives_the_span_marginals_of_the_words_alone(tmp_path, name):
    model = tiny_model(name).eval()
    vocab = Vocab(["<eos>", "<unk>", "the", "dog", "saw", "a", "cat"])
    run = LoadedRun(model, vocab, {"config": {"model_name": name}}, tmp_path)
    shown = sentence_structure(run, ["the", "dog", ",", "saw", "cats", "."], device="cpu")
    ids = [2, 3, 4, 1]
    assert shown.words == ["the", "dog", "saw", "cats"]
    direct = model.parse_structure(torch.tensor([ids]), torch.tensor([4]))["span_posteriors"][0, :, :, 0]
    assert np.array_equal(shown.span_marginals, direct.numpy())
    z = model.encoder(torch.tensor([ids]), torch.tensor([4]))[0][0] if name == "scpcfg" else None
    posterior = span_posteriors(list(derivations(ids, *probabilities(model, z))))
    for (i, j), p in posterior.items():
        assert math.isclose(shown.span_marginals[i, j], p, rel_tol=1e-6)
    columns, rows = structure_table(shown)
    assert columns[-1] == "marginal" and rows[0][0] == "0-4"


# ----------------------------------------------------------------------------- the declared step tensors
@pytest.mark.parametrize("name", NAMES)
def test_the_declared_step_tensors_are_what_the_step_holds(monkeypatch, name):
    """The charts ``[B, N, N, NT]`` (from the leaves the pass starts from) and, with ``z``, the rule
    log-probabilities ``[B, S, NT]`` per sentence (otherwise one grammar expanded over the batch)."""
    from induce.kernels.pcfg import simple_torch

    model = get_model_class(name)(VOCAB, get_model_class(name).Config(**TINY[name])).float()
    seen = []
    inside = simple.inside_simple
    rank_space = simple_torch.rank_space_inside

    def watched_inside(terms, roots, left, right, lengths, **kwargs):
        seen.append(("rules", tuple(left.shape), left.stride(0) != 0))
        return inside(terms, roots, left, right, lengths, **kwargs)

    def watched_pass(leaf_left, *args):
        seen.append(("chart", (*leaf_left.shape[:2], leaf_left.shape[1], leaf_left.shape[2])))
        return rank_space(leaf_left, *args)

    monkeypatch.setattr(simple, "inside_simple", watched_inside)
    monkeypatch.setattr(simple_torch, "rank_space_inside", watched_pass)
    tokens = torch.randint(0, VOCAB, (3, 5))
    model.sentence_loss(tokens, torch.tensor([5, 3, 2])).sum().backward()
    declared = {t.name: t.shape for t in model.step_tensors(3, 5)}
    assert seen[1] == ("chart", declared["the inside pass's left-child chart"]) == ("chart", (3, 5, 5, 2))
    assert declared["the inside pass's right-child chart"] == (3, 5, 5, 2)
    assert seen[0] == ("rules", (3, 5, 2), name == "scpcfg")
    if name == "scpcfg":
        assert declared["the left rule log-probabilities"] == declared["the right rule log-probabilities"] == (3, 5, 2)
        assert declared["the emission log-probabilities"] == (3, 3, VOCAB)
    else:
        assert declared["the emission log-probabilities"] == (3, VOCAB)


# ------------------------------------------------------------------------------------------- through the CLI
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=30, valid=5, test=3)


def overrides(name: str, corpus) -> list[str]:
    sizes = {k: v for k, v in TINY[name].items() if k not in ("valid_z", "viterbi")}
    return [f"data.corpus={corpus}", *(f"model.{k}={v}" for k, v in sizes.items()), "data.batch_size=4",
            "data.eval_batch_size=4", "train.device=cpu", "train.seed=3", "train.epochs=2", "train.log_interval=2",
            "data.curriculum_start=4", "data.curriculum_step=2", "data.max_length=8",
            "train.dev_f1_max_sentences=5"]


@pytest.mark.parametrize("name", NAMES)
def test_each_model_resumes_exactly_and_leaves_one_word_sentences_out(tmp_path, corpus, name):
    from rich.console import Console

    quiet = Console(quiet=True)
    cfg = load_config(name, overrides=[*overrides(name, corpus), "train.dev_f1=false", "train.checkpoint_every=1"])
    lengths_seen: list = []

    def record(trainer, epoch, batch):
        objective = trainer.parts.objective
        lengths_seen.extend(len(objective.train_sentences[i]) for i in objective.epoch_batches(epoch)[batch - 1])

    straight = tmp_path / "straight"
    train(cfg, straight, console=quiet, progress=False, on_batch=record)
    assert lengths_seen and min(lengths_seen) >= 2 and max(lengths_seen) <= 6

    def interrupt(trainer, epoch, batch):
        if (epoch, batch) == (2, 2):
            os.kill(os.getpid(), signal.SIGINT)

    stopped = tmp_path / "stopped"
    with pytest.raises(TrainingInterrupted):
        train(cfg, stopped, console=quiet, progress=False, on_batch=interrupt)
    resume(stopped, console=quiet, progress=False)
    a, _ = load_checkpoint(straight / "last")
    b, _ = load_checkpoint(stopped / "last")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a if k.startswith(("model.", "optim.")))


@pytest.mark.parametrize("name", NAMES)
def test_each_model_trains_parses_evaluates_and_shows_through_the_cli(tmp_path, corpus, name):
    runner = CliRunner()
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "--model", name, "--out", str(run), "--no-progress",
                                 *overrides(name, corpus), "optim.lr=0.02"])
    assert result.exit_code == 0, result.output
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 2 and all(math.isfinite(m["valid_ppl"]) and "dev_f1" in m for m in history)

    text = tmp_path / "text.txt"
    text.write_text("the dog saw a cat\nbirds sing\nyes\n")
    parsed = runner.invoke(app, ["parse", str(text), "--checkpoint", str(run), "--decoder", "mbr"])
    assert parsed.exit_code == 0, parsed.output
    trees = [nltk.Tree.fromstring(line) for line in parsed.stdout.splitlines()]
    assert [t.leaves() for t in trees[:2]] == ["the dog saw a cat".split(), ["birds", "sing"]]
    assert len(trees[0].treepositions()) == 5 + 4
    refused = runner.invoke(app, ["parse", str(text), "--checkpoint", str(run), "--decoder", "viterbi"])
    # viterbi: false (the default): the message names the key that turns it on
    assert refused.exit_code == 2 and "best derivation's spans" in refused.output
    assert "model.viterbi=true" in refused.output and len(refused.output.strip().splitlines()) == 1

    generated = runner.invoke(app, ["generate", "--checkpoint", str(run), "--words", "30", "--seed", "4"])
    assert generated.exit_code == 0, generated.output
    lines = generated.stdout.splitlines()
    assert sum(len(line.split()) + 1 for line in lines) >= 30 and all(len(line.split()) >= 2 for line in lines)

    evaluated = runner.invoke(app, ["eval", "--checkpoint", str(run), "--gold", str(corpus / "valid.gold.txt"),
                                    "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert '"sentence_f1"' in evaluated.stdout
    figure = tmp_path / "a.png"
    drawn = runner.invoke(app, ["show", "attention", "--checkpoint", str(run), "--out", str(figure),
                                "the dog saw a cat ."])
    assert drawn.exit_code == 0, drawn.output
    assert figure.stat().st_size > 0 and f"{name}: span marginals" in drawn.stdout
    assert "0-5" in drawn.stdout and "1.000" in drawn.stdout
