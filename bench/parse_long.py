"""Time of `induce parse` on one very long line: the linear steps against the quadratic ones, side by side.

The text: sentences of the synthetic treebank (:mod:`induce.data.synthetic`, with commas and
periods) joined into ONE line of N tokens. The model: an untrained ``--model`` at the toy profile's
size (``induce/configs/toy/<model>.yaml``; only the time matters), vocabulary = the synthetic words.
Each size is parsed with :func:`induce.inference.predict.parse_lines` (tokenizer, model on pieces of
``--max-length`` tokens, decoder, punctuation attached, one bracketed line), in two versions:

* ``after``: the code as it is;
* ``before``: the same call with the two steps that are quadratic in the depth of the tree put back (kept
  below for this comparison only): punctuation attached by a descent from the root per mark, and the tree
  written by nltk's recursive ``pformat`` after a deep copy and a ``treepositions`` walk. A line joined
  from pieces is right-branching, so the tree is about N / max_length + max_length levels deep.

The two versions alternate (``--repeats`` times each, medians printed); a ``before`` run longer
than ``--before-limit`` seconds is stopped and printed as ``> LIMIT``, and ``before`` is not run at
larger sizes after that.

    python bench/parse_long.py --threads 1 --sizes 10000 20000 40000 200000
"""
from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import nltk
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from induce.config import CONFIG_DIR, load_config  # noqa: E402
from induce.data.corpus import Vocab  # noqa: E402
from induce.data.synthetic import sample_treebank  # noqa: E402
from induce.inference import predict as inference  # noqa: E402
from induce.models.configs import model_config  # noqa: E402
from induce.models.registry import get_model_class  # noqa: E402


def long_line(n_tokens: int, seed: int = 0) -> tuple[str, list[str]]:
    """One line of ``n_tokens`` tokens (whole synthetic sentences, the last one cut) and the words."""
    trees = sample_treebank({"train": n_tokens // 6 + 10}, seed=seed)["train"]
    tokens = [word for tree in trees for word in tree.leaves()]
    while len(tokens) < n_tokens:
        tokens += tokens
    return " ".join(tokens[:n_tokens]), sorted(set(tokens))


def untrained_run(model_name: str, words: list[str]) -> inference.LoadedRun:
    """An untrained model at the toy profile's size, ready for :func:`induce.inference.predict.parse_lines`."""
    config = load_config(model_name, config_file=CONFIG_DIR / "toy" / f"{model_name}.yaml")
    vocab = Vocab(["<eos>", "<unk>"] + sorted(set(inference.normalize(words)) - {"<eos>", "<unk>"}))
    torch.manual_seed(0)
    model = get_model_class(model_name)(len(vocab), model_config(config)).eval()
    return inference.LoadedRun(model, vocab, {"config": config.to_dict()}, Path("untrained"))


# ------------------------------------------------------------------ the quadratic steps (for comparison)


def attach_before(words, content_tree, content):
    """Punctuation attached the quadratic way: one descent from the root per mark."""
    if content_tree is None:
        return inference._join_right(list(words)) if len(words) > 1 else nltk.Tree("S", list(words))

    def build(node):
        if not isinstance(node, nltk.Tree):
            return content[next(counter)]
        children = [build(child) for child in node]
        first = children[0] if isinstance(children[0], int) else children[0][0]
        last = children[-1] if isinstance(children[-1], int) else children[-1][1]
        return [first, last, children]

    counter = iter(range(len(content)))
    root = content[0] if len(content) == 1 else build(content_tree)
    end = lambda node: node if isinstance(node, int) else node[1]  # noqa: E731
    start = lambda node: node if isinstance(node, int) else node[0]  # noqa: E731
    is_content = set(content)
    for position in range(content[0] + 1, len(words)):
        if position in is_content:
            continue
        previous = position - 1
        if end(root) == previous:
            root = [start(root), position, [root, position]]
            continue
        node = root
        while True:
            index = max(k for k, child in enumerate(node[2]) if start(child) <= previous)
            child = node[2][index]
            if end(child) == previous:
                node[2][index] = [start(child), position, [child, position]]
                break
            node = child
    for position in reversed(range(content[0])):
        root = [position, end(root), [position, root]]

    def to_tree(node):
        if isinstance(node, int):
            return words[node]
        return nltk.Tree("S", [to_tree(child) for child in node[2]])

    return to_tree(root)


def format_before(tree, style="ptb"):
    """A tree written the quadratic way: deep copy, leaves escaped via treepositions, nltk's pformat."""
    escaped = tree.copy(deep=True)
    for position in escaped.treepositions("leaves"):
        escaped[position] = escaped[position].replace("(", "-LRB-").replace(")", "-RRB-")
    with inference._recursion_limit(4 * len(escaped.leaves()) + 1000):
        return escaped.pformat(margin=sys.maxsize)


@contextmanager
def before_issue_19() -> Iterator[None]:
    saved = inference._attach_punctuation, inference.format_tree
    inference._attach_punctuation, inference.format_tree = attach_before, format_before
    try:
        yield
    finally:
        inference._attach_punctuation, inference.format_tree = saved


class TooLong(Exception):
    pass


def timed_parse(run, line: str, max_length: int, limit: Optional[float]) -> tuple[float, str]:
    """Seconds for ``parse_lines(run, [line])`` and its output; :class:`TooLong` past ``limit`` seconds."""
    def stop(signum, frame):
        raise TooLong

    if limit is not None:
        signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        start = time.perf_counter()
        out = inference.parse_lines(run, [line], max_length=max_length)[0]
        return time.perf_counter() - start, out
    finally:
        if limit is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 20_000, 40_000, 200_000])
    parser.add_argument("--model", default="onlstm")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=inference.DEFAULT_MAX_LENGTH)
    parser.add_argument("--before-limit", type=float, default=300.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    line, words = long_line(max(args.sizes))
    run = untrained_run(args.model, words)
    tokens = line.split()
    print(f"model {args.model} (untrained, toy size), {args.threads} thread(s), pieces of {args.max_length} tokens, "
          f"median of {args.repeats}")
    print(f"{'tokens':>8} {'before s':>10} {'after s':>9} {'before/after':>13}")
    before_ok = True
    for size in args.sizes:
        text = " ".join(tokens[:size])
        before, after = [], []
        for _ in range(args.repeats):
            seconds, out_after = timed_parse(run, text, args.max_length, None)
            after.append(seconds)
            if before_ok:
                try:
                    with before_issue_19():
                        seconds, out_before = timed_parse(run, text, args.max_length, args.before_limit)
                    before.append(seconds)
                    assert out_before == out_after, "the two versions disagree"
                except (TooLong, RecursionError) as err:
                    before_ok = False
                    before = [f"> {args.before_limit:.0f}" if isinstance(err, TooLong) else "RecursionError"]
        after_s = statistics.median(after)
        if before and not isinstance(before[0], str):
            before_s = statistics.median(before)
            print(f"{size:>8} {before_s:>10.2f} {after_s:>9.2f} {before_s / after_s:>12.1f}x", flush=True)
        else:
            print(f"{size:>8} {before[0] if before else '-':>10} {after_s:>9.2f} {'-':>13}", flush=True)


if __name__ == "__main__":
    main()
