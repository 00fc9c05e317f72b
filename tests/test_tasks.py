"""Copy / Denoise generators (deterministic by seed, correct by construction), the masked-loss
runner, checkpoints and the `induce task` commands."""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from induce.diagnostics import tasks
from induce.errors import InduceError, InputError

torch.set_num_threads(1)  # tiny models: more threads only add contention on shared CI cores


@pytest.mark.parametrize("task", tasks.TASKS)
def test_generators_are_deterministic_by_seed(task):
    a, b, c = (tasks.make_task(task, 16, 30, seed) for seed in (7, 7, 8))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize("delay", [1, 12, 100])
def test_copy_is_correct_by_construction(delay):
    data = tasks.copy_task(50, delay, seed=1)
    n, length = data.inputs.shape
    assert length == delay + 20
    assert data.answer_steps.tolist() == list(range(delay + 10, delay + 20))
    for x, y in zip(data.inputs.tolist(), data.targets.tolist()):
        assert all(1 <= s <= 8 for s in y)
        assert x[:10] == y  # symbols first, in order
        assert x[delay + 9] == tasks.MARKER  # marker right before the answer steps
        rest = x[10 : delay + 9] + x[delay + 10 :]
        assert rest == [tasks.BLANK] * (length - 11)


@pytest.mark.parametrize("delay", [11, 30, 200])
def test_denoise_is_correct_by_construction(delay):
    data = tasks.denoise_task(50, delay, seed=2)
    n, length = data.inputs.shape
    assert length == delay + 10
    assert data.answer_steps.tolist() == list(range(delay, delay + 10))
    positions_seen = set()
    for x, y in zip(data.inputs.tolist(), data.targets.tolist()):
        noisy = x[: delay - 1]
        symbols = [s for s in noisy if s != tasks.BLANK]
        assert symbols == y and len(y) == 10 and all(1 <= s <= 8 for s in y)
        assert x[delay - 1] == tasks.MARKER
        assert x[delay:] == [tasks.BLANK] * 10
        positions_seen.add(tuple(i for i, s in enumerate(noisy) if s != tasks.BLANK))
    if delay > 11:  # positions really are random (with T = 11 there is a single choice)
        assert len(positions_seen) > 1


def test_bad_task_arguments_are_clear_errors():
    with pytest.raises(InduceError, match="unknown task"):
        tasks.make_task("reverse", 2, 10, 0)
    with pytest.raises(InduceError, match="denoise needs T >= 11"):
        tasks.make_task("denoise", 2, 10, 0)


def test_masked_loss_is_the_mean_cross_entropy_of_the_answer_steps():
    torch.manual_seed(0)
    model = tasks.build_model("rellstm", emb_size=4, hidden_size=8, attention_size=4, nu=2, rho=2)
    data = tasks.copy_task(3, 5, seed=0)
    loss = tasks.masked_loss(model, data)
    # Brute force from the logits of EVERY step: pick the answer steps one by one.
    logits = model.logits(model(data.inputs).hidden)  # [3, 25, 10]
    terms = [
        -torch.log_softmax(logits[b, int(step)], -1)[data.targets[b, k]]
        for b in range(3)
        for k, step in enumerate(data.answer_steps)
    ]
    torch.testing.assert_close(loss, torch.stack(terms).mean())
    # The blank targets of the other steps are not scored: only 10 answers per example.
    assert data.answer_steps.numel() == tasks.N_RECALL


