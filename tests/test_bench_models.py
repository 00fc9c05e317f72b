"""bench/models.py: side-by-side timing of external training steps (the original implementations) and
the per-model training rows of ``bench/gpu_training.json`` (written here by a tiny CPU run)."""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (the interpreted launch test)

import pytest  # noqa: E402

from induce.devtools.launches import as_on_cuda, count_launches  # noqa: E402
from induce.kernels import triton_unavailable_reason, use_backend  # noqa: E402

from helpers import script_module  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "bench" / "models.py"


@pytest.fixture(scope="module")
def bench_models():
    with script_module(BENCH, "bench_models") as module:
        yield module


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


@pytest.mark.slow
def test_training_json_rows_from_a_tiny_cpu_run(bench_models, tmp_path, one_thread):
    """The writer of bench/gpu_training.json, on CPU: one row per model with the GPU file's schema,
    the original matched by name, and whole `induce train` epochs timed in a separate process."""
    from helpers import make_corpus

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
        "--train-override", "train.dev_f1=false", "--training-json", str(out), "--json", str(tmp_path / "table.json"),
    ])
    table = json.loads((tmp_path / "table.json").read_text())
    ours, external = table
    assert ours["launches_torch"] > ours["launches_triton"] > 0 and external["launches"] == 0  # no torch op there
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


# ------------------------------------------------------------------------------------- launch counts


def test_launches_are_counted_by_hand_worked_rules():
    """Views, allocations, scalar reads and empty outputs launch nothing; every other operator, forward
    and backward, is one launch (the rules of induce.devtools.launches, on a step counted by hand)."""
    x = torch.randn(2, 3, requires_grad=True)
    with count_launches() as count:
        y = x.t()  # a view: 0
        z = y * 2  # mul: 1
        buffer = torch.empty(3)  # an allocation: 0
        buffer.fill_(1.0)  # fill: 1
        loss = (z.sum(1) * buffer).sum()  # sum, mul, sum: 3
        loss.item()  # a read to the host: 0
        # backward: the seed (ones_like), d(s * buffer) = mul, d(y * 2) = mul, the sums' and the
        # transpose's gradients are views; x.grad is copied into x's layout (copy_): 4
        loss.backward()
        torch.empty(0).add_(1)  # an empty output: 0
    assert dict(count.aten) == {"aten.mul.Tensor": 4, "aten.fill_.Scalar": 1, "aten.sum.dim_IntList": 1,
                                "aten.sum.default": 1, "aten.ones_like.default": 1, "aten.copy_.default": 1}
    assert count.total == 9 and not count.triton


def test_triton_launches_are_counted_at_the_launcher():
    """``kernel[grid](...)`` is one launch, counted by kernel name; ``run_triton=False`` skips the run."""
    triton = pytest.importorskip("triton")
    from triton.runtime.jit import KernelInterface

    runs = []

    class StandIn(KernelInterface):
        def __init__(self, fn):
            self.fn = fn

        def run(self, *args, grid, warmup, **kwargs):
            runs.append(grid)

    def _my_kernel():
        pass

    kernel = StandIn(_my_kernel)
    with count_launches() as count:
        kernel[(2,)](1)
        kernel[(3,)](1)
    assert count.triton == {"_my_kernel": 2} and runs == [(2,), (3,)] and count.total == 2
    with count_launches(run_triton=False) as count:
        kernel[(4,)](1)
    assert count.triton == {"_my_kernel": 1} and runs == [(2,), (3,)]
    kernel[(5,)](1)  # outside: launches normally, the launcher is restored
    assert runs[-1] == (5,) and triton


@pytest.fixture
def onlstm_at(bench_models, monkeypatch):
    """``make(batch, bptt, hidden)``: bench trainers of a tiny-width ON-LSTM (3 layers) at that batch x bptt."""
    monkeypatch.setattr(bench_models, "_tiny", True)

    def make(batch, bptt, hidden=16):
        monkeypatch.setattr(bench_models, "TINY_BATCH", batch)
        monkeypatch.setattr(bench_models, "TINY_BPTT", bptt)
        monkeypatch.setitem(bench_models.TINY, "onlstm", dict(emb_size=hidden, hidden_size=hidden, chunk_size=4))
        return lambda: bench_models.Trainer("onlstm")

    return make


@pytest.mark.slow
def test_the_launch_count_is_stable_and_the_fused_cell_launches_far_fewer(bench_models, onlstm_at, one_thread):
    """ON-LSTM, 3 layers, 20 x 70 (the paper's segment; tiny widths: the count does not depend on them):
    the same count on consecutive steps and at another width; the fused (Triton) cell launches exactly
    two kernels per layer and time step and the whole step several times fewer than the torch tier."""
    if triton_unavailable_reason():
        pytest.skip(triton_unavailable_reason())
    count = lambda tier, bptt=70, uncounted=1, hidden=16: bench_models.step_launches(  # noqa: E731
        onlstm_at(20, bptt, hidden), tier, "cpu", uncounted)
    for tier in ("torch", "triton"):  # stable: the next step, another width (at a shorter, cheaper segment)
        assert count(tier, 9).total == count(tier, 9, uncounted=2).total == count(tier, 9, hidden=24).total
    torch_tier, fused = count("torch"), count("triton")
    assert fused.triton == {"_onlstm_cell_fwd_kernel": 3 * 70, "_onlstm_cell_bwd_kernel": 3 * 70}
    assert torch_tier.total > 5 * fused.total and not torch_tier.triton
    assert fused.total - sum(fused.triton.values()) < torch_tier.total / 5  # the rest of the step is shared work


def test_the_fused_onlstm_step_meets_the_launch_target(bench_models, onlstm_at, one_thread):
    """Issue 16's target: ON-LSTM with the fused cell at 20 x 70, 3 layers, at most 1,400 launches per
    eager step. Until the cell stops letting autograd materialise the gradients of its unused outputs
    (one zero tensor per cell step, 3 x 70 + 3: the kernel fix of the same issue) the count is ~1,571."""
    if triton_unavailable_reason():
        pytest.skip(triton_unavailable_reason())
    count = bench_models.step_launches(onlstm_at(20, 70), "triton", "cpu")
    if count.aten["aten.zeros.default"] >= 3 * 70:
        pytest.xfail(f"{count.total} launches, {count.aten['aten.zeros.default']} of them materialised zero "
                     f"gradients of the fused cell's unused outputs (fixed in the kernel files)")
    assert count.total <= 1400, count.top(8)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                    reason="needs Triton's interpreter (set before Triton was imported)")
def test_counting_without_running_the_kernels_gives_the_same_count(bench_models, onlstm_at, one_thread, monkeypatch):
    """The CPU count skips the Triton kernels (their outputs are garbage): the same count as a step that
    runs them in the interpreter (small enough to interpret)."""
    make = onlstm_at(2, 5)
    with as_on_cuda(), use_backend("triton"):
        trainer = make()
        trainer.packing = False
        trainer.step(bf16=False, record=False)
        with count_launches(run_triton=True) as ran:
            trainer.step(bf16=False, record=False)
        assert all(torch.isfinite(p).all() for p in trainer.model.parameters())  # the kernels ran
    skipped = bench_models.step_launches(make, "triton", "cpu")
    assert ran.total == skipped.total and ran.triton == skipped.triton and ran.triton
