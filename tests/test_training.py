"""Trainer and checkpoints: atomic writes, damaged / foreign files refused, optimiser state round trip,
exact resume after a kill, schedules, batching, metrics and early stopping (tiny stand-in model)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from rich.console import Console
from safetensors.torch import save_file

from induce.config import load_config
from induce.reproduce import load_profile
from induce.training import batching, checkpoint
from induce.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from induce.training.optim import Schedule, averaged_parameters, build_optimizer
from induce.training.trainer import TIMING_FIELDS, LMLoss, Trainer, evaluate_lm, read_status, resume, train

from helpers import STANDIN, TinyLSTM, make_corpus

QUIET = Console(quiet=True)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpora"))


def tiny_config(corpus, *overrides):
    return load_config(STANDIN, overrides=[
        f"data.corpus={corpus}", "data.batch_size=4", "data.eval_batch_size=3", "data.bptt=8",
        "data.min_bptt=2", "data.bptt_std=2", "optim.lr=2.0", "optim.asgd=never", "train.epochs=2",
        "train.log_interval=4", "train.device=cpu", "train.dev_f1=false", *overrides,
    ])


def model_tensors(run_dir, stem="last"):
    tensors, _ = load_checkpoint(run_dir / stem)
    return {k: v for k, v in tensors.items() if k.startswith("model.")}


# ------------------------------------------------------------------------------------------ checkpoint


def test_checkpoint_round_trip_and_atomic_write(tmp_path, monkeypatch):
    tensors = {"model.w": torch.arange(6.0).view(2, 3), "rng.x": torch.tensor([1, 2], dtype=torch.uint8)}
    meta = {"model_name": "m", "config": {"a": 1}, "inf": math.inf}
    save_checkpoint(tmp_path / "ck", tensors, meta)
    loaded, loaded_meta = load_checkpoint(tmp_path / "ck")
    assert torch.equal(loaded["model.w"], tensors["model.w"]) and loaded["rng.x"].dtype == torch.uint8
    assert loaded_meta["config"] == {"a": 1} and loaded_meta["inf"] == math.inf
    assert loaded_meta["weights_sha256"] == checkpoint.sha256_file(tmp_path / "ck.safetensors")
    # a write that dies half way leaves the previous checkpoint intact and no temporary file
    def broken_save(data, path):
        open(path, "wb").write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "save_file", broken_save)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "ck", {"model.w": torch.zeros(1)}, meta)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.json", "ck.safetensors"]
    again, _ = load_checkpoint(tmp_path / "ck")
    assert torch.equal(again["model.w"], tensors["model.w"])


def test_shared_tensors_are_stored(tmp_path):
    weight = torch.randn(3, 2)
    save_checkpoint(tmp_path / "ck", {"model.a": weight, "model.b": weight}, {})
    loaded, _ = load_checkpoint(tmp_path / "ck")
    assert torch.equal(loaded["model.a"], loaded["model.b"])


@pytest.mark.parametrize("damage", ["truncate", "flip", "missing_weights"])
def test_damaged_checkpoint_is_refused(tmp_path, damage):
    save_checkpoint(tmp_path / "ck", {"model.w": torch.randn(50)}, {})
    weights = tmp_path / "ck.safetensors"
    data = weights.read_bytes()
    if damage == "truncate":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        weights.write_bytes(data[:-3] + bytes([data[-3] ^ 1]) + data[-2:])
    else:
        weights.unlink()
    with pytest.raises(CheckpointError, match="damaged|missing"):
        load_checkpoint(tmp_path / "ck")


def test_foreign_checkpoints_are_refused(tmp_path):
    # plain safetensors without our sidecar
    save_file({"w": torch.zeros(2)}, str(tmp_path / "a.safetensors"))
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "a.safetensors")
    # a sidecar of another format, and one of a future version
    save_checkpoint(tmp_path / "b", {"w": torch.zeros(2)}, {})
    meta = json.loads((tmp_path / "b.json").read_text())
    (tmp_path / "b.json").write_text(json.dumps({**meta, "format": "something-else"}))
    with pytest.raises(CheckpointError, match="not an induce checkpoint"):
        load_checkpoint(tmp_path / "b")
    (tmp_path / "b.json").write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(CheckpointError, match="version 99"):
        load_checkpoint(tmp_path / "b")
    (tmp_path / "b.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not JSON"):
        load_checkpoint(tmp_path / "b")
    # a pickle disguised as weights: the hash check refuses it before anything reads it
    save_checkpoint(tmp_path / "c", {"w": torch.zeros(2)}, {})
    torch.save({"w": torch.zeros(2)}, tmp_path / "c.safetensors")
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(tmp_path / "c")


@pytest.mark.parametrize("kind", ["sgd", "adam", "asgd"])
def test_optimizer_state_round_trip(tmp_path, kind):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    cfg = load_config(STANDIN, overrides=[f"optim.optimizer={'sgd' if kind == 'sgd' else 'adam'}"]).optim
    optimizer = build_optimizer(model.parameters(), cfg, asgd=kind == "asgd")
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 3)).pow(2).sum().backward()
        optimizer.step()
    tensors, json_part = checkpoint.split_optimizer_state(optimizer.state_dict())
    save_checkpoint(tmp_path / "o", tensors, {"optimizer": json_part})
    loaded, meta = load_checkpoint(tmp_path / "o")
    fresh = build_optimizer(model.parameters(), cfg, asgd=kind == "asgd")
    fresh.load_state_dict(checkpoint.join_optimizer_state(loaded, meta["optimizer"]))
    original, restored = optimizer.state_dict(), fresh.state_dict()
    assert original["param_groups"] == restored["param_groups"]
    for index, state in original["state"].items():
        for key, value in state.items():
            other = restored["state"][index][key]
            assert torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other


def test_recurrent_state_flatten_round_trip():
    state = ([(torch.ones(2, 3), torch.zeros(2, 3))], None, {"memory": torch.arange(4.0).view(2, 2)})
    tensors, skeleton = checkpoint.flatten_state(state)
    back = checkpoint.unflatten_state(tensors, json.loads(json.dumps(skeleton)))
    assert isinstance(back[0], list) and isinstance(back[0][0], tuple) and back[1] is None
    assert torch.equal(back[2]["memory"], state[2]["memory"])


# -------------------------------------------------------------------------------------------- batching


def test_batchify_shard_and_segments():
    stream = torch.arange(23)
    data = batching.batchify(stream, 4)  # 5 columns, tail of 3 dropped
    assert data.shape == (4, 5) and data[1, 0] == 5 and data[3, 4] == 19
    assert torch.equal(torch.cat([batching.shard_rows(data, r, 2) for r in range(2)]), data)
    inputs, targets = batching.segment(data, 3, 10)  # clipped to the row end
    assert inputs.shape == (4, 1) and torch.equal(targets, data[:, 4:5])
    rng = np.random.default_rng(0)
    lengths = [batching.next_segment_length(rng, 70, 5, 5, 20) for _ in range(2000)]
    assert min(lengths) >= 5 and max(lengths) <= 90
    assert 65 < np.median(lengths) < 75  # mostly around bptt
    assert sum(length < 50 for length in lengths) > 40  # the bptt/2 branch (p = 0.05) happens
    assert batching.next_segment_length(None, 70) == 70


def test_lm_loss_adds_ar_tar():
    torch.manual_seed(0)
    model = TinyLSTM(10)
    tokens, targets = torch.randint(0, 10, (2, 6)), torch.randint(0, 10, (2, 6))
    plain, ce, _ = LMLoss(model, 0.0, 0.0)(tokens, targets, model.init_state(2))
    full, _, _ = LMLoss(model, 2.0, 1.0)(tokens, targets, model.init_state(2))
    out = model(tokens, model.init_state(2))
    raw = out.raw_outputs[-1]
    expected = plain + 2.0 * out.dropped_outputs[-1].pow(2).mean() + (raw[:, 1:] - raw[:, :-1]).pow(2).mean()
    assert torch.allclose(plain, ce) and torch.allclose(full, expected)


# ----------------------------------------------------------------------------------------- schedules


def test_nonmono_trigger_switches_to_asgd_like_awd_lstm():
    cfg = load_config(STANDIN, overrides=["optim.asgd=nonmono", "optim.nonmono=2"]).optim
    schedule = Schedule(cfg)
    # AWD-LSTM: switch when len(history) > nonmono and loss > min(history[:-nonmono])
    assert not schedule.after_evaluation(1, 5.0)
    assert not schedule.after_evaluation(2, 4.0)
    assert not schedule.after_evaluation(3, 4.5)  # len 2, not > 2
    assert not schedule.after_evaluation(4, 4.9)  # min([5.0]) = 5.0 > 4.9
    assert schedule.after_evaluation(5, 4.2)  # min([5, 4]) = 4.0 < 4.2
    assert schedule.asgd_active and not schedule.after_evaluation(6, 9.0)


def test_epoch_switch_and_plateau():
    cfg = load_config(STANDIN, overrides=["optim.asgd=epoch", "optim.asgd_after_epochs=2", "optim.asgd_lr=5"]).optim
    schedule = Schedule(cfg)
    assert not schedule.after_evaluation(1, 1.0)
    assert schedule.after_evaluation(2, 1.0) and schedule.base_lr == 5.0
    cfg = load_config(STANDIN, overrides=["optim.asgd=never", "optim.plateau_factor=0.5", "optim.plateau_patience=1",
                                          "optim.lr=1"]).optim
    schedule = Schedule(cfg)
    for epoch, loss in enumerate([3.0, 2.0, 2.5, 2.5, 1.0, 1.5], 1):
        schedule.after_evaluation(epoch, loss)
    assert schedule.base_lr == 0.5  # halved once: two evaluations without a new best (2.5, 2.5)


def test_averaged_parameters_swaps_in_asgd_average():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    cfg = load_config(STANDIN).optim
    optimizer = build_optimizer(model.parameters(), cfg, asgd=True)
    seen = []
    for _ in range(4):
        optimizer.zero_grad()
        model(torch.randn(5, 2)).sum().backward()
        optimizer.step()
        seen.append(model.weight.detach().clone())
    current = model.weight.detach().clone()
    with averaged_parameters(model, optimizer):
        # torch's ASGD (t0=0, as AWD-LSTM uses it) averages the iterates from the second step on
        assert torch.allclose(model.weight, torch.stack(seen[1:]).mean(0), rtol=1e-5)
        assert not torch.allclose(model.weight, current)
    assert torch.equal(model.weight, current)


# ------------------------------------------------------------------------------------------ the loop


def test_training_writes_a_run_and_learns(tmp_path, corpus):
    cfg = tiny_config(corpus, "train.epochs=3", "optim.lr=5", "data.variable_bptt=false")
    result = train(cfg, tmp_path / "run", console=QUIET, progress=False)
    run = tmp_path / "run"
    assert {"config.yaml", "metrics.jsonl", "best.json", "best.safetensors", "last.json", "last.safetensors",
            "status.json"} <= {p.name for p in run.iterdir()}
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2, 3]
    assert all(math.isclose(line["valid_ppl"], math.exp(line["valid_loss"])) for line in lines)
    assert lines[-1]["train_loss"] < lines[0]["train_loss"]
    assert read_status(run)["state"] == "finished" and result.epochs_done == 3
    # the best checkpoint holds the epoch with the lowest validation perplexity, and evaluating it
    # again gives that perplexity
    best = min(lines, key=lambda line: line["valid_ppl"])
    _, meta = load_checkpoint(run / "best")
    assert meta["metrics"]["epoch"] == best["epoch"]
    trainer = Trainer(cfg, tmp_path / "unused", console=QUIET, progress=False)
    trainer._setup()
    tensors, _ = load_checkpoint(run / "best")
    trainer.parts.model.load_state_dict(checkpoint.prefixed(tensors, "model"))
    loss = evaluate_lm(trainer.parts.model, trainer.parts.objective.valid_data, cfg.data.bptt, torch.device("cpu"))
    assert math.isclose(math.exp(loss), best["valid_ppl"], rel_tol=1e-9)


class Killed(Exception):
    pass


def test_resume_after_kill_equals_uninterrupted_run(tmp_path, corpus):
    """2 epochs straight vs killed mid-epoch 2 (after ASGD began) + resume: identical weights."""
    overrides = ["train.checkpoint_every=3", "model.dropout=0.3", "optim.asgd=epoch", "optim.asgd_after_epochs=1",
                 "train.alpha=1", "train.beta=1", "optim.lr=1"]
    cfg = tiny_config(corpus, *overrides)
    straight = tmp_path / "straight"
    train(cfg, straight, console=QUIET, progress=False)

    def kill(trainer, epoch, batch):
        if epoch == 2 and batch == 5:  # the last checkpoint is at batch 3: batches 4-5 are redone
            raise Killed

    killed = tmp_path / "killed"
    with pytest.raises(Killed):
        train(cfg, killed, console=QUIET, progress=False, on_batch=kill)
    assert read_status(killed)["state"] == "failed" and "Killed" in read_status(killed)["error"]
    _, meta = load_checkpoint(killed / "last")
    assert (meta["trainer"]["epoch"], meta["trainer"]["batch"]) == (2, 3) and meta["optimizer_kind"] == "ASGD"
    resume(killed, console=QUIET, progress=False)
    assert read_status(killed)["state"] == "finished"
    for stem in ("last", "best"):
        a, b = model_tensors(straight, stem), model_tensors(killed, stem)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), (stem, key)
    def strip(line):
        timing = TIMING_FIELDS
        return {k: v for k, v in json.loads(line).items() if k not in timing}

    assert [strip(line) for line in (straight / "metrics.jsonl").read_text().splitlines()] == [
        strip(line) for line in (killed / "metrics.jsonl").read_text().splitlines()
    ]
    # the comparison is sensitive: another seed gives other weights
    other = tmp_path / "other"
    train(tiny_config(corpus, *overrides, "train.seed=7"), other, console=QUIET, progress=False)
    a, c = model_tensors(straight), model_tensors(other)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_early_stopping_and_time_budget(tmp_path, corpus):
    # lr so small that the weights do not move (each update is below float32 resolution): validation
    # never improves after epoch 1, so patience 1 stops after epoch 2 (a diverging lr, as used here
    # before, now stops the run as diverged)
    result = train(tiny_config(corpus, "train.epochs=6", "train.patience=1", "optim.lr=1e-30"),
                   tmp_path / "es", console=QUIET, progress=False)
    lines = (tmp_path / "es" / "metrics.jsonl").read_text().splitlines()
    assert result.stop_reason == "early_stopping" and len(lines) == 2
    history = [json.loads(line) for line in lines]
    assert not history[-1]["best"]
    # a budget shorter than any step (1 ms was not: a tiny step can take less on a quiet machine)
    result = train(tiny_config(corpus, "train.epochs=50", "train.time_budget=1e-9", "train.log_interval=1"),
                   tmp_path / "tb", console=QUIET, progress=False)
    assert result.stop_reason == "time_budget" and result.epochs_done == 1
    history = [json.loads(line) for line in (tmp_path / "tb" / "metrics.jsonl").read_text().splitlines()]
    assert history[0].get("partial") is True and history[0]["steps"] == 1
    assert read_status(tmp_path / "tb")["stop_reason"] == "time_budget"


def test_dev_f1_selection_needs_trees(tmp_path, corpus):
    from induce.errors import InduceError

    cfg = tiny_config(corpus, "train.select_by=dev_f1", "train.dev_f1=false")
    with pytest.raises(InduceError, match="dev_f1"):
        train(cfg, tmp_path / "x", console=QUIET, progress=False)


def test_missing_corpus_is_a_clear_error(tmp_path):
    from induce.errors import InduceError

    cfg = tiny_config(tmp_path / "nowhere")
    with pytest.raises(InduceError, match="induce preprocess"):
        train(cfg, tmp_path / "x", console=QUIET, progress=False)
    assert not (tmp_path / "x").exists()  # nothing started: no folder (and no lock) left behind


def test_dev_f1_is_logged_and_selects_the_best_checkpoint(tmp_path, corpus):
    from induce.data.corpus import PreparedCorpus
    from induce.evaluation import induce_convention, score
    from induce.inference.loading import load_run
    from induce.inference.predict import predict_trees

    cfg = tiny_config(corpus, "train.dev_f1=true", "train.select_by=dev_f1", "train.epochs=2")
    train(cfg, tmp_path / "f1", console=QUIET, progress=False)
    history = [json.loads(line) for line in (tmp_path / "f1" / "metrics.jsonl").read_text().splitlines()]
    for line in history:
        assert 0.0 <= line["dev_f1_wsj10"] <= 100.0 and 0.0 <= line["dev_f1"] <= 100.0
        assert 0.0 <= line["dev_left_split_pct"] + line["dev_right_split_pct"] <= 100.0
    best = max(history, key=lambda line: line["dev_f1"])
    _, meta = load_checkpoint(tmp_path / "f1" / "best")
    assert meta["metrics"]["epoch"] == best["epoch"]
    # independent recomputation from the saved model: raw words in, evaluator on the gold trees
    prepared = PreparedCorpus(corpus)
    pairs = [(t.leaves(), g) for t, g in zip(prepared.nopunct_trees("valid"), prepared.gold_trees("valid"))
             if 2 <= len(t.leaves()) <= 40]
    trees = predict_trees(load_run(tmp_path / "f1"), [w for w, _ in pairs])
    result = score([g for _, g in pairs], trees, induce_convention())
    assert math.isclose(result.sentence_f1, best["dev_f1"], abs_tol=1e-9)


# ------------------------------------------------------------------------------ sidecar vs weights


def _relabel(sidecar, **changes):
    meta = json.loads(sidecar.read_text())
    for key, value in changes.items():
        if key == "config_model_name":
            meta["config"]["model_name"] = value
        else:
            meta[key] = value
    sidecar.write_text(json.dumps(meta))


def test_a_sidecar_that_names_another_model_is_refused(tmp_path, corpus):
    """PaLM weights relabelled palm-rb (same tensor names and shapes) or prpn, a vocabulary swapped:
    refused with a clear error; an untouched copy and a version-1 sidecar (no model hash) load."""
    import shutil

    from induce.inference.loading import load_run

    cfg = load_config("palm", overrides=[
        f"data.corpus={corpus}", "model.emb_size=6", "model.hidden_size=8", "model.rrnn_size=4",
        "model.attention_size=4", "model.max_span_length=3", "data.batch_size=4", "data.bptt=6",
        "data.eval_batch_size=2", "train.epochs=1", "train.device=cpu", "train.dev_f1=false"])
    run = tmp_path / "palm"
    train(cfg, run, console=QUIET, progress=False)
    assert load_run(run).meta["model_name"] == "palm"
    cases = {
        "palm-rb": dict(model_name="palm-rb", config_model_name="palm-rb"),
        "name only": dict(model_name="prpn"),
        "config only": dict(config_model_name="palm-s"),
        "vocab": dict(vocab={**json.loads((run / "best.json").read_text())["vocab"], "itos": ["x"] * 3}),
    }
    for name, changes in cases.items():
        copy = tmp_path / name
        shutil.copytree(run, copy)
        _relabel(copy / "best.json", **changes)
        with pytest.raises(CheckpointError, match="does not describe these weights"):
            load_run(copy)
    # a checkpoint written before the model hash (format version 1) is read with the weights hash only
    legacy = tmp_path / "legacy"
    shutil.copytree(run, legacy)
    meta = json.loads((legacy / "best.json").read_text())
    del meta["model_sha256"]
    meta["format_version"] = 1
    (legacy / "best.json").write_text(json.dumps(meta))
    assert load_run(legacy).meta["model_name"] == "palm"


# ------------------------------------------------------------------------------- large runs, the bar


def test_a_large_cpu_run_is_announced_with_an_estimate_and_a_cpu_sized_command(tmp_path, corpus, monkeypatch):
    from induce.training import advice

    monkeypatch.setattr(advice, "LARGE_RUN_SECONDS", 0)  # this tiny run counts as "large"
    monkeypatch.setattr(advice, "SHOW_ESTIMATE_SECONDS", 0)
    console = Console(record=True, width=400)
    cfg = load_config("palm", overrides=[
        f"data.corpus={corpus}", "model.emb_size=6", "model.hidden_size=8", "model.rrnn_size=4",
        "model.attention_size=4", "model.max_span_length=3", "data.batch_size=4", "data.bptt=6",
        "data.eval_batch_size=2", "train.epochs=3", "train.device=cpu", "train.dev_f1=false"])
    seen = []

    def look(trainer, epoch, batch):
        if (epoch, batch) == (1, 4):
            seen.append((console.export_text(clear=False), trainer.parts.objective.batches_per_epoch(1)))

    train(cfg, tmp_path / "run", console=console, progress=False, on_batch=look)
    text, per_epoch = seen[0]  # what was printed by the end of the 4th batch
    n_params = sum(t.numel() for t in model_tensors(tmp_path / "run", "best").values())
    assert f"{n_params / 1e6:.1f}M parameters" in text and "training tokens per epoch." in text
    assert "estimate (measured on batches 2-4: " in text and " per epoch, ~" in text
    # the end is the 3 epochs' batches less the 4 done
    assert f"for the {3 * per_epoch - 4:,} batches to the end of the run (train.epochs;" in text
    # the exact CPU-sized command: --model palm with the sizes of induce/configs/cpu/palm.yaml, which load
    command = advice.cpu_sized_command("palm")
    assert f"    {command}\n" in text
    words = command.split()
    assert words[:4] == ["induce", "train", "--model", "palm"] and words[-2] == "--max-steps"
    assert int(words[-1]) == load_profile("cpu").step_budget("palm")
    sized = load_config("palm", overrides=words[4:-2])
    assert sized.model["hidden_size"] == 256 and sized.model["emb_size"] == 128
    # a step budget ends the estimate where it comes first, and a short run gets no note
    monkeypatch.setattr(advice, "LARGE_RUN_SECONDS", 1e30)
    budgeted = Console(record=True, width=400)
    train(tiny_config(corpus, "train.epochs=5", "train.max_steps=7"), tmp_path / "steps", console=budgeted,
          progress=False)
    text = budgeted.export_text()
    assert "for the 3 batches to the end of the run (train.max_steps;" in text and "large run" not in text
    # a normal-sized run says nothing of the kind
    monkeypatch.setattr(advice, "SHOW_ESTIMATE_SECONDS", 1e30)
    quiet = Console(record=True, width=400)
    train(tiny_config(corpus, "train.epochs=1"), tmp_path / "small", console=quiet, progress=False)
    assert "large run" not in quiet.export_text() and "estimate" not in quiet.export_text()


def test_the_run_s_end_is_the_first_budget_it_reaches():
    from induce.training.advice import batches_to_end

    assert batches_to_end(3, 10, 4) == (26, "train.epochs")
    assert batches_to_end(3, 10, 4, steps_left=7) == (7, "train.max_steps")
    assert batches_to_end(3, 10, 4, steps_left=40, tokens_left=95, tokens_per_batch=10.0) == (10, "train.max_tokens")
    assert batches_to_end(1, 10, 10, steps_left=5) == (0, "train.epochs")


def test_the_bar_shows_eta_and_loss_from_the_first_batch(tmp_path, corpus):
    from rich.progress import TimeRemainingColumn

    seen = []

    def look(trainer, epoch, batch):
        if batch == 1:
            task = trainer.progress.tasks[0]
            seen.append((task.fields["loss"], [type(c) for c in trainer.progress.columns]))

    train(tiny_config(corpus, "train.epochs=1", "train.log_interval=1000"), tmp_path / "run",
          console=Console(quiet=True), progress=True, on_batch=look)
    loss, columns = seen[0]
    assert loss.startswith("loss ") and "ppl" in loss  # before the first log interval
    assert TimeRemainingColumn in columns