def test_runner_learns_a_short_copy_and_checkpoint_round_trips(tmp_path):
    torch.manual_seed(0)
    model = tasks.build_model("rellstm", emb_size=8, hidden_size=16, attention_size=8, nu=4, rho=10)
    before = tasks.evaluate(model, "copy", 2, n=100)
    history = tasks.train(model, "copy", 2, steps=60, batch_size=16, lr=1e-2, eval_every=30, eval_size=100)
    after = history["final"]
    assert history["steps"] == 60 and [e["step"] for e in history["evals"]] == [30, 60]
    # Chance is 1/8 per symbol; a few dozen updates already move loss and accuracy well away from it.
    assert after["loss"] < before["loss"] - 0.2
    assert after["symbol_accuracy"] > before["symbol_accuracy"] + 0.1
    path, sidecar = tasks.save_checkpoint(tmp_path / "m.safetensors", model, {"task": "copy", "T": 3})
    loaded, meta = tasks.load_checkpoint(path)
    assert meta["model"] == "rellstm" and meta["T"] == 3 and meta["config"]["rho"] == 10
    data = tasks.copy_task(4, 3, seed=5)
    model.eval(), loaded.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            tasks.answer_logits(model, data.inputs, data.answer_steps),
            tasks.answer_logits(loaded, data.inputs, data.answer_steps),
        )
    assert not path.read_bytes().startswith(b"\x80")  # safetensors, not pickle


def test_load_checkpoint_errors_name_the_file(tmp_path):
    with pytest.raises(InputError, match="missing.safetensors"):
        tasks.load_checkpoint(tmp_path / "missing.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"junk")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InputError, match="bad.json"):
        tasks.load_checkpoint(tmp_path / "bad.safetensors")


def _app():
    from induce.cli.main import app  # with its error wrapper (induce.cli.messages.guard_commands)

    return app


def test_task_cli_train_and_eval(tmp_path):
    runner = CliRunner()
    ckpt = tmp_path / "c.safetensors"
    result = runner.invoke(_app(), ["task", "train", "--model", "relrnn", "--task", "denoise", "--T", "12",
                                    "--batch-size", "4",
                                    "--steps", "4", "--eval-every", "2", "--hidden-size", "8",
                                    "--attention-size", "4", "--out", str(ckpt)])
    assert result.exit_code == 0, result.output
    assert json.loads(ckpt.with_suffix(".json").read_text())["train"]["steps"] == 4
    out = tmp_path / "eval.json"
    result = runner.invoke(_app(), ["task", "eval", "--checkpoint", str(ckpt), "--T", "12,20", "--n", "10",
                                    "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert [r["T"] for r in json.loads(out.read_text())["results"]] == [12, 20]
    result = runner.invoke(_app(), ["task", "eval", "--checkpoint", str(tmp_path / "nope.safetensors")])
    assert result.exit_code == 2 and "nope" in result.output
    result = runner.invoke(_app(), ["task", "train", "--task", "sort", "--out", str(ckpt)])
    assert result.exit_code == 2 and "unknown task" in result.output


def test_task_checkpoints_use_the_trainer_format_and_old_ones_still_load(tmp_path):
    """Task checkpoints are written by the trainer's checkpoint code (format, hashes: a damaged weights file
    is refused); a checkpoint written before that (a plain safetensors file and a sidecar without
    ``format``) still loads, to the same weights."""
    import json

    from safetensors.torch import save_file

    from induce.training.checkpoint import CheckpointError

    torch.manual_seed(0)
    model = tasks.build_model("rellstm", hidden_size=8, attention_size=8, nu=2, rho=2)
    path, sidecar = tasks.save_checkpoint(tmp_path / "new.safetensors", model, {"task": "copy", "T": 3})
    assert (path.name, sidecar.name) == ("new.safetensors", "new.json")
    meta = json.loads(sidecar.read_text())
    assert meta["format"] == "induce-checkpoint" and meta["model"] == "rellstm" and meta["T"] == 3
    old = tmp_path / "old.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(old))
    (tmp_path / "old.json").write_text(json.dumps({"model": "rellstm", "config": model.config.model_dump(),
                                                    "vocab_size": model.vocab_size, "task": "copy", "T": 3}))
    for stored in (path, old):
        loaded, loaded_meta = tasks.load_checkpoint(stored)
        assert loaded_meta["T"] == 3
        for name, tensor in model.state_dict().items():
            torch.testing.assert_close(loaded.state_dict()[name], tensor)
    path.write_bytes(path.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(CheckpointError, match="damaged checkpoint"):
        tasks.load_checkpoint(path)
