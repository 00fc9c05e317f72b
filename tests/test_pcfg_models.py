"""The neural PCFGs (npcfg, cpcfg, tnpcfg): losses against brute-force enumeration of every tree and every
labelling, decoders against brute force, sentences sampled from the grammar against its distribution, and each
model through the CLI (train, resume exactly, parse with both decoders, generate, eval, show the tree and the span
marginals)."""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import signal

import nltk
import numpy as np
import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from induce.cli.main import app
from induce.config import load_config
from induce.data.corpus import Vocab
from induce.inference.loading import LoadedRun
from induce.inference.show import sentence_structure, structure_table
from induce.models.common.grammar import sample_sentence
from induce.models.configs import model_config
from induce.models.registry import get_model_class
from induce.report.figures import plot_structure
from induce.training import load_checkpoint
from induce.training.trainer import TIMING_FIELDS, TrainingInterrupted, resume, train
from induce.trees.decoders import parse_batch
from induce.trees.grammar_decoders import mbr_decoder, viterbi_decoder

from helpers import derivations, internal_nodes, make_corpus, shapes, span_posteriors

QUIET = Console(quiet=True)
pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = 7
TINY = {
    "npcfg": dict(nt_states=2, t_states=3, state_dim=8),
    "cpcfg": dict(nt_states=2, t_states=3, state_dim=8, z_dim=3, h_dim=5, w_dim=6, valid_z="mean"),
    "tnpcfg": dict(nt_states=2, t_states=3, rank=4, state_dim=8),
}


def tiny_model(name: str, seed: int = 0):
    torch.manual_seed(seed)
    cls = get_model_class(name)
    return cls(VOCAB, cls.Config(**TINY[name])).double()


def dense_grammar_probabilities(model, z=None):
    """``(roots [NT], rules [NT, S, S], emit [T, V])`` probabilities straight from the networks' outputs (not
    through the model's gather of the emissions nor its reshapes into the kernel's layout)."""
    g = model.grammar
    extra = [] if z is None else [z.view(1, -1)]
    roots = g.root_mlp(torch.cat([g.root_emb, *extra], -1)).softmax(-1)[0]
    nt_in = torch.cat([g.nt_emb, *(e.expand(g.nt, -1) for e in extra)], -1)
    rules = g.rule_mlp(nt_in).softmax(-1).view(g.nt, g.symbols, g.symbols)
    t_in = torch.cat([g.t_emb, *(e.expand(g.t, -1) for e in extra)], -1)
    return roots, rules, g.vocab_mlp(t_in).softmax(-1)


def lowrank_probabilities(model):
    """TN-PCFG's ``(roots, rules, emit)`` with the rule tensor built from the factors, for brute force."""
    nt = model.nt
    head = model.parent_mlp(model.rule_state_emb[:nt]).softmax(-1)
    left = model.left_mlp(model.rule_state_emb).softmax(0)
    right = model.right_mlp(model.rule_state_emb).softmax(0)
    rules = torch.einsum("ar,br,cr->abc", head, left, right)
    return model.root_mlp(model.root_emb).softmax(-1)[0], rules, model.term_mlp(model.term_emb).softmax(-1)


def test_tnpcfg_initialises_as_the_released_class_and_xavier_is_the_option():
    """The released ``TNPCFG`` (sustcsonglin/TN-PCFG ``parser/model/TN_PCFG.py``) calls no initialiser: its symbol
    embeddings stay ``torch.randn`` (N(0, 1)) and its Linear layers PyTorch's U(+-1/sqrt(fan_in)); ``init: xavier``
    (compound-pcfg's ``train.py``) draws both from U(+-sqrt(6 / (fan_in + fan_out)))."""
    cls = get_model_class("tnpcfg")
    sizes = dict(nt_states=20, t_states=30, rank=40, state_dim=64)
    assert load_config("tnpcfg").model["init"] == "torch"  # induce/models/tnpcfg/tnpcfg.yaml
    torch.manual_seed(0)
    default = cls(50, cls.Config(**sizes))
    torch.manual_seed(0)
    xavier = cls(50, cls.Config(**sizes, init="xavier"))
    linear_bound = 1 / math.sqrt(64)  # parent_mlp[0]: Linear(64, 64)
    xavier_linear, xavier_emb = math.sqrt(6 / (64 + 64)), math.sqrt(6 / (50 + 64))  # rule_state_emb [50, 64]
    assert default.rule_state_emb.std().item() == pytest.approx(1.0, rel=0.1)
    assert default.parent_mlp[0].weight.abs().max().item() <= linear_bound
    assert xavier.rule_state_emb.abs().max().item() <= xavier_emb
    assert xavier.parent_mlp[0].weight.abs().max().item() > 1.5 * linear_bound
    assert xavier.parent_mlp[0].weight.abs().max().item() <= xavier_linear


