"""PaLM ``variant: released`` parsing as one stream (:meth:`induce.models.palm.PaLMBase.parse_stream`): the
layers below the span attention run over many sentences per call (``chunk_tokens``, default 4096) against
one sentence per call (``chunk_tokens=1``: each segment through layer 1, layer 2 and the attention in
turn), side by side in one run, interleaved, median over ``--repeats``; the ratio is printed.

Batch 1 (the stream carries the LSTM state from sentence to sentence), so each step reads the
recurrent matrices whole (4H x H fp32: 20 MB per layer at H = 1120): with one layer per call over
thousands of tokens that matrix stays in cache. Untrained model at ``induce/configs/palm.yaml``'s size;
sentences: the first ``--sentences`` lines of ``$INDUCE_DATA/ptb_lm/ptb.valid.txt`` (or ``--text``).

    python bench/palm_stream.py --threads 1 --sentences 150 --repeats 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--text", type=Path, help="one sentence per line (default: $INDUCE_DATA/ptb_lm/ptb.valid.txt)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="model config override")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from induce.config import load_config
    from induce.models.configs import model_config
    from induce.models.registry import get_model_class

    text = args.text or Path(os.environ.get("INDUCE_DATA", "data")) / "ptb_lm" / "ptb.valid.txt"
    lines = [line.split() for line in text.read_text(encoding="utf-8").splitlines() if line.split()][: args.sentences]
    words = sorted({w for line in lines for w in line})
    index = {w: i + 1 for i, w in enumerate(words)}  # 0 = <eos>
    sentences = [[index[w] for w in line] for line in lines]
    config = load_config("palm", overrides=list(args.override))
    torch.manual_seed(0)
    model = get_model_class("palm")(len(words) + 1, model_config(config)).eval()
    tokens = sum(len(s) + 1 for s in sentences) + 1
    model.parse_stream(sentences[:5], 0)  # warm-up
    times = {"one call per layer per 4096 tokens": [], "one sentence per call": []}
    chunks = {"one call per layer per 4096 tokens": 4096, "one sentence per call": 1}
    results = {}
    for _ in range(args.repeats):
        for name, chunk in chunks.items():
            started = time.perf_counter()
            results[name] = model.parse_stream(sentences, 0, chunk_tokens=chunk)
            times[name].append(time.perf_counter() - started)
    fast, slow = results.values()
    worst = 0.0
    for a, b in zip(fast, slow):  # -inf where a span is not scored: the same entries in both
        finite = torch.isfinite(a)
        assert torch.equal(finite, torch.isfinite(b))
        worst = max(worst, (a[finite] - b[finite]).abs().max().item() if finite.any() else 0.0)
    print(f"PaLM released, hidden {config.model['hidden_size']}, {len(sentences)} sentences ({tokens} tokens), "
          f"{args.threads} thread(s), median of {args.repeats}; max |score difference| {worst:.2e}")
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, seconds in medians.items():
        print(f"  {name:36s} {seconds:7.2f} s  {tokens / seconds:8.1f} tokens/s")
    base, new = medians["one sentence per call"], medians["one call per layer per 4096 tokens"]
    print(f"  speed-up: {base / new:.2f}x")


if __name__ == "__main__":
    main()
