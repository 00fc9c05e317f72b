"""The extension point: a family defined and registered here alone (its own parser kind, decoder and a
sentence-level training objective) trains, parses, evaluates and shows through the CLI, resumes exactly, and
is found by a fresh process through ``INDUCE_PLUGINS``; nothing in ``induce/`` names it. A second family, written as
a folder ``induce/models/<family>/`` under a temporary ``sys.path`` entry, is found by the registry's scan with its
base config, trains, parses, evaluates and is listed; and the contract's hooks (a surrogate training loss beside the
reported one, parameter groups) and declared traits are checked.

The family (``test-spans``) is a toy: word embeddings, a linear layer scoring each span from its first and
last word's embeddings, a CKY decoder taking the binary tree of the highest total span score, and a loss per
sentence = a bigram language model's negative log-likelihood (words and the end mark) + ``-log softmax`` of
the span scorer's total for the right-branching tree against the left-branching and the balanced one.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pydantic
import pytest
import torch
from rich.console import Console
from torch import nn
from typer.testing import CliRunner

from induce.cli.main import app
from induce.config import load_config
from induce.models.base import SENTENCE_LEVEL, LanguageModel, LMOutput, ModelConfig, ParamGroup, SentenceLosses
from induce.models.registry import register
from induce.training import load_checkpoint
from induce.training.trainer import TIMING_FIELDS, TrainingInterrupted, resume, train
from induce.trees.kinds import ParserKind, register_kind
from induce.trees.nodes import build_binary

from helpers import REPO, child_env, make_corpus

FAMILY = "test-spans"
QUIET = Console(quiet=True)
pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------------------- the family

#: Its structure: ``{"span_table": [B, T, T]}``, entry ``[b, t, k]`` scoring the words ``t-k .. t`` (PaLM's
#: indexing by last word and length, so that the rows of a sentence's words are its own table).
SPAN_TABLE = register_kind(ParserKind("test-span-table", structure_key="span_table"))


@SPAN_TABLE.decoder("test-cky", help="the tree of the highest total span score (CKY)")
def cky_tree(scores, length: int):
    """The binary tree over ``0 .. length-1`` maximising the sum of its spans' scores ``scores[j-1, j-1-i]``
    (span ``[i, j)``); ties go to the smallest split."""
    best: dict[tuple[int, int], tuple[float, int]] = {}
    for width in range(2, length + 1):
        for i in range(length - width + 1):
            j = i + width
            options = [(best.get((i, k), (0.0, 0))[0] + best.get((k, j), (0.0, 0))[0], k) for k in range(i + 1, j)]
            total, split = max(options, key=lambda option: (option[0], -option[1]))
            best[(i, j)] = (total + float(scores[j - 1][j - 1 - i]), split)
    return build_binary(0, length, lambda i, j: best[(i, j)][1])


class SpanConfig(ModelConfig):
    emb_size: int = pydantic.Field(6, gt=0)


@register
class SpanFamily(LanguageModel):
    name: ClassVar[str] = FAMILY
    description: ClassVar[str] = "test-only span scorer trained with a loss per sentence"
    parser_kind = SPAN_TABLE
    objective = SENTENCE_LEVEL
    Config = SpanConfig

    def __init__(self, vocab_size: int, config: SpanConfig | None = None):
        super().__init__()
        self.config = config or SpanConfig()
        size = self.config.emb_size
        self.embedding = nn.Embedding(vocab_size, size)
        self.start = nn.Parameter(torch.zeros(size))
        self.next_word = nn.Linear(size, vocab_size)
        self.span_scorer = nn.Linear(2 * size, 1)

    def span_table(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [B, T]`` -> ``[B, T, T]``: ``[b, t, k]`` scores the words ``t-k .. t`` (0 where ``k > t``)."""
        emb = self.embedding(tokens)
        steps = tokens.size(1)
        ends = torch.arange(steps).view(-1, 1)
        starts = (ends - torch.arange(steps).view(1, -1)).clamp_min(0)  # [T, T]
        pairs = torch.cat([emb[:, starts], emb[:, ends.expand(steps, steps)]], -1)  # [B, T, T, 2E]
        return self.span_scorer(pairs).squeeze(-1) * (starts <= ends).float()

    def sentence_loss(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        batch = tokens.size(0)
        previous = torch.cat([self.start.expand(batch, 1, -1), self.embedding(tokens)], 1)  # [B, T+1, E]
        log_probs = self.next_word(previous).log_softmax(-1)  # [B, T+1, V]
        targets = torch.cat([tokens, torch.zeros(batch, 1, dtype=torch.long)], 1)
        targets[torch.arange(batch), lengths] = 0  # the end mark (id 0 stands for it here)
        picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, T+1]
        inside = torch.arange(tokens.size(1) + 1).unsqueeze(0) <= lengths.unsqueeze(1)
        words_nll = -(picked * inside).sum(1)
        table = self.span_table(tokens)
        tree_losses = []
        for b in range(batch):
            n = int(lengths[b])
            trees = [tree_spans_of(n, shape) for shape in ("right", "left", "balanced")]
            totals = torch.stack([sum((table[b, j - 1, j - 1 - i] for i, j in spans), torch.zeros(()))
                                  for spans in trees])
            tree_losses.append(-totals.log_softmax(0)[0])
        return words_nll + torch.stack(tree_losses)

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        return {"span_table": self.span_table(tokens)}

    def forward(self, tokens, state, gold_spans=None) -> LMOutput:  # only the streams' trainer calls it
        raise NotImplementedError("test-spans is trained sentence by sentence")