SENTENCES = [[3, 1, 5], [2, 6, 0]]  # padded: the second sentence has two words (id 0 pads)
LENGTHS = [3, 2]


@torch.no_grad()
@pytest.mark.parametrize("name", ["npcfg", "tnpcfg"])
def test_the_loss_is_the_negative_log_likelihood_summed_over_every_derivation(name):
    model = tiny_model(name).eval()
    loss = model.sentence_loss(torch.tensor(SENTENCES), torch.tensor(LENGTHS))
    probabilities = dense_grammar_probabilities(model) if name == "npcfg" else lowrank_probabilities(model)
    for b, n in enumerate(LENGTHS):
        logs = [lp for lp, _ in derivations(SENTENCES[b][:n], *probabilities)]
        assert math.isclose(float(loss[b]), -torch.tensor(logs, dtype=torch.float64).logsumexp(0).item(), rel_tol=1e-9)


@torch.no_grad()
def test_the_compound_loss_is_the_nll_given_z_plus_the_gaussian_kl():
    model = tiny_model("cpcfg").eval()  # valid_z=mean: z is the inference network's mean
    tokens, lengths = torch.tensor(SENTENCES), torch.tensor(LENGTHS)
    loss = model.sentence_loss(tokens, lengths)
    mean, logvar = model.encoder(tokens, lengths)
    for b, n in enumerate(LENGTHS):
        # the inference network reads the sentence alone: padding changes nothing
        alone_mean, alone_logvar = model.encoder(tokens[b : b + 1, :n], lengths[b : b + 1])
        assert torch.allclose(alone_mean[0], mean[b]) and torch.allclose(alone_logvar[0], logvar[b])
        kl = 0.5 * float((mean[b] ** 2 + logvar[b].exp() - 1 - logvar[b]).sum())
        logs = [lp for lp, _ in derivations(SENTENCES[b][:n], *dense_grammar_probabilities(model, mean[b]))]
        log_likelihood = torch.tensor(logs, dtype=torch.float64).logsumexp(0).item()
        assert math.isclose(float(loss[b]), -log_likelihood + kl, rel_tol=1e-9)


def test_the_validation_bound_samples_z_without_moving_the_training_rng():
    model = tiny_model("cpcfg")
    model.config = model.config.model_copy(update={"valid_z": "sample"})
    model.eval()
    tokens, lengths = torch.tensor(SENTENCES), torch.tensor(LENGTHS)
    state = torch.get_rng_state()
    first = model.sentence_loss(tokens, lengths)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, model.sentence_loss(tokens, lengths))
    model.config = model.config.model_copy(update={"valid_z": "mean"})
    assert not torch.equal(first, model.sentence_loss(tokens, lengths))


def test_a_one_word_sentence_is_refused_with_the_models_name():
    with pytest.raises(ValueError, match="npcfg: a sentence of one word"):
        tiny_model("npcfg").sentence_loss(torch.tensor([[1, 2], [3, 0]]), torch.tensor([2, 1]))


