"""Gradient-norm and memory diagnostics, their plots and the `induce diagnose` commands."""
from __future__ import annotations

import json

import torch
from typer.testing import CliRunner

from induce.diagnostics import measure as diagnostics
from induce.diagnostics import tasks

torch.set_num_threads(1)  # tiny models: more threads only add contention on shared CI cores
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = dict(emb_size=4, hidden_size=8, attention_size=4)


def test_saved_tensor_meter_counts_distinct_storages():
    x = torch.randn(10, requires_grad=True)
    with diagnostics.SavedTensorMeter() as meter:
        y = x * x  # saves x twice: one storage of 10 float32
    assert meter.bytes == 40
    with diagnostics.SavedTensorMeter() as meter:
        # Both factors require grad, so both are saved: two storages of 10 float32.
        z = torch.randn(10, requires_grad=True) * torch.randn(10, requires_grad=True)
    assert meter.bytes == 80
    (y.sum() + z.sum()).backward()


def _memoryless_rnn(nu: int, rho: int):
    """RelRNN whose cell ignores its recurrent input: gradients can only travel through the memory."""
    torch.manual_seed(0)
    model = tasks.build_model("relrnn", nu=nu, rho=rho, **TINY)
    with torch.no_grad():
        model.cell.weight_hh.zero_()
    return model


def test_gradient_norms_see_only_the_memory_path():
    delay = 10  # copy: length 30, answers at steps 20..29
    window_only = diagnostics.gradient_norms(_memoryless_rnn(nu=2, rho=0), "copy", delay, n=4)
    screened = diagnostics.gradient_norms(_memoryless_rnn(nu=2, rho=10), "copy", delay, n=4)
    assert window_only["length"] == screened["length"] == delay + 20
    # Sliding window of 2, no cell recurrence: the only path from h_t to the answers is the chain of
    # attention queries (s_{t-1} is the query of step t), one attention-derivative factor per step,
    # so the gradient decays fast with the distance to step 20.
    grad = window_only["grad_norm"]
    assert all(g > 0 for g in grad[20:])
    assert grad[0] < 1e-6 * grad[19]
    # With a relevant set, the first states (most attention at near-uniform init: they share a small
    # memory) are kept and receive gradient straight from the answer steps, 20+ steps later.
    # rho = 10: the ten states of steps 0..9 fill the relevant set (later ones get less attention).
    kept = screened["grad_norm"]
    assert all(kept[t] > 1e3 * grad[t] and kept[t] > 1e-2 * kept[19] for t in range(10))
    assert kept[11] < 1e-6 * kept[19]  # a blank after them: screened out, only the query chain


def test_gradient_norms_restore_the_model():
    torch.manual_seed(0)
    model = tasks.build_model("rellstm", **TINY)
    model.train()
    result = diagnostics.gradient_norms(model, "denoise", 12, n=3)
    assert model.training and not model.keep_step_states and model.step_states == []
    assert all(p.grad is None for p in model.parameters())
    assert len(result["grad_norm"]) == 22 and all(g >= 0 for g in result["grad_norm"])


def test_relevancy_memory_is_linear_full_attention_superlinear():
    lengths = [20, 40, 60, 80]
    records = diagnostics.memory_profile(["rellstm", "memlstm"], lengths, batch_size=2, config=TINY)
    memory = {name: [r["memory_bytes"] for r in records if r["model"] == name] for name in ("rellstm", "memlstm")}
    rel_steps = [b - a for a, b in zip(memory["rellstm"], memory["rellstm"][1:])]
    full_steps = [b - a for a, b in zip(memory["memlstm"], memory["memlstm"][1:])]
    # Bounded memory: every extra 20 steps cost the same (the graph of a step has a fixed size).
    assert max(rel_steps) - min(rel_steps) <= 0.01 * max(rel_steps)
    # Full attention: each extra 20 steps cost more than the previous 20 (the memory grows).
    assert full_steps[0] < full_steps[1] < full_steps[2]
    growth = {name: diagnostics.growth_exponent(lengths, memory[name]) for name in ("memlstm", "rellstm")}
    assert growth["memlstm"] > growth["rellstm"] + 0.3
    assert all(r["seconds_per_step"] > 0 and r["memory_kind"] == "autograd_saved_tensors" for r in records)


def test_growth_exponent_on_exact_powers():
    lengths = [10, 20, 40]
    assert abs(diagnostics.growth_exponent(lengths, [3 * t for t in lengths]) - 1) < 1e-9
    assert abs(diagnostics.growth_exponent(lengths, [t * t for t in lengths]) - 2) < 1e-9


def _app():
    from induce.cli.main import app  # with its error wrapper (induce.cli.messages.guard_commands)

    return app


def test_diagnose_cli_memory_and_grad(tmp_path):
    runner = CliRunner()
    stem = tmp_path / "mem"
    result = runner.invoke(_app(), ["diagnose", "memory", "--models", "rellstm,memlstm", "--lengths", "10,20",
                                    "--batch-size", "2", "--hidden-size", "8", "--attention-size", "4",
                                    "--out", str(stem)])
    assert result.exit_code == 0, result.output
    payload = json.loads(stem.with_suffix(".json").read_text())
    assert {(r["model"], r["T"]) for r in payload["records"]} == {
        (m, t) for m in ("rellstm", "memlstm") for t in (10, 20)}
    assert stem.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)

    ckpt, _ = tasks.save_checkpoint(tmp_path / "m.safetensors", tasks.build_model("rellstm", **TINY),
                                    {"task": "copy", "T": 5})
    stem = tmp_path / "grad"
    result = runner.invoke(_app(), ["diagnose", "grad", "--checkpoint", str(ckpt), "--model", "relrnn",
                                    "--hidden-size", "8", "--task", "copy", "--T", "5", "--n", "2",
                                    "--out", str(stem)])
    assert result.exit_code == 0, result.output
    curves = json.loads(stem.with_suffix(".json").read_text())
    assert len(curves) == 2 and all(len(c["grad_norm"]) == 25 for c in curves.values())
    assert stem.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)

    result = runner.invoke(_app(), ["diagnose", "memory", "--lengths", "10,x", "--out", str(stem)])
    assert result.exit_code == 2 and "--lengths" in result.output
    result = runner.invoke(_app(), ["diagnose", "grad", "--out", str(stem)])
    assert result.exit_code == 2


def test_the_png_and_the_json_are_written_both_or_neither(tmp_path, monkeypatch):
    """``--out STEM``: a failure writing STEM.json (a full disk) leaves the STEM.png and STEM.json of before
    as they were, and no temporary file."""
    from induce.cli.main import app

    from helpers import full_disk

    stem = tmp_path / "grad"

    def measure(length: int):
        return CliRunner().invoke(app, ["diagnose", "grad", "--model", "relrnn", "--hidden-size", "8", "--task",
                                        "copy", "--T", str(length), "--n", "2", "--out", str(stem)])

    result = measure(5)
    assert result.exit_code == 0, result.output
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    assert sorted(before) == ["grad.json", "grad.png"]
    full_disk(monkeypatch)
    result = measure(6)
    assert result.exit_code == 2 and "no space left on the device" in result.output, result.output
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