def tree_spans_of(n: int, shape: str) -> list[tuple[int, int]]:
    """The spans ``(i, j)`` of width >= 2 of the right-branching, left-branching or balanced tree of ``n`` words."""
    split = {"right": lambda i, j: i + 1, "left": lambda i, j: j - 1, "balanced": lambda i, j: (i + j + 1) // 2}[shape]
    spans = []

    def visit(i, j):
        if j - i >= 2:
            spans.append((i, j))
            k = split(i, j)
            visit(i, k)
            visit(k, j)

    visit(0, n)
    return spans


# ---------------------------------------------------------------------------------------------- the tests

def all_trees(i: int, j: int):
    """Every binary tree over ``[i, j)`` as a list of its spans of width >= 2."""
    if j - i == 1:
        yield []
        return
    for k in range(i + 1, j):
        for left, right in itertools.product(list(all_trees(i, k)), list(all_trees(k, j))):
            yield [(i, j), *left, *right]


def index_tree_spans(tree) -> tuple[list[int], list[tuple[int, int]]]:
    """``(leaves, spans of width >= 2)`` of an IndexTree."""
    if isinstance(tree, int):
        return [tree], []
    left_leaves, left_spans = index_tree_spans(tree[0])
    right_leaves, right_spans = index_tree_spans(tree[1])
    leaves = left_leaves + right_leaves
    return leaves, [*left_spans, *right_spans, (leaves[0], leaves[-1] + 1)]


def total_score(scores, spans) -> float:
    return sum(scores[j - 1][j - 1 - i] for i, j in spans)


def test_cky_decoder_finds_the_best_tree_of_every_small_sentence():
    generator = torch.Generator().manual_seed(0)
    for n in range(1, 7):
        for _ in range(5):
            scores = torch.randn(n, n, generator=generator).tolist()
            leaves, spans = index_tree_spans(cky_tree(scores, n))
            assert leaves == list(range(n))
            best = max(total_score(scores, tree) for tree in all_trees(0, n))
            assert math.isclose(total_score(scores, spans), best, abs_tol=1e-9)


def test_no_string_kind_checks_left_in_induce():
    """The trainer, parse, eval, show and reproduce ask the model's kind, never compare kind names."""
    pattern = re.compile(r"""(==|!=|\bin\b|\bnot in\b)\s*\(?\s*["'](distance|span|none)["']|"""
                         r"""["'](distance|span|none)["']\s*(==|!=)|parser_kind", ["']""")
    offenders = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
                 for path in sorted((REPO / "induce").rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if pattern.search(line)]
    assert not offenders, "\n".join(offenders)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"), train=40, valid=6, test=4)


COMMON = ["data.batch_size=4", "data.eval_batch_size=3", "optim.optimizer=adam", "optim.lr=0.05",
          "optim.asgd=never", "train.device=cpu", "train.seed=5", "train.log_interval=2", "train.epochs=2",
          "data.curriculum_start=3", "data.curriculum_step=2", "data.max_length=9"]


def test_sentence_batches_follow_the_curriculum_and_resume_exactly(tmp_path, corpus):
    cfg = load_config(FAMILY, overrides=[*COMMON, f"data.corpus={corpus}", "train.dev_f1=false",
                                         "train.checkpoint_every=2"])
    straight = tmp_path / "straight"
    seen: list = []

    def record(trainer, epoch, batch):
        objective = trainer.parts.objective
        sentences = [objective.train_sentences[i] for i in objective.epoch_batches(epoch)[batch - 1]]
        seen.append((epoch, max(len(s) for s in sentences), len(sentences)))

    train(cfg, straight, console=QUIET, progress=False, on_batch=record)
    assert {cap for epoch, cap, _ in seen if epoch == 1} and max(c for e, c, _ in seen if e == 1) <= 3
    assert max(c for e, c, _ in seen if e == 2) <= 5 and max(c for e, c, _ in seen if e == 2) > 3
    assert all(size <= 4 for *_, size in seen)
    steps_epoch2 = sum(1 for e, *_ in seen if e == 2)
    assert steps_epoch2 >= 3, "the test needs a few batches in epoch 2"
    mid = steps_epoch2 // 2 + 1

    def interrupt(trainer, epoch, batch):
        if (epoch, batch) == (2, mid):
            os.kill(os.getpid(), __import__("signal").SIGINT)

    stopped = tmp_path / "interrupted"
    with pytest.raises(TrainingInterrupted):
        train(cfg, stopped, console=QUIET, progress=False, on_batch=interrupt)
    _, meta = load_checkpoint(stopped / "last")
    assert (meta["trainer"]["epoch"], meta["trainer"]["position"]) == (2, mid)
    resume(stopped, console=QUIET, progress=False)
    a, _ = load_checkpoint(straight / "last")
    b, _ = load_checkpoint(stopped / "last")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a if k.startswith(("model.", "optim.")))
    timing = TIMING_FIELDS

    def metrics(run):
        return [{k: v for k, v in json.loads(line).items() if k not in timing}
                for line in (run / "metrics.jsonl").read_text().splitlines()]

    assert metrics(straight) == metrics(stopped)
    first = metrics(straight)[0]
    assert math.isclose(first["valid_ppl"], math.exp(first["valid_loss"]))