def test_the_sampler_draws_leftmost_first_and_stops_past_the_cap():
    """``sample_sentence`` on hand-made tables: one rule ``A -> P0 P1`` gives the words in order; ``A -> A P0``
    or ``A -> P0 P0`` (each 1/2) gives ``k`` words with probability ``2^-(k-1)``, None past the cap."""
    generator = torch.Generator().manual_seed(0)
    one_word_each = torch.zeros(2, VOCAB, dtype=torch.float64)
    one_word_each[0, 3] = one_word_each[1, 5] = 1.0
    root = torch.ones(1, dtype=torch.float64)
    assert sample_sentence(root, lambda a: (1, 2), one_word_each, 1, generator, 10) == [3, 5]

    def recursive(symbol):
        return (0, 1) if torch.rand((), generator=generator) < 0.5 else (1, 1)

    lengths = [sample_sentence(root, recursive, one_word_each, 1, generator, 3) for _ in range(4000)]
    counts = {n: sum(1 for x in lengths if (x is None and n is None) or (x is not None and len(x) == n))
              for n in (2, 3, None)}
    for n, p in ((2, 0.5), (3, 0.25), (None, 0.25)):
        assert abs(counts[n] / 4000 - p) < 4.5 * math.sqrt(p * (1 - p) / 4000), counts
    assert all(x is None or x == [3] * len(x) for x in lengths)


@torch.no_grad()
@pytest.mark.parametrize("name", ["npcfg", "tnpcfg"])
def test_sampled_sentences_follow_the_grammars_distribution(name):
    """The two-word sentences drawn (1,500) against their probabilities by brute force over every derivation
    (Pearson's statistic below 5 sigma of its 48 degrees of freedom), the low-rank rules drawn through the rank."""
    model = tiny_model(name).eval()
    drawn = model.sample_sentences(1500, torch.Generator().manual_seed(0), max_words=10_000)
    assert drawn == model.sample_sentences(1500, torch.Generator().manual_seed(0), max_words=10_000)
    probabilities = dense_grammar_probabilities(model) if name == "npcfg" else lowrank_probabilities(model)
    exact = {pair: math.exp(torch.tensor([lp for lp, _ in derivations(list(pair), *probabilities)],
                                         dtype=torch.float64).logsumexp(0).item())
             for pair in itertools.product(range(VOCAB), repeat=2)}
    counts = {pair: sum(1 for x in drawn if tuple(x) == pair) for pair in exact}
    n = len(drawn)
    pearson = sum((counts[pair] - n * p) ** 2 / (n * p) for pair, p in exact.items())
    assert pearson < 48 + 5 * math.sqrt(2 * 48), pearson
    two_words = sum(exact.values())
    assert abs(sum(counts.values()) / n - two_words) < 4.5 * math.sqrt(two_words * (1 - two_words) / n)
    assert all(len(x) >= 2 for x in drawn)  # no one-word derivation in CNF without unary rules
    banned = model.sample_sentences(300, torch.Generator().manual_seed(1), banned=[0, 1])
    assert banned and not any(w in (0, 1) for x in banned for w in x)


@torch.no_grad()
def test_the_compound_pcfg_draws_z_from_the_prior_for_each_sentence(monkeypatch):
    model = tiny_model("cpcfg").eval()
    seen = []
    distributions = model.grammar.distributions

    def recorded(batch, z):
        seen.append(z)
        return distributions(batch, z)

    monkeypatch.setattr(model.grammar, "distributions", recorded)
    drawn = model.sample_sentences(400, torch.Generator().manual_seed(0), max_words=30)
    assert len(drawn) == 400 and all(2 <= len(x) <= 30 for x in drawn) and len(seen) >= 400
    z = torch.cat(seen)
    assert z.shape[1] == model.config.z_dim and z.dtype == torch.float64
    assert abs(float(z.mean())) < 4.5 / math.sqrt(z.numel()) and abs(float(z.var()) - 1) < 0.15


