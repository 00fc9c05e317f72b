"""Our TN-PCFG against sustcsonglin/TN-PCFG's ``TNPCFG`` class, the same weights, the same WSJ batches.

Not part of the toolkit: it needs the released code, prepared by ``bench/originals/prepare.py --tn-pcfg
CHECKOUT --out .originals`` (``bench/ORIGINALS.md``), and a prepared WSJ corpus (``induce preprocess``).
It asks six questions, the first five answered on real sentences grouped by length (batches of 4 sentences of
one length, as the released ``ByLengthSampler`` makes them):

1. **Initialisation.** Built after ``torch.manual_seed(s)`` at the r500 sizes, do the two models hold the
   same initial weights (the released class calls no initialiser; ours with ``init: torch`` neither)?
2. **Loss and gradients.** With the same weights (``--checkpoint``: one of our runs, else the seed's
   initialisation), is our step's loss (the mean of ``sentence_loss``) the released ``model.loss`` (the mean
   of ``-log Z`` of ``parser/pcfgs/tdpcfg.py``'s log-space ``TDPCFG._inside``), and is every parameter's
   gradient the same? float32, as both train, and float64.
3. **Decoding.** Are the MBR trees of ``parse_structure`` + :func:`induce.trees.grammar_decoders.mbr_trees`
   the released ``model.evaluate(x, 'mbr')`` trees (``PCFG_base._cky_zero_order`` on the span marginals)?
4. **Training.** From the same initial weights on the same batches, do ``--steps`` optimiser steps of our
   trainer's step (:class:`induce.training.objectives.SentenceLoss`, :class:`induce.training.optim.Optimisation`
   with the shipped ``tnpcfg`` config's ``optim``) and of the released ``CMD.train`` body (``zero_grad``,
   ``loss``, ``backward``, ``clip_grad_norm_(3)``, Adam lr 1e-3, betas 0.75 / 0.999) give the same losses
   and weights?
5. **Long sentences.** The released inside pass runs in log space; ours moves to probability space with a
   normaliser per span. On the longest valid sentences (``--long``), batched with their mixed lengths as ``induce
   eval`` batches them (float32), are our MBR trees those of each sentence alone in float64 (which question 2
   shows equal to the released code)?
6. **Data.** The released data module lower-cases and replaces digit groups inside any token
   (``parser/helper/data_module.py`` ``clean_word``, as compound-pcfg), and keeps the 10,000 most frequent training
   words plus ``<pad>`` and ``<unk>``; ours follows Mikolov (whole-token numbers and ``%`` -> ``N``, 9,998 words plus
   ``<eos>`` and ``<unk>``). Applied to the corpus's word-tag-filtered words (``*.nopunct.txt``): how many tokens
   differ, how many vocabulary words are shared, the unknown-word rates, and the training set at 20- and 40-word caps.

    python bench/originals/prepare.py --tn-pcfg ../orig/TN-PCFG --out .originals
    OMP_NUM_THREADS=1 python bench/tnpcfg_fidelity.py --original .originals/tn-pcfg \\
        --corpus corpora/ptb-wsj --checkpoint RUN/last --steps 20 --json fidelity.json
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # run from a checkout without installing

from induce.config import load_config  # noqa: E402
from induce.training.checkpoint import load_checkpoint, prefixed  # noqa: E402
from induce.training.objectives import SentenceLoss  # noqa: E402
from induce.training.optim import Optimisation  # noqa: E402
from induce.trees.grammar_decoders import mbr_trees  # noqa: E402
from induce.trees.nodes import tree_spans  # noqa: E402


def released_key(ours: str) -> str:
    """Our parameter name -> the released one (our residual layer names its two Linear layers)."""
    return ours.replace(".lin1.", ".linear.0.").replace(".lin2.", ".linear.2.")


#: ``--tiny``: a grammar small enough for a test (rank 5 > 3 NT / 2: our products go through the nonterminals,
#: as at the r500 sizes)
TINY = dict(nt_states=3, t_states=4, rank=5, state_dim=8)


def build_pair(original: Path, vocab_size: int, seed: int, tiny: bool = False):
    """``(ours, released)`` at the r500 sizes (``tiny``: :data:`TINY`), each built right after
    ``torch.manual_seed(seed)``."""
    if str(original) not in sys.path:
        sys.path.insert(0, str(original))
    # the released inside pass calls torch.utils.checkpoint without use_reentrant (a warning per call on PyTorch 2)
    warnings.filterwarnings("ignore", message="torch.utils.checkpoint: the use_reentrant parameter")
    from parser.model import TNPCFG as Released  # noqa: E402  (the prepared copy of the released package)

    from induce.models.tnpcfg.model import TNPCFG, TNPCFGConfig

    cfg = TNPCFGConfig(**(TINY if tiny else {}))  # the shipped defaults: 250 / 500, rank 500, s_dim 256, init torch
    torch.manual_seed(seed)
    ours = TNPCFG(vocab_size, cfg)
    torch.manual_seed(seed)
    args = SimpleNamespace(NT=cfg.nt_states, T=cfg.t_states, r_dim=cfg.rank, s_dim=cfg.state_dim, word_emb_size=200)
    released = Released(args, SimpleNamespace(device="cpu", word_vocab=range(vocab_size)))
    return ours, released


def copy_weights(ours, released) -> None:
    theirs = released.state_dict()
    with torch.no_grad():
        for name, value in ours.state_dict().items():
            theirs[released_key(name)].copy_(value)


#: Parameters that do not change the grammar: the biases of the left and right factors' last layers add a constant
#: per rank, which their log_softmax over the symbols removes. Their exact gradient is zero; Adam scales the
#: rounding noise each code computes in its place to steps of about the learning rate, in directions of its own.
INVARIANT = ("left_mlp.2.bias", "right_mlp.2.bias")


def max_difference(ours, released, skip=()) -> float:
    theirs = released.state_dict()
    return max(float((value - theirs[released_key(name)]).abs().max()) for name, value in ours.state_dict().items()
               if name not in skip)


def drift(ours, released, start: dict, skip=INVARIANT) -> float:
    """``|ours - released| / |ours - start|`` over every weight but ``skip``: how far apart the two runs are
    against how far they have moved. (The largest single difference says little: Adam turns a gradient entry
    that is zero up to rounding into a step of about the learning rate, in the sign of each code's rounding.)"""
    theirs = released.state_dict()
    apart = moved = 0.0
    for name, value in ours.state_dict().items():
        if name in skip:
            continue
        apart += float((value - theirs[released_key(name)]).double().pow(2).sum())
        moved += float((value - start[name]).double().pow(2).sum())
    return (apart / moved) ** 0.5 if moved else 0.0


def read_corpus(corpus: Path, split: str = "train"):
    """``(vocab size, {length: [id lists]})`` of a split's text (words only, ``<unk>`` as the corpus has it)."""
    itos = json.loads((corpus / "vocab.json").read_text())["itos"]
    stoi = {word: i for i, word in enumerate(itos)}
    by_length = defaultdict(list)
    for line in (corpus / f"{split}.txt").read_text().splitlines():
        words = line.split()
        if len(words) >= 2:
            by_length[len(words)].append([stoi[w] for w in words])
    return len(itos), by_length


def batches_of(by_length, lengths, count: int, size: int, seed: int):
    """``count`` batches of ``size`` sentences for each length in ``lengths`` (drawn with ``seed``)."""
    rng = random.Random(seed)
    out = []
    for length in lengths:
        for _ in range(count):
            rows = rng.sample(by_length[length], size)
            out.append((torch.tensor(rows), torch.full((size,), length, dtype=torch.long)))
    return out


def compare_step(ours, released, words, lengths):
    """Loss and gradients of one batch, ours against the released."""
    for model in (ours, released):
        model.zero_grad(set_to_none=True)
    our_loss = ours.sentence_loss(words, lengths).mean()  # SentenceLoss's loss, without its cast to float32
    our_loss.backward()
    their_loss = released.loss({"word": words, "seq_len": lengths})
    their_loss.backward()
    theirs = dict(released.named_parameters())
    pairs = [(name, p.grad, theirs[released_key(name)].grad) for name, p in ours.named_parameters()]
    total = sum(float(q.double().pow(2).sum()) for _, _, q in pairs) ** 0.5
    overall = sum(float((g - q).double().pow(2).sum()) for _, g, q in pairs) ** 0.5 / total
    # per parameter, relative to its own gradient; parameters whose gradient is zero in exact arithmetic (the
    # biases of left_mlp / right_mlp's last layer: a constant over the symbols, which log_softmax over the
    # symbols removes) hold rounding noise only: those under 1e-6 of the whole gradient's norm are left out
    worst, worst_name = 0.0, ""
    for name, g, q in pairs:
        norm = float(q.double().norm())
        if norm < 1e-6 * total:
            continue
        rel = float((g - q).double().norm()) / norm
        if rel > worst:
            worst, worst_name = rel, name
    return float(our_loss.detach()), float(their_loss.detach()), overall, worst, worst_name


def our_trees(ours, words, lengths):
    structure = ours.parse_structure(words, lengths)["span_posteriors"][..., 0]
    return [sorted(s for s in tree_spans(tree) if s[1] - s[0] >= 2)
            for tree in mbr_trees(structure, lengths)]


def released_trees(released, words, lengths):
    prediction = released.evaluate({"word": words, "seq_len": lengths}, decode_type="mbr")["prediction"]
    return [sorted(tuple(s) for s in spans if s[1] - s[0] >= 2) for spans in prediction]


def long_sentences(ours, by_length, count: int) -> dict:
    """Question 5: the ``count`` longest valid sentences in one float32 batch against each alone in float64."""
    rows = [s for n in sorted(by_length, reverse=True) for s in by_length[n]][:count]
    words = torch.zeros(len(rows), len(rows[0]), dtype=torch.long)
    for i, row in enumerate(rows):
        words[i, : len(row)] = torch.tensor(row)
    lengths = torch.tensor([len(row) for row in rows])
    ours.float().eval()
    batched = our_trees(ours, words, lengths)
    ours.double()
    alone = [our_trees(ours, words[i : i + 1, : len(row)], lengths[i : i + 1])[0] for i, row in enumerate(rows)]
    ours.float()
    same = sum(a == b for a, b in zip(batched, alone))
    shared = sum(len(set(a) & set(b)) for a, b in zip(batched, alone))
    spans = sum(len(b) for b in alone)
    print(f"5. the {len(rows)} longest valid sentences ({int(lengths.min())}-{int(lengths.max())} words): float32 "
          f"batched trees identical to float64 alone for {same}; {shared} of {spans} spans shared")
    return {"sentences": len(rows), "lengths": [int(lengths.min()), int(lengths.max())], "identical": same,
            "spans_shared": shared, "spans": spans}


#: the released number rule (``clean_word`` of ``parser/helper/data_module.py``): every digit group, inside any token
RELEASED_NUMBER = re.compile(r"[0-9]{1,}([,.]?[0-9]*)*")
LEAF = re.compile(r"\(([^\s()]+) ([^\s()]+)\)")


def data_conventions(corpus: Path) -> dict:
    """Question 6 (see the module docstring)."""
    from induce.data.mikolov import normalize_word

    def leaves(split):
        return [[word for _, word in LEAF.findall(line)] for line in (corpus / f"{split}.nopunct.txt").open()]

    def released(word):
        return RELEASED_NUMBER.sub("N", word.lower())

    train, valid = leaves("train"), leaves("valid")
    counts = Counter(released(w) for s in train for w in s)
    vocab = {w for w, _ in counts.most_common(10000)}
    ours = set(json.loads((corpus / "vocab.json").read_text())["itos"]) - {"<eos>", "<unk>"}
    differ = Counter((released(w), normalize_word(w)) for s in train for w in s if released(w) != normalize_word(w))
    tokens = sum(map(len, train))
    out = {"tokens_normalised_differently": [sum(differ.values()), tokens],
           "most_frequent_differences": [[a, b, n] for (a, b), n in differ.most_common(5)],
           "vocabulary_shared": [len(vocab & ours), len(vocab), len(ours)]}
    for split, sentences in (("train", train), ("valid", valid)):
        words = [released(w) for s in sentences for w in s]
        text = [w for line in (corpus / f"{split}.txt").open() for w in line.split()]
        out[f"{split}_unknown_rate"] = {"released": sum(w not in vocab for w in words) / len(words),
                                         "ours": sum(w == "<unk>" for w in text) / len(text)}
    lengths = [len(s) for s in train]
    for cap in (20, 40):
        kept = [n for n in lengths if 2 <= n <= cap]
        out[f"train_cap_{cap}"] = {"sentences": len(kept), "words": sum(kept)}
    long = [len(s) for s in valid if len(s) > 20]
    out["valid_over_20_words"] = {"sentences": [len(long), len(valid)], "words": [sum(long), sum(map(len, valid))]}
    print(f"6. tokens normalised differently {sum(differ.values())} of {tokens} (most: {differ.most_common(3)}); "
          f"vocabulary words shared {len(vocab & ours)} of {len(vocab)} / {len(ours)}; unknown rate train "
          f"{out['train_unknown_rate']['released']:.4f} released / {out['train_unknown_rate']['ours']:.4f} ours, "
          f"valid {out['valid_unknown_rate']['released']:.4f} / {out['valid_unknown_rate']['ours']:.4f}; training "
          f"words at a 20-word cap {out['train_cap_20']['words']}, at 40 {out['train_cap_40']['words']}; valid "
          f"sentences over 20 words {len(long)} of {len(valid)}, {sum(long)} of {sum(map(len, valid))} words")
    return out


def train_both(ours, released, batches, steps: int):
    """``steps`` optimiser steps of each, on the same batches; per step the two losses."""
    config = load_config("tnpcfg")
    ours.train()
    released.train()
    optimisation = Optimisation(ours, config.optim, torch.device("cpu"))
    loss_module = SentenceLoss(ours)
    optimizer = torch.optim.Adam(params=released.parameters(), lr=0.001, betas=(0.75, 0.999))
    start = {name: value.clone() for name, value in ours.state_dict().items()}
    rows = []
    for step in range(steps):
        words, lengths = batches[step % len(batches)]
        our_loss = optimisation.step(lambda w=words, n=lengths: loss_module(w, n))[0]
        optimizer.zero_grad()
        loss = released.loss({"word": words, "seq_len": lengths})
        loss.backward()
        torch.nn.utils.clip_grad_norm_(released.parameters(), 3.0)
        optimizer.step()
        rows.append({"step": step + 1, "length": int(lengths[0]), "ours": our_loss.item(), "released": loss.item(),
                     "apart_over_moved": drift(ours, released, start),
                     "max_weight_difference": max_difference(ours, released, INVARIANT)})
        print(f"  step {step + 1:3d} (length {int(lengths[0]):2d}): loss ours {our_loss.item():.6f} "
              f"released {loss.item():.6f}; weights: |ours - released| / |ours - initial| "
              f"{rows[-1]['apart_over_moved']:.1e}, largest difference {rows[-1]['max_weight_difference']:.1e}",
              flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--original", type=Path, required=True, help="the prepared tn-pcfg folder")
    parser.add_argument("--corpus", type=Path, required=True, help="a prepared WSJ corpus (vocab.json, train.txt)")
    parser.add_argument("--checkpoint", help="one of our TN-PCFG runs (RUN/last, RUN/best): its weights for 2 and 3")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2, 5, 10, 20, 30])
    parser.add_argument("--batches", type=int, default=2, help="batches per length for 2 and 3")
    parser.add_argument("--steps", type=int, default=20, help="training steps for 4 (0: skip)")
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--long", type=int, default=16, help="the longest valid sentences for 5")
    parser.add_argument("--parts", default="123456", help="the questions to answer, e.g. 123 (default: all six)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tiny", action="store_true", help="3 / 4 symbols, rank 5, width 8: a check that it runs")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    report: dict = {"seed": args.seed}

    vocab_size, by_length = read_corpus(args.corpus)
    ours, released = build_pair(args.original, vocab_size, args.seed, args.tiny)
    report["initial_weight_difference"] = max_difference(ours, released)
    print(f"1. same seed, largest initial weight difference: {report['initial_weight_difference']:.3g}")
    if args.checkpoint:
        tensors, _ = load_checkpoint(args.checkpoint)
        ours.load_state_dict(prefixed(tensors, "model"))
    copy_weights(ours, released)
    report["weights"] = args.checkpoint or f"initialisation, seed {args.seed}"

    batches = batches_of(by_length, args.lengths, args.batches, 4, args.seed)
    report["steps"] = []
    for dtype in (torch.float32, torch.float64) if "2" in args.parts else ():
        ours.to(dtype)
        released.to(dtype)
        for words, lengths in batches:
            started = time.perf_counter()
            row = compare_step(ours, released, words, lengths)
            report["steps"].append({"dtype": str(dtype), "length": int(lengths[0]), "loss_ours": row[0],
                                    "loss_released": row[1], "relative_gradient_difference": row[2],
                                    "worst_parameter_relative_difference": row[3], "worst_parameter": row[4]})
            print(f"2. {str(dtype)[6:]} length {int(lengths[0]):2d}: loss ours {row[0]:.6f} released {row[1]:.6f}; "
                  f"|gradient difference| / |gradient| {row[2]:.1e}, worst parameter {row[3]:.1e} ({row[4]}) "
                  f"[{time.perf_counter() - started:.1f} s]", flush=True)
    ours.float()
    released.float()
    ours.eval()
    released.eval()
    same = total = 0
    for words, lengths in batches if "3" in args.parts else ():
        a, b = our_trees(ours, words, lengths), released_trees(released, words, lengths)
        same += sum(x == y for x, y in zip(a, b))
        total += len(a)
    if "3" in args.parts:
        report["mbr_trees_identical"] = [same, total]
        print(f"3. MBR trees identical: {same} of {total} sentences")

    if "6" in args.parts and (args.corpus / "train.nopunct.txt").exists():
        report["data"] = data_conventions(args.corpus)
    if "5" in args.parts:
        report["long_sentences"] = long_sentences(ours, read_corpus(args.corpus, "valid")[1], args.long)

    if args.steps and "4" in args.parts:
        ours, released = build_pair(args.original, vocab_size, args.seed, args.tiny)
        train_batches = batches_of(by_length, [n for n in args.lengths if n <= 20], max(1, args.steps), 4,
                                   args.seed + 1)
        random.Random(args.seed).shuffle(train_batches)
        print(f"4. {args.steps} training steps from the seed's initialisation, the same batches:")
        report["training"] = train_both(ours, released, train_batches, args.steps)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
