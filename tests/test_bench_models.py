"""bench/models.py's side-by-side timing of external training steps (the original implementations)."""
from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "models.py"


@pytest.fixture(scope="module")
def bench_models():
    spec = importlib.util.spec_from_file_location("bench_models", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_external_trainer_times_the_external_step(bench_models, tmp_path):
    helper = tmp_path / "helper_module.py"
    helper.write_text("STEPS = []\n")
    entry = tmp_path / "bench_entry.py"
    entry.write_text(
        "import helper_module\n"  # a sibling import, as the original code bases do
        "class T:\n"
        "    batch, bptt = 4, 5\n"
        "    def step(self):\n"
        "        helper_module.STEPS.append(1)\n"
        "def make_trainer():\n"
        "    return T()\n"
    )
    trainer = bench_models.ExternalTrainer(str(entry))
    trainer.step(bf16=False, record=False)
    trainer.step(bf16=False, record=True)
    trainer.step(bf16=False, record=True)
    import helper_module

    assert helper_module.STEPS == [1, 1, 1]  # every step ran; only the recorded ones are timed
    assert len(trainer.times) == 2
    assert trainer.tokens_per_second() == pytest.approx(20 / statistics.median(trainer.times))