@torch.no_grad()
@pytest.mark.parametrize("name", ["npcfg", "cpcfg", "tnpcfg"])
def test_decoders_give_the_brute_force_trees(name):
    """mbr: the tree of the largest summed posterior over its spans (posteriors from brute force); viterbi
    (dense grammars): the tree of the most probable derivation."""
    model = tiny_model(name).eval()
    tokens, lengths = torch.tensor([[3, 1, 5, 2], [2, 6, 0, 0]]), torch.tensor([4, 2])
    structure = model.parse_structure(tokens, lengths)["span_posteriors"]
    for b, n in enumerate(lengths.tolist()):
        if name == "cpcfg":
            mean, _ = model.encoder(tokens[b : b + 1, :n], lengths[b : b + 1])
            probabilities = dense_grammar_probabilities(model, mean[0])
        else:
            probabilities = dense_grammar_probabilities(model) if name == "npcfg" else lowrank_probabilities(model)
        found = list(derivations(tokens[b, :n].tolist(), *probabilities))
        posterior = span_posteriors(found)
        for (i, j), p in posterior.items():
            assert math.isclose(float(structure[b, i, j, 0]), p, rel_tol=1e-6, abs_tol=1e-9)

        def as_index_tree(tree):
            return tree if isinstance(tree, int) else (as_index_tree(tree[0]), as_index_tree(tree[1]))

        def mbr_value(tree, posterior=posterior):
            return sum(posterior[node[2]] for node in internal_nodes(tree))

        best_mbr = max(shapes(0, n), key=mbr_value)
        assert mbr_decoder(structure[b, :n].numpy(), n) == as_index_tree(best_mbr)
        if name == "tnpcfg":
            with pytest.raises(Exception, match="low-rank grammar"):
                viterbi_decoder(structure[b, :n].numpy(), n)
        else:
            assert viterbi_decoder(structure[b, :n].numpy(), n) == as_index_tree(max(found, key=lambda x: x[0])[1])


@torch.no_grad()
@pytest.mark.parametrize("name", ["npcfg", "tnpcfg"])
def test_show_gives_the_span_marginals_of_the_words_alone_and_the_decoded_trees_spans(tmp_path, name):
    """``induce show attention``'s numbers for a grammar: the marginals of the words alone (no end marks),
    equal to ``parse_structure``'s channel 0 and to brute force over every derivation; its table lists the
    constituents of the tree that maximises the summed brute-force posteriors, with their marginals."""
    model = tiny_model(name).eval()
    vocab = Vocab(["<eos>", "<unk>", "the", "dog", "saw", "a", "cat"])
    run = LoadedRun(model, vocab, {"config": {"model_name": name}}, tmp_path)
    shown = sentence_structure(run, ["the", "dog", ",", "saw", "cats", "."], device="cpu")
    ids = [2, 3, 4, 1]  # punctuation left out, "cats" unknown, no <eos> (id 0) around them
    assert shown.words == ["the", "dog", "saw", "cats"]
    direct = model.parse_structure(torch.tensor([ids]), torch.tensor([4]))["span_posteriors"][0, :, :, 0]
    assert shown.span_marginals.shape == (5, 5) and np.array_equal(shown.span_marginals, direct.numpy())
    probabilities = dense_grammar_probabilities(model) if name == "npcfg" else lowrank_probabilities(model)
    posterior = span_posteriors(list(derivations(ids, *probabilities)))
    assert len(posterior) == 6  # every span of 2 to 4 words
    for (i, j), p in posterior.items():
        assert math.isclose(shown.span_marginals[i, j], p, rel_tol=1e-6)

    best = max(shapes(0, 4), key=lambda tree: sum(posterior[node[2]] for node in internal_nodes(tree)))
    expected = sorted((node[2] for node in internal_nodes(best)), key=lambda span: (span[0], -span[1]))
    columns, rows = structure_table(shown)
    assert columns[-1] == "marginal"
    assert rows == [[f"{i}-{j}", " ".join(shown.words[i:j]), f"{posterior[(i, j)]:.3f}"] for i, j in expected]
    assert plot_structure(shown, tmp_path / "marginals.png").stat().st_size > 0


@torch.no_grad()
def test_parsing_reads_the_words_alone_even_when_given_an_end_mark():
    """A grammar generates the words, not the end marks the language models read around a sentence."""
    model = tiny_model("npcfg")
    sentences = [[3, 1, 5, 2], [2, 6], [4]]
    with_mark = parse_batch(model, sentences, eos_id=1)
    without = parse_batch(model, sentences)
    assert [str(t) for t in with_mark] == [str(t) for t in without]
    assert [len(t.leaves()) for t in with_mark] == [4, 2, 1]


# ------------------------------------------------------------------------------------------- through the CLI

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=30, valid=5, test=3)