def test_the_family_trains_parses_evaluates_and_shows_through_the_cli(tmp_path, corpus):
    runner = CliRunner()
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "--model", FAMILY, "--out", str(run), "--no-progress",
                                 *COMMON, f"data.corpus={corpus}", "optim.lr=0.1", "train.epochs=3"])
    assert result.exit_code == 0, result.output
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 3 and all(math.isfinite(m["valid_ppl"]) and "dev_f1" in m for m in history)
    assert history[-1]["train_loss"] < history[0]["train_loss"]

    text = tmp_path / "text.txt"
    text.write_text("the dog saw a cat\nbirds sing\n")
    parsed = runner.invoke(app, ["parse", str(text), "--checkpoint", str(run)])
    assert parsed.exit_code == 0, parsed.output
    import nltk

    tree = nltk.Tree.fromstring(parsed.stdout.splitlines()[0])
    assert tree.leaves() == "the dog saw a cat".split() and len(tree.treepositions()) == 5 + 4  # binary: 4 inner nodes
    wrong = runner.invoke(app, ["parse", str(text), "--checkpoint", str(run), "--decoder", "peel"])
    assert wrong.exit_code == 2 and "decoder 'peel' does not apply to model 'test-spans'" in wrong.output
    unknown = runner.invoke(app, ["parse", str(text), "--checkpoint", str(run), "--decoder", "nonsense"])
    assert unknown.exit_code == 2 and "unknown decoder 'nonsense'" in unknown.output and "test-cky" in unknown.output

    gold = Path(corpus) / "valid.gold.txt"
    evaluated = runner.invoke(app, ["eval", "--checkpoint", str(run), "--gold", str(gold), "--json"])
    assert evaluated.exit_code == 0, evaluated.output
    assert '"sentence_f1"' in evaluated.stdout

    shown = runner.invoke(app, ["show", "tree", "--checkpoint", str(run), "the dog saw a cat"])
    assert shown.exit_code == 0, shown.output
    drawn = runner.invoke(app, ["show", "attention", "--checkpoint", str(run), "--out", str(tmp_path / "a.png"),
                                "the dog saw a cat"])
    assert drawn.exit_code == 2 and "has no drawing" in drawn.output


