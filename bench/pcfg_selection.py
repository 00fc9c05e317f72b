"""What a sentence-level model's validation would select: train a profile's model (the cpu profile's C-PCFG by
default) and, at each epoch's end (one batch into the next epoch), measure its validation loss per token four
ways on the monitor set: every length or only within the training length cap, ``z`` sampled (the bound) or at the
mean of q(z | x) (``valid_z``); the trainer's own line (dev F1 on the monitor set) is in ``OUT/metrics.jsonl``.
One JSON line per epoch on stdout and in ``OUT.jsonl``. The figures of *Model selection of the neural PCFGs* in
``bench/results/models.md``:

    OMP_NUM_THREADS=1 python bench/pcfg_selection.py --corpus CORPORA/ptb-wsj-train2500-valid400 --out RUN \\
        --seconds 900 --seed 1

(``CORPORA/ptb-wsj-train2500-valid400``: the cpu profile's subset corpus, made by ``induce reproduce --profile
cpu``.) Only for models with a ``valid_z`` option; the others' two z columns are equal.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch


def main() -> None:
    from induce.reproduce.profiles import build_run_config, load_profile
    from induce.training import train
    from induce.training.objectives import SentenceLevel, length_cap

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="prepared corpus (the profile's subset corpus)")
    parser.add_argument("--out", required=True, type=Path, help="run folder to create")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--model", default="cpcfg")
    parser.add_argument("--seconds", type=float, default=900.0, help="train.time_budget")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = build_run_config(load_profile(args.profile), args.model, [
        f"data.corpus={args.corpus}", f"train.seed={args.seed}", "train.device=cpu",
        f"train.time_budget={args.seconds}", "train.epochs=100"])
    cap = length_cap(config, config.train.epochs)
    measured: set = set()
    log = args.out.with_suffix(".jsonl").open("a", encoding="utf-8")

    def on_batch(trainer, epoch: int, batch: int) -> None:
        if batch != 1 or epoch == 1 or epoch in measured:
            return
        measured.add(epoch)
        model, objective = trainer.parts.model, trainer.parts.objective
        every = objective.valid_sentences
        within = [s for s in every if cap is None or len(s) <= cap]
        row = {"epoch": epoch - 1, "steps": trainer.parts.loop.steps_total, "sentences": len(every),
               "sentences_within_cap": len(within), "cap": cap}
        original = getattr(model.config, "valid_z", None)
        for mode in ("sample", "mean"):
            if original is not None:
                object.__setattr__(model.config, "valid_z", mode)  # the model reads it at each call
            for name, sentences in (("every", every), ("within_cap", within)):
                loss = SentenceLevel.mean_loss(model, model.sentence_loss, sentences, 32, "cpu")
                row[f"ppl_{name}_z_{mode}"] = round(math.exp(loss), 2)
        if original is not None:
            object.__setattr__(model.config, "valid_z", original)
        print(json.dumps(row), flush=True)
        log.write(json.dumps(row) + "\n")
        log.flush()

    train(config, args.out, on_batch=on_batch, progress=False)


if __name__ == "__main__":
    main()
