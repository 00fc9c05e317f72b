"""bench/models.py: side-by-side timing of external training steps (the original implementations) and
the per-model training rows of ``bench/gpu_training.json`` (written here by a tiny CPU run)."""
from __future__ import annotations

import importlib.util
import json
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


ROW_KEYS = {"model", "ours_tok_s", "original_tok_s", "induce_train_epoch1_tok_s", "induce_train_tok_s",
            "gpu_mem_gib", "device"}


def test_training_json_rows_from_a_tiny_cpu_run(bench_models, tmp_path, one_thread):
    """The writer of bench/gpu_training.json, on CPU: one row per model with the GPU file's schema,
    the original matched by name, and whole `induce train` epochs timed in a separate process."""
    from test_training_standin import make_corpus

    corpus = make_corpus(tmp_path / "corpora", train=40, valid=6, test=4)
    entry = tmp_path / "bench_entry.py"
    entry.write_text(
        "class T:\n"
        "    batch, bptt = 2, 3\n"
        "    def step(self):\n"
        "        sum(range(1000))\n"
        "def make_trainer(device='cpu'):\n"
        "    assert device == 'cpu'\n"
        "    return T()\n"
    )
    out = tmp_path / "rows.json"
    earlier = {key: None for key in ROW_KEYS} | {"model": "prpn"}
    out.write_text(json.dumps([earlier, earlier | {"model": "onlstm"}]))  # onlstm's row is replaced
    bench_models.main([
        "--device", "cpu", "--tiny", "--threads", "1", "--models", "onlstm", "--steps", "1", "--warmup", "1",
        "--parse-sentences", "0", "--epochs", "1", "--corpus", str(corpus), "--external", f"onlstm-original={entry}",
        "--train-override", "data.batch_size=2", "--train-override", "data.bptt=6",
        "--train-override", "train.dev_f1=false", "--training-json", str(out),
    ])
    rows = json.loads(out.read_text())
    assert [row["model"] for row in rows] == ["prpn", "onlstm"]
    assert rows[0] == earlier  # rows of models not in this run are kept
    row = rows[1]
    assert set(row) == ROW_KEYS
    for key in ("ours_tok_s", "original_tok_s", "induce_train_epoch1_tok_s", "induce_train_tok_s"):
        assert isinstance(row[key], float) and row[key] > 0, key
    assert row["gpu_mem_gib"] is None and row["device"] == "cpu (1 threads)"


def test_cpu_run_refuses_the_gpu_file(bench_models, capsys):
    with pytest.raises(SystemExit):
        bench_models.main(["--device", "cpu", "--tiny", "--models", "onlstm", "--training-json",
                           str(bench_models.GPU_JSON)])
    assert "GPU figures" in capsys.readouterr().err
