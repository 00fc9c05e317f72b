"""bench/tnpcfg_fidelity.py: our TN-PCFG against sustcsonglin/TN-PCFG's ``TNPCFG`` class at a tiny size: the same
initial weights from the same seed, the same loss and gradients (float64), the same MBR trees, the same training
losses. Runs where the prepared original is present (bench/originals/prepare.py; INDUCE_ORIGINALS overrides
``.originals``), skipped otherwise."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from helpers import script_module

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench" / "tnpcfg_fidelity.py"
ORIGINAL = Path(os.environ.get("INDUCE_ORIGINALS", REPO / ".originals")) / "tn-pcfg"


def tiny_corpus(folder: Path) -> Path:
    """``vocab.json`` and ``train.txt`` / ``valid.txt`` of random sentences over 30 words, 2-12 words long."""
    rng = random.Random(0)
    itos = ["<eos>", "<unk>"] + [f"w{i}" for i in range(30)]
    folder.mkdir()
    (folder / "vocab.json").write_text(json.dumps({"eos": "<eos>", "itos": itos}))
    for split in ("train", "valid"):
        lines = [" ".join(rng.choice(itos[1:]) for _ in range(n)) for n in range(2, 13) for _ in range(8)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.slow  # ~5 s of CPU: two tiny grammars compared on 12 batches, trained 4 steps
@pytest.mark.skipif(not (ORIGINAL / "bench_entry.py").exists(),
                    reason=f"no prepared sustcsonglin/TN-PCFG at {ORIGINAL} (bench/ORIGINALS.md)")
def test_tiny_tnpcfg_matches_the_released_code(tmp_path, one_thread):
    out = tmp_path / "fidelity.json"
    with script_module(BENCH, "bench_tnpcfg_fidelity") as bench:
        assert bench.main(["--original", str(ORIGINAL), "--corpus", str(tiny_corpus(tmp_path / "corpus")), "--tiny",
                           "--lengths", "2", "5", "9", "--batches", "2", "--long", "6", "--steps", "4",
                           "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["initial_weight_difference"] == 0.0
    for row in report["steps"]:
        exact = row["dtype"] == "torch.float64"
        assert row["loss_ours"] == pytest.approx(row["loss_released"], rel=1e-12 if exact else 1e-5)
        assert row["relative_gradient_difference"] < (1e-10 if exact else 1e-4)
    assert report["mbr_trees_identical"] == [24, 24]
    assert report["long_sentences"]["identical"] == report["long_sentences"]["sentences"] == 6
    for row in report["training"]:
        assert row["ours"] == pytest.approx(row["released"], rel=1e-4)