@pytest.mark.slow
def test_a_fresh_process_finds_the_family_through_induce_plugins():
    env = {**child_env(), "INDUCE_PLUGINS": "test_family_extension",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), child_env()["PYTHONPATH"]])}
    done = subprocess.run([sys.executable, "-m", "induce.cli.main", "models"], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(rf"^{FAMILY}\s+test-span-table\s", done.stdout, re.M), done.stdout


# ------------------------------------------------------------------ a family as a folder, and the contract

#: A family in a folder of its own (``induce/models/test_folder/``): its code, its base config, its display
#: name, a published figure, and both hooks of the contract (a surrogate training loss beside the reported
#: one; a parameter group with an Adam of its own). Written under a temporary ``sys.path`` entry, it is found
#: by scanning ``induce.models`` and its config by :func:`induce.config.model_layer`, with no list to edit.
FOLDER_FAMILY = '''
"""A test-only family: a bigram language model of whole sentences, parsing by a linear syntactic distance."""
from typing import ClassVar

import pydantic
import torch
from torch import nn

from induce.models.base import SENTENCE_LEVEL, LanguageModel, ModelConfig, ParamGroup, SentenceLosses
from induce.models.registry import register
from induce.trees.kinds import DISTANCE


class FolderConfig(ModelConfig):
    emb_size: int = pydantic.Field(4, gt=0)


@register
class FolderFamily(LanguageModel):
    name: ClassVar[str] = "test-folder"
    description: ClassVar[str] = "test-only family defined in a folder of its own"
    display_name: ClassVar[str] = "Folder-LM"
    published: ClassVar[dict] = {"all_lengths": {"value": 12.5, "source": "a test"}}
    parser_kind = DISTANCE
    objective = SENTENCE_LEVEL
    Config = FolderConfig
    shortest_sentence: ClassVar[int] = 2

    def __init__(self, vocab_size, config=None):
        super().__init__()
        self.config = config or FolderConfig()
        size = self.config.emb_size
        self.embedding = nn.Embedding(vocab_size, size)
        self.start = nn.Parameter(torch.zeros(size))
        self.next_word = nn.Linear(size, vocab_size)
        self.distance = nn.Linear(size, 1)

    def sentence_loss(self, tokens, lengths):
        batch = tokens.size(0)
        previous = torch.cat([self.start.expand(batch, 1, -1), self.embedding(tokens)], 1)
        log_probs = self.next_word(previous).log_softmax(-1)
        targets = torch.cat([tokens, torch.zeros(batch, 1, dtype=torch.long)], 1)
        picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        inside = torch.arange(tokens.size(1) + 1).unsqueeze(0) <= lengths.unsqueeze(1)
        return -(picked * inside).sum(1) + 0.0 * self.distance.weight.sum()

    def sentence_losses(self, tokens, lengths):
        loss = self.sentence_loss(tokens, lengths)
        return SentenceLosses(2.0 * loss, loss)  # a surrogate: twice the reported loss

    def param_groups(self, optim_config):
        head = tuple(self.distance.parameters())
        rest = tuple(p for p in self.parameters() if all(p is not h for h in head))
        return [ParamGroup(rest, clip=optim_config.clip, asgd_clip=optim_config.clip),
                ParamGroup(head, adam_lr=0.01)]

    @torch.no_grad()
    def parse_structure(self, tokens, lengths):
        return {"distances": self.distance(self.embedding(tokens)).squeeze(-1)}
'''

FOLDER_SCRIPT = '''
import json, sys
from typer.testing import CliRunner
from induce.cli.main import app
from induce.config import load_config
from induce.report.names import display
from induce.report.published import PUBLISHED
corpus, run, text, gold = sys.argv[1:5]
runner = CliRunner()
out = {"models": runner.invoke(app, ["models"]).output,
       "emb_size": load_config("test-folder").model["emb_size"],
       "display": display("test-folder"), "published": PUBLISHED["all_lengths"]["rows"].get("test-folder")}
common = json.loads(sys.argv[5])
trained = runner.invoke(app, ["train", "--model", "test-folder", "--out", run, "--no-progress", *common,
                              f"data.corpus={corpus}", "train.max_steps=2", "train.epochs=1"])
out["train"] = [trained.exit_code, trained.output]
parsed = runner.invoke(app, ["parse", text, "--checkpoint", run])
out["parse"] = [parsed.exit_code, parsed.stdout]
evaluated = runner.invoke(app, ["eval", "--checkpoint", run, "--gold", gold, "--json"])
out["eval"] = [evaluated.exit_code, evaluated.stdout]
print("RESULT " + json.dumps(out))
'''


def test_a_family_in_a_folder_of_its_own_is_found_trains_parses_evaluates_and_is_listed(tmp_path, corpus):
    """CONTRIBUTING.md's "adding a family": one folder ``induce/models/<family>/`` (here under another
    ``sys.path`` entry) with its code and its ``<model>.yaml``; nothing else changes."""
    folder = tmp_path / "root" / "induce" / "models" / "test_folder"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(FOLDER_FAMILY)
    (folder / "test-folder.yaml").write_text("model_name: test-folder\nmodel: {emb_size: 5}\n")
    text = tmp_path / "text.txt"
    text.write_text("the dog saw a cat\nbirds sing\n")
    env = {**child_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path / "root"), child_env()["PYTHONPATH"]])}
    env.pop("INDUCE_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", FOLDER_SCRIPT, str(corpus), str(tmp_path / "run"), str(text),
                           str(Path(corpus) / "valid.gold.txt"), json.dumps(COMMON)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert re.search(r"^test-folder\s+distance\s+test-only family", out["models"], re.M), out["models"]
    assert out["emb_size"] == 5  # its base config, read from its folder
    assert out["display"] == "Folder-LM" and out["published"] == {"value": 12.5, "source": "a test"}
    assert out["train"][0] == 0, out["train"][1]
    assert out["parse"][0] == 0 and out["parse"][1].count("(") >= 2, out["parse"]
    assert out["eval"][0] == 0 and '"sentence_f1"' in out["eval"][1], out["eval"]
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert history and all(math.isfinite(m["valid_ppl"]) for m in history)
    assert history[-1]["optimizer"] == "ScorerSplitOptimizer"  # its own parameter groups


class Surrogate(SpanFamily):
    """``test-spans`` trained on a surrogate: the gradient follows three times the loss, the reported loss is it."""

    def sentence_losses(self, tokens, lengths):
        loss = self.sentence_loss(tokens, lengths)
        return SentenceLosses(3.0 * loss, loss)


def test_the_objective_steps_on_the_training_loss_and_reports_the_reported_one():
    """The sentence objective's step follows ``sentence_losses().train`` while the running loss and validation
    read ``.reported``; a model with the default hook gets the same value in both, as before the hook."""
    from induce.training.objectives import SentenceLoss, reported_loss

    torch.manual_seed(0)
    tokens, lengths = torch.randint(1, 9, (3, 4)), torch.tensor([4, 3, 2])
    plain, surrogate = SpanFamily(9), Surrogate(9)
    surrogate.load_state_dict(plain.state_dict())
    step, shown = SentenceLoss(plain)(tokens, lengths)
    per_sentence = plain.sentence_loss(tokens, lengths)
    assert torch.equal(step, per_sentence.sum() / 3) and torch.equal(shown, per_sentence.detach().sum())
    step3, shown3 = SentenceLoss(surrogate)(tokens, lengths)
    assert torch.allclose(step3, 3 * step) and torch.equal(shown3, shown)
    assert torch.equal(reported_loss(surrogate)(tokens, lengths), per_sentence)
    assert torch.equal(surrogate.perplexity_loss(tokens, lengths), per_sentence)


def test_param_groups_default_to_the_plain_optimiser_and_an_override_splits_it():
    """The base hook: one group of every parameter, the run's optimiser as before; a family's own groups (an
    Adam at its own lr for some parameters) make the split optimiser, the ASGD phase one ASGD over all."""
    from induce.training.optim import Optimisation, ScorerSplitOptimizer

    cfg = load_config(FAMILY, overrides=COMMON).optim
    model = SpanFamily(9)
    plain = Optimisation(model, cfg, torch.device("cpu"))
    assert isinstance(plain.optimizer, torch.optim.Adam) and len(plain.groups) == 1

    class Split(SpanFamily):
        def param_groups(self, optim_config):
            scorer = tuple(self.span_scorer.parameters())
            rest = tuple(p for p in self.parameters() if all(p is not s for s in scorer))
            return [ParamGroup(rest, clip=optim_config.clip), ParamGroup(scorer, adam_lr=0.5, clip=0.1)]

    split = Optimisation(Split(9), cfg, torch.device("cpu"))
    assert isinstance(split.optimizer, ScorerSplitOptimizer)
    assert [opt.param_groups[0]["lr"] for opt in split.optimizer.optimizers] == [cfg.lr, 0.5]
    split.switch_to_asgd()
    (asgd,) = split.optimizer.optimizers
    assert isinstance(asgd, torch.optim.ASGD) and len(asgd.param_groups[0]["params"]) == len(list(model.parameters()))


def test_traits_are_declared_on_the_base_class_and_read_as_attributes():
    """Every trait the rest of induce reads has a documented default on LanguageModel, so no module probes a
    model with ``getattr(model, trait, default)`` (the modules another change rewrites excepted)."""
    traits = ("control", "supervised", "fixed_right_branching", "has_span_scorer", "parse_state_carry",
              "perplexity_is_bound", "validation_loss_text", "shortest_sentence", "graph_capturable",
              "display_name", "published")
    assert all(hasattr(LanguageModel, trait) for trait in traits)
    pattern = re.compile(r"getattr\([^,]+,\s*[\"'](" + "|".join(traits) + r")[\"']")
    skipped = ("induce/trees/decoders.py", "induce/inference/predict.py", "induce/evaluation/", "induce/assess/")
    offenders = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
                 for path in sorted((REPO / "induce").rglob("*.py"))
                 if not path.relative_to(REPO).as_posix().startswith(skipped)
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if pattern.search(line)]
    assert not offenders, "\n".join(offenders)