def overrides(name: str, corpus) -> list[str]:
    sizes = {**TINY[name]}
    sizes.pop("valid_z", None)
    return [f"data.corpus={corpus}", *(f"model.{k}={v}" for k, v in sizes.items()), "data.batch_size=4",
            "data.eval_batch_size=4", "train.device=cpu", "train.seed=3", "train.epochs=2", "train.log_interval=2",
            "data.curriculum_start=4", "data.curriculum_step=2", "data.max_length=8",
            "train.dev_f1_max_sentences=5"]


@pytest.mark.parametrize("name", ["cpcfg", "tnpcfg"])
def test_the_checkpoint_interval_changes_nothing_the_run_computes(tmp_path, corpus, name):
    """Writing a resumable checkpoint after every batch or never mid-epoch: the same weights, optimiser state and
    metrics (so a profile may choose its interval for speed, and a finished run stays current when it changes)."""
    runs = {}
    for every in ("1", "null"):
        cfg = load_config(name, overrides=[*overrides(name, corpus), "train.dev_f1=false",
                                           f"train.checkpoint_every={every}"])
        train(cfg, tmp_path / every, console=QUIET, progress=False)
        runs[every] = load_checkpoint(tmp_path / every / "last")[0]
    a, b = runs["1"], runs["null"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a if k.startswith(("model.", "optim.")))
    rows = {every: [{k: v for k, v in json.loads(line).items() if k not in TIMING_FIELDS}
                    for line in (tmp_path / every / "metrics.jsonl").read_text().splitlines()] for every in runs}
    assert rows["1"] == rows["null"]


@pytest.mark.parametrize("name", ["npcfg", "cpcfg", "tnpcfg"])
def test_each_model_resumes_exactly_and_leaves_one_word_sentences_out(tmp_path, corpus, name):
    cfg = load_config(name, overrides=[*overrides(name, corpus), "train.dev_f1=false", "train.checkpoint_every=1"])
    lengths_seen: list = []

    def record(trainer, epoch, batch):
        objective = trainer.parts.objective
        lengths_seen.extend(len(objective.train_sentences[i]) for i in objective.epoch_batches(epoch)[batch - 1])

    straight = tmp_path / "straight"
    train(cfg, straight, console=QUIET, progress=False, on_batch=record)
    assert lengths_seen and min(lengths_seen) >= 2 and max(lengths_seen) <= 6

    def interrupt(trainer, epoch, batch):
        if (epoch, batch) == (2, 2):
            os.kill(os.getpid(), signal.SIGINT)

    stopped = tmp_path / "stopped"
    with pytest.raises(TrainingInterrupted):
        train(cfg, stopped, console=QUIET, progress=False, on_batch=interrupt)
    resume(stopped, console=QUIET, progress=False)
    a, _ = load_checkpoint(straight / "last")
    b, _ = load_checkpoint(stopped / "last")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a if k.startswith(("model.", "optim.")))


@pytest.mark.parametrize("name", ["npcfg", "cpcfg", "tnpcfg"])
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
    for decoder in ("mbr", "viterbi"):
        parsed = runner.invoke(app, ["parse", str(text), "--checkpoint", str(run), "--decoder", decoder])
        if name == "tnpcfg" and decoder == "viterbi":
            assert parsed.exit_code == 2 and "low-rank grammar" in parsed.output
            continue
        assert parsed.exit_code == 0, parsed.output
        trees = [nltk.Tree.fromstring(line) for line in parsed.stdout.splitlines()]
        assert [t.leaves() for t in trees[:2]] == ["the dog saw a cat".split(), ["birds", "sing"]]
        assert len(trees[0].treepositions()) == 5 + 4
    wrong = runner.invoke(app, ["parse", str(text), "--checkpoint", str(run), "--decoder", "peel"])
    assert wrong.exit_code == 2 and f"decoder 'peel' does not apply to model '{name}'" in wrong.output

    # a grammar generates whole sentences (sampled top-down), each on its own line
    generated = runner.invoke(app, ["generate", "--checkpoint", str(run), "--words", "30", "--seed", "4"])
    assert generated.exit_code == 0, generated.output
    lines = generated.stdout.splitlines()
    vocabulary = set(json.loads((corpus / "vocab.json").read_text())["itos"])
    assert sum(len(line.split()) + 1 for line in lines) >= 30 and all(len(line.split()) >= 2 for line in lines)
    assert {word for line in lines for word in line.split()} <= vocabulary - {"<eos>"}
    again = runner.invoke(app, ["generate", "--checkpoint", str(run), "--words", "30", "--seed", "4"])
    assert again.stdout == generated.stdout
    beam = runner.invoke(app, ["generate", "--checkpoint", str(run), "--beam", "2"])
    assert beam.exit_code == 2 and f"--beam: {name} draws whole sentences" in beam.output

    evaluated = runner.invoke(app, ["eval", "--checkpoint", str(run), "--gold", str(corpus / "valid.gold.txt"),
                                    "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert '"sentence_f1"' in evaluated.stdout
    shown = runner.invoke(app, ["show", "tree", "--checkpoint", str(run), "the dog saw a cat"])
    assert shown.exit_code == 0, shown.output
    figure = tmp_path / "a.png"
    drawn = runner.invoke(app, ["show", "attention", "--checkpoint", str(run), "--out", str(figure),
                                "the dog saw a cat ."])
    assert drawn.exit_code == 0, drawn.output
    assert figure.stat().st_size > 0 and f"{name}: span marginals" in drawn.stdout
    # the whole sentence is in every tree (marginal 1), the period is not read, nor is any end mark
    assert "0-5" in drawn.stdout and "1.000" in drawn.stdout and "<eos>" not in drawn.stdout


# ---------------------------------------------------------------------------------- memory, before the first step


def refusal(result) -> str:
    """The one-line message of a command refused with exit status 2 (no traceback)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize("name,z_dim", [("cpcfg", 64), ("npcfg", 0)])
def test_the_declared_step_tensors_are_the_rule_tensors_the_step_holds(monkeypatch, name, z_dim):
    """The inside pass returns the rules' gradient at ``[B, NT, S, S]`` (a grammar per sentence or one
    expanded over the batch); the compound PCFG's rule log-probabilities are that size too, one per sentence."""
    import induce.models.pcfg.model as pcfg

    cls = get_model_class(name)
    sizes = {**TINY["cpcfg"], "z_dim": z_dim} if z_dim else TINY["npcfg"]
    model = cls(VOCAB, cls.Config(**sizes))
    seen = []
    inside = pcfg.inside

    def watched(terms, rules, roots, lengths, **kwargs):
        seen.append((tuple(rules.shape), rules.stride(0) != 0))  # stride 0: one grammar expanded over the batch
        rules.register_hook(lambda grad: seen.append(tuple(grad.shape)))
        return inside(terms, rules, roots, lengths, **kwargs)

    monkeypatch.setattr(pcfg, "inside", watched)
    tokens = torch.randint(0, VOCAB, (3, 4))
    model.sentence_loss(tokens, torch.tensor([4, 3, 2])).sum().backward()
    declared = model.step_tensors(3, 4)
    rules = (3, 2, 5, 5)
    assert [t.shape for t in declared] == [rules] * (2 if z_dim else 1)
    assert seen == [(rules, bool(z_dim)), rules]  # per-sentence log-probabilities only with z; the gradient always


def test_a_paper_size_grammar_whose_step_cannot_fit_is_refused_naming_the_keys_to_shrink():
    """300 nonterminals, 600 preterminals, 8 sentences: one rule tensor ``[8, 300, 900, 900]`` is 7.8 GB,
    and a compound PCFG's step holds two. The model is built on the meta device (nothing allocated)."""
    from induce.training import fits

    cfg = load_config("cpcfg", overrides=["model.nt_states=300", "model.t_states=600", "data.batch_size=8"])
    cls = get_model_class("cpcfg")
    with torch.device("meta"):
        model = cls(10_000, model_config(cfg))
    tensors = model.step_tensors(8, 40)
    assert [t.shape for t in tensors] == [(8, 300, 900, 900)] * 2 and tensors[0].bytes == 8 * 300 * 900 * 900 * 4
    free = 16 * 1024**3
    cpu = torch.device("cpu")
    with pytest.raises(fits.DoesNotFit) as refused:
        fits.check_declared_step_fits(model, cfg, cpu, 40, available=free)
    message = str(refused.value)
    assert message.startswith("data.batch_size=8: a training step of cpcfg on 8 sentences of up to 40 words holds "
                              "the rule log-probabilities [8, 300, 900, 900] (7.2 GiB), the rules' gradient")
    assert "smaller model.nt_states, model.t_states" in message and "data.bptt" not in message
    largest = int(message.split("; data.batch_size=")[1].split()[0])

    def with_batch(size):
        return cfg.model_copy(update={"data": cfg.data.model_copy(update={"batch_size": size})})

    fits.check_declared_step_fits(model, with_batch(largest), cpu, 40, available=free)  # the size it names fits
    with pytest.raises(fits.DoesNotFit):
        fits.check_declared_step_fits(model, with_batch(largest + 1), cpu, 40, available=free)


def grammar_args(corpus, run, *extra) -> list[str]:
    return ["train", "--model", "cpcfg", "--out", str(run), "--no-progress", *overrides("cpcfg", corpus),
            "model.nt_states=20", "model.t_states=40", "train.epochs=1", "train.dev_f1=false", *extra]


def test_training_a_grammar_whose_step_does_not_fit_is_refused_before_the_first_step(tmp_path, corpus, monkeypatch):
    """The free memory is what the weights, their gradients and optimiser state and the rule tensors of a
    step on 2 sentences take: a batch of 4 is refused with the sizes that fit, before anything is written."""
    from induce.training import fits

    cfg = load_config("cpcfg", overrides=grammar_args(corpus, tmp_path / "x")[6:])
    vocab = len(json.loads((corpus / "vocab.json").read_text())["itos"])
    model = get_model_class("cpcfg")(vocab, model_config(cfg))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    free = weights * (fits.state_copies(cfg) - 1) + sum(t.bytes for t in model.step_tensors(2, 8)) + 1
    monkeypatch.setattr(fits, "available_bytes", lambda device: free)
    runner = CliRunner()
    out = refusal(runner.invoke(app, grammar_args(corpus, tmp_path / "run")))
    assert "data.batch_size=4: a training step of cpcfg on 4 sentences of up to" in out
    assert "the rule log-probabilities [4, 20, 60, 60]" in out and "; data.batch_size=2 fits" in out
    assert "model.nt_states, model.t_states" in out and "data.bptt" not in out
    assert not (tmp_path / "run").exists()
    done = runner.invoke(app, grammar_args(corpus, tmp_path / "ok", "data.batch_size=2"))
    assert done.exit_code == 0, done.output


def test_a_grammar_too_large_for_the_memory_names_its_own_sizes(tmp_path, corpus, monkeypatch):
    """The parameter count's message names the grammar's size keys (not an empty list of LSTM sizes)."""
    from induce.training import fits

    monkeypatch.setattr(fits, "available_bytes", lambda device: 256 * 1024)
    out = refusal(CliRunner().invoke(app, grammar_args(corpus, tmp_path / "run")))
    assert "cpcfg with model.nt_states=20, model.t_states=40, model.state_dim=8 has" in out and "data.bptt" not in out
    hints = re.findall(r"(model\.(?:nt_states|t_states|state_dim)=\d+)", out.split("; ", 1)[1])
    assert hints and "at most fits" in out
    vocab = len(json.loads((corpus / "vocab.json").read_text())["itos"])
    for hint in hints:  # each size named fits
        cfg = load_config("cpcfg", overrides=[*grammar_args(corpus, tmp_path / "x")[6:], hint])
        assert fits.check_parameters_fit(get_model_class("cpcfg"), vocab, cfg, torch.device("cpu")) <= 256 * 1024


def test_running_out_of_memory_in_a_grammar_step_names_the_grammars_settings(tmp_path, corpus, monkeypatch):
    cls = get_model_class("cpcfg")

    def allocation_fails(self, tokens, lengths):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 7776000000 bytes")

    monkeypatch.setattr(cls, "sentence_loss", allocation_fails)
    out = refusal(CliRunner().invoke(app, grammar_args(corpus, tmp_path / "run")))
    assert "out of memory" in out and "lower data.batch_size (now 4), data.max_length (now 8) or the model sizes" in out
    assert "data.bptt" not in out
