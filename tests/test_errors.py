"""User mistakes in preprocess / eval / parse / diagnose give a one-line message and exit 2, never a
traceback: empty length filters, unwritable or odd output paths,
unreadable checkpoints, a missing optional extra, file modes under the umask, blank lines in
predicted trees, and the temporary folders a killed preprocess leaves behind."""
from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from induce.cli.main import app
from induce.errors import InputError
from induce.files import check_output_file, new_file_mode, sha256_file, write_output

from helpers import train_tiny_run

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
GOLD = [
    "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))",
    "( (S (NP-SBJ (NNS dogs)) (VP (VBP bark) (ADVP (RB loudly) (RB today)))) )",
]
PRED = ["(S the (S cat (S sat (S on (S the mat)))))", "(S dogs (S bark (S loudly today)))"]
TREES = [
    "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))",
    "(S (NP (DT A) (NN dog)) (VP (VBD barked) (ADVP (RB loudly))) (. .))",
    "(S (NP (PRP It)) (VP (VBD rained)))",
]


def clean_failure(result, code: int = 2) -> str:
    """The output of a run that must fail with a message: exit ``code``, no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


@pytest.fixture
def gold_file(tmp_path):
    path = tmp_path / "gold.mrg"
    path.write_text("\n".join(GOLD) + "\n")
    return path


@pytest.fixture
def tree_file(tmp_path):
    path = tmp_path / "train.mrg"
    path.write_text("\n".join(TREES) + "\n")
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny trained run (test-only stand-in model, one epoch): ~2 s."""
    return train_tiny_run(tmp_path_factory.mktemp("errors"))


# ------------------------------------------------------------------ item 5: a filter that keeps nothing


def test_eval_with_no_sentence_left_is_an_error_naming_the_filter(tmp_path, gold_file):
    pred = tmp_path / "pred.txt"
    pred.write_text("\n".join(PRED) + "\n")
    out = clean_failure(runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file), "--max-length", "3"]))
    assert "no sentence left to evaluate" in out and "2 gold sentences read" in out
    assert "2 longer than 3 words (--max-length 3)" in out and "undefined" in out
    out = clean_failure(runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(gold_file),
                                            "--wsj10", "--max-length", "3"]))
    assert "(--max-length 3)" in out
    # Sentences of one word are always skipped: a corpus of those has nothing to evaluate either.
    one_word = tmp_path / "one.mrg"
    one_word.write_text("(S (NP (NNS Dogs)) (. .))\n")
    out = clean_failure(runner.invoke(app, ["eval", "--baseline", "left", "--gold", str(one_word), "--json"]))
    assert "1 gold sentence read" in out and "1 shorter than 2 words" in out
    # Kept sentences: exit 0 as before.
    assert runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file), "--wsj10"]).exit_code == 0


def test_eval_with_a_checkpoint_and_no_sentence_left(gold_file, run_dir):
    out = clean_failure(runner.invoke(app, ["eval", "--checkpoint", str(run_dir), "--gold", str(gold_file),
                                            "--wsj10", "--max-length", "2"]))
    assert "no sentence left to evaluate" in out and "(--max-length 2)" in out


# ------------------------------------------------------------------ item 9: blank lines in predicted trees


def test_blank_line_in_predictions_is_named_by_line(tmp_path, gold_file):
    pred = tmp_path / "pred.txt"
    pred.write_text(PRED[0] + "\n\n" + PRED[1] + "\n")
    out = clean_failure(runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file)]))
    assert f"{pred}:2: blank line" in out
    pred.write_text(" \t\n" + PRED[0] + "\n" + PRED[1] + "\n")
    assert f"{pred}:1: blank line" in clean_failure(runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file)]))
    pred.write_text(PRED[0] + " " + PRED[1] + "\n")
    assert f"{pred}:1: two trees on one line" in clean_failure(
        runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file)]))
    # Trailing blank lines, CRLF line ends, and multi-line .mrg layout (blank lines separate trees) are fine.
    pred.write_text(PRED[0] + "\r\n" + PRED[1] + "\r\n\n\n")
    assert runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file)]).exit_code == 0
    pred.write_text("(S the\n  (S cat (S sat (S on (S the mat)))))\n\n(S dogs\n (S bark (S loudly today)))\n")
    assert runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file)]).exit_code == 0


# ------------------------------------------------------------------ item 6: tracebacks -> messages


def test_preprocess_out_dir_is_a_file(tmp_path, tree_file):
    not_a_folder = tmp_path / "corpora"
    not_a_folder.write_text("x")
    for out_dir in (not_a_folder, not_a_folder / "deeper"):
        out = clean_failure(runner.invoke(app, ["preprocess", "--out-dir", str(out_dir), "--train", str(tree_file)]))
        assert "is a file" in out or "lies under" in out
        assert "choose another --out-dir" in out


def test_preprocess_write_failure_is_a_message(tmp_path, tree_file, monkeypatch):
    import tempfile

    def refuse(*args, dir=None, **kwargs):
        raise PermissionError(13, "Permission denied", str(dir))

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    out = clean_failure(runner.invoke(app, ["preprocess", "--out-dir", str(tmp_path / "c"), "--train", str(tree_file)]))
    assert "cannot write the corpus" in out and "permission denied" in out


@pytest.mark.skipif(IS_ROOT or os.name != "posix", reason="root ignores folder permissions")
def test_preprocess_into_a_read_only_folder(tmp_path, tree_file):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        out = clean_failure(runner.invoke(app, ["preprocess", "--out-dir", str(locked), "--train", str(tree_file)]))
    finally:
        locked.chmod(0o755)
    assert "permission denied" in out


def test_parse_out_to_a_folder_fails_before_loading(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    out = clean_failure(runner.invoke(app, ["parse", str(text), "-c", str(tmp_path / "nowhere"), "-o", str(tmp_path)]))
    assert "--out: this is a folder" in out
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = clean_failure(runner.invoke(app, ["parse", str(text), "-c", str(tmp_path), "-o", str(blocker / "trees.txt")]))
    assert "is a file, not a folder" in out


@pytest.mark.skipif(IS_ROOT or os.name != "posix", reason="root ignores file permissions")
def test_parse_out_read_only_and_unreadable_checkpoint(tmp_path, run_dir):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    target = tmp_path / "trees.txt"
    target.write_text("")
    target.chmod(0o444)
    out = clean_failure(runner.invoke(app, ["parse", str(text), "-c", str(run_dir), "-o", str(target)]))
    assert "permission denied" in out
    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("best.json", "best.safetensors"):
        (copy / name).write_bytes((run_dir / name).read_bytes())
    (copy / "best.safetensors").chmod(0)
    out = clean_failure(runner.invoke(app, ["parse", str(text), "-c", str(copy)]))
    assert "best.safetensors" in out and "permission denied" in out


def test_parse_checkpoint_weights_not_a_file(tmp_path, run_dir):
    """Unreadable weights (here a folder in their place: works as root too) are a message, not a traceback."""
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    copy = tmp_path / "run"
    copy.mkdir()
    (copy / "best.json").write_bytes((run_dir / "best.json").read_bytes())
    (copy / "best.safetensors").mkdir()
    out = clean_failure(runner.invoke(app, ["parse", str(text), "-c", str(copy)]))
    assert f"{copy / 'best.safetensors'}:" in out
    with pytest.raises(InputError, match="cannot read: is a folder"):
        sha256_file(copy / "best.safetensors")


def test_parse_write_failure_after_parsing_is_a_message(tmp_path, run_dir, monkeypatch):
    import induce.files

    def disk_full(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(induce.files, "write_output", disk_full)
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    out = clean_failure(runner.invoke(app, ["parse", str(text), "-c", str(run_dir), "-o", str(tmp_path / "t.txt")]))
    assert "no space left" in out


def test_eval_per_sentence_to_a_folder(tmp_path, gold_file):
    out = clean_failure(runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(gold_file),
                                            "--per-sentence", str(tmp_path)]))
    assert "--per-sentence: this is a folder" in out


def test_diagnose_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    for command in (["diagnose", "memory", "--lengths", "4"], ["diagnose", "grad", "--model", "rellstm"]):
        out = clean_failure(runner.invoke(app, command + ["--out", str(tmp_path / "fig")]))
        assert "pip install 'induce[plots]'" in out
    assert not list(tmp_path.iterdir())


def test_check_output_file():
    check_output_file(None, "--out")
    check_output_file("-", "--out")
    with pytest.raises(InputError, match="is a folder"):
        check_output_file(Path("."), "--out")


# ------------------------------------------------------------------ item 7: modes under the umask


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_atomic_writes_and_corpora_honour_the_umask(tmp_path, tree_file, gold_file, mask):
    old = os.umask(mask)
    try:
        assert new_file_mode() == 0o666 & ~mask
        write_output(tmp_path / "REPORT.md", "# report\n")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")  # what open() gives: the reference
        result = runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(gold_file),
                                     "--per-sentence", str(tmp_path / "rows.csv")])
        assert result.exit_code == 0, result.output
        result = runner.invoke(app, ["preprocess", "--out-dir", str(tmp_path / "corpora"), "--train", str(tree_file)])
        assert result.exit_code == 0, result.output
    finally:
        os.umask(old)
    mode = lambda path: stat.S_IMODE(path.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "REPORT.md") == mode(plain) == 0o666 & ~mask
    assert mode(tmp_path / "rows.csv") == 0o666 & ~mask
    corpus = tmp_path / "corpora" / "custom"
    assert mode(corpus) == 0o777 & ~mask
    assert {mode(path) for path in corpus.iterdir()} == {0o666 & ~mask}


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_checkpoints_honour_the_umask(tmp_path, mask):
    """safetensors writes its files 0600: the trainer's checkpoints and the task checkpoints get the
    mode a plain open() gives, like every other output."""
    import torch

    from induce.diagnostics.tasks import save_checkpoint as save_task_checkpoint
    from induce.training.checkpoint import save_checkpoint

    class Tiny(torch.nn.Module):
        name, vocab_size = "tiny", 3

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.config = type("Config", (), {"model_dump": lambda self: {}})()

    old = os.umask(mask)
    try:
        paths = save_checkpoint(tmp_path / "last", {"w": torch.ones(2)}, {"model": "prpn"})
        paths += save_task_checkpoint(tmp_path / "task.safetensors", Tiny(), {})
    finally:
        os.umask(old)
    assert {stat.S_IMODE(path.stat().st_mode) for path in paths} == {0o666 & ~mask}


# ------------------------------------------------------------------ item 10: leftovers of a killed preprocess


def test_killed_preprocess_leftovers_are_removed_next_time(tmp_path, tree_file):
    out_dir = tmp_path / "corpora"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from induce.data import preprocess\n"
        "def build(folder):\n"
        "    (folder / 'train.orig.txt').write_text('partial')\n"
        "    print('building', flush=True)\n"
        "    time.sleep(120)\n"
        f"preprocess._prepare(Path({str(out_dir / 'custom')!r}), {{}}, build, False, print)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "building"
    finally:
        child.kill()  # SIGKILL: no cleanup runs in the child
        child.wait()
        child.stdout.close()
    leftovers = list(out_dir.glob(".custom.tmp-*"))
    assert len(leftovers) == 1 and (leftovers[0] / "train.orig.txt").is_file()
    # A build folder of a live process (this one) must survive.
    live = out_dir / ".other.tmp-live"
    live.mkdir()
    (live / ".induce-build-owner").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    result = runner.invoke(app, ["preprocess", "--out-dir", str(out_dir), "--train", str(tree_file)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"removed {leftovers[0]}:" in text and "interrupted preprocess run" in text
    assert not leftovers[0].exists() and live.is_dir()
    assert sorted(p.name for p in out_dir.iterdir()) == [".other.tmp-live", "custom"]
    assert not (out_dir / "custom" / ".induce-build-owner").exists()


# ------------------------------------------------------------------ other user mistakes found by probing


def test_bad_option_values_are_messages(tmp_path, tree_file, gold_file):
    out_dir = str(tmp_path / "c")
    for name in ("../escape", "a/b", "", ".hidden"):
        out = clean_failure(runner.invoke(app, ["preprocess", "--out-dir", out_dir, "--train", str(tree_file),
                                                "--name", name]))
        assert "give a plain folder name" in out
    assert not (tmp_path / "escape").exists() and not (tmp_path / "c").exists()
    out = clean_failure(runner.invoke(app, ["preprocess", "--out-dir", out_dir, "--train", str(tree_file),
                                            "--max-vocab", "2"]))
    assert "--max-vocab 2:" in out
    out = clean_failure(runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(gold_file),
                                            "--max-length", "0"]))
    assert "--max-length 0" in out
    result = runner.invoke(app, ["diagnose", "grad", "--model", "rellstm", "--n", "0", "--out", str(tmp_path / "g")])
    assert result.exit_code == 2 and "Traceback" not in result.output and not (tmp_path / "g.json").exists()


def test_markup_like_text_in_a_message_is_printed_as_is(tmp_path, gold_file):
    pred = tmp_path / "[bold]pred[x].txt"
    pred.write_text("[/x] (S a b)\n")
    out = clean_failure(runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file)]))
    assert f"{pred}:1: text outside any bracketed tree: '[/x] (S a b)'" in out


# ------------------------------------------------------------------ training on bad data, memory, a full disk


@pytest.fixture
def tiny_corpus(tmp_path, one_thread):
    from helpers import make_corpus

    return make_corpus(tmp_path / "corpora", train=40, valid=5, test=5)


def train_args(corpus, out, *overrides):
    return ["train", "--model", "tiny-lstm", "--corpus", str(corpus), "--out", str(out), "--no-progress",
            "train.epochs=1", "train.device=cpu", "train.dev_f1=false", *overrides]


def test_a_damaged_prepared_corpus_is_a_message(tmp_path, tiny_corpus):
    """vocab.json missing or not a vocabulary, train.txt cut short or edited (meta.json has its counts):
    one line naming the file and saying how to rebuild, never a traceback or a model trained on part
    of the data."""
    vocab = tiny_corpus / "vocab.json"
    good_vocab, good_text = vocab.read_text(), (tiny_corpus / "train.txt").read_text()
    cases = [
        ("vocab.json", None, "missing"), ("vocab.json", '{"itos": [', "corrupt vocab.json"),
        ("vocab.json", '{"x": 1}', "corrupt vocab.json"), ("vocab.json", '["a"]', "corrupt vocab.json"),
        ("vocab.json", '{"itos": ["a", "b"]}', "corrupt vocab.json"),
        ("vocab.json", json.dumps(dict(json.loads(good_vocab), itos=json.loads(good_vocab)["itos"] + ["extra"])),
         "meta.json says"),
        ("train.txt", good_text[: len(good_text) // 2], "cut short or changed"),
        ("train.txt", good_text.replace(" ", "  ").replace(good_text.split()[0] + " ", "", 1), "cut short or changed"),
    ]
    for name, text, says in cases:
        path = tiny_corpus / name
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
        out = clean_failure(runner.invoke(app, train_args(tiny_corpus, tmp_path / "run")))
        assert out.startswith(f"error: {path}: ") and says in out and "induce preprocess --force" in out, out
        vocab.write_text(good_vocab)
        (tiny_corpus / "train.txt").write_text(good_text)
    assert not (tmp_path / "run").exists()
    result = runner.invoke(app, train_args(tiny_corpus, tmp_path / "run"))
    assert result.exit_code == 0, result.output


def test_batch_sizes_too_large_for_the_data_say_what_fits(tmp_path, tiny_corpus):
    for key, split in (("data.batch_size", "train"), ("data.eval_batch_size", "valid")):
        out = clean_failure(runner.invoke(app, train_args(tiny_corpus, tmp_path / "run", f"{key}=100000")))
        largest = int(out.split(f"; {key}=")[1].split()[0])
        assert f"{key}=100000: the {split} split has" in out and f"{key}={largest} at most fits" in out
        assert runner.invoke(app, train_args(tiny_corpus, tmp_path / key, f"{key}={largest}")).exit_code == 0
        assert runner.invoke(app, train_args(tiny_corpus, tmp_path / "run", f"{key}={largest + 1}")).exit_code == 2


def test_a_model_too_large_for_the_memory_says_what_fits(tmp_path, tiny_corpus, monkeypatch):
    """Checked before the model is built (on PyTorch's meta device): a model larger than the memory
    used to be allocated and killed by the kernel without a message."""
    from induce.config import load_config
    from induce.models.registry import get_model_class
    from induce.training import fits

    monkeypatch.setattr(fits, "available_bytes", lambda device: 4 * 1024**2)  # 4 MiB free
    out = clean_failure(runner.invoke(app, train_args(tiny_corpus, tmp_path / "run", "model.emb_size=4000")))
    assert "tiny-lstm with model.emb_size=4000, model.hidden_size=12 has" in out and "more than the 4 MiB" in out
    emb = int(out.split("model.emb_size=")[2].split()[0])
    hidden = int(out.split("model.hidden_size=")[2].split()[0])
    vocab = len(json.loads((tiny_corpus / "vocab.json").read_text())["itos"])
    for key, value in (("emb_size", emb), ("hidden_size", hidden)):  # the size named fits, one more does not
        config = load_config("tiny-lstm", overrides=["model.emb_size=4000", f"model.{key}={value}"])
        needed = fits.check_parameters_fit(get_model_class("tiny-lstm"), vocab, config, torch.device("cpu"))
        assert needed <= 4 * 1024**2
        config = load_config("tiny-lstm", overrides=["model.emb_size=4000", f"model.{key}={value + 1}"])
        with pytest.raises(fits.DoesNotFit):
            fits.check_parameters_fit(get_model_class("tiny-lstm"), vocab, config, torch.device("cpu"))
    assert not (tmp_path / "run").exists()


def test_a_batch_too_large_for_the_memory_says_what_fits(tmp_path, monkeypatch, one_thread):
    """The activations a step keeps for its backward pass (measured on two small steps before training)
    must fit beside the model: free memory here is what 10 rows of 22-token segments need."""
    from induce.config import load_config
    from induce.training import fits
    from induce.training.lm import LMLoss

    from helpers import TinyLSTM, make_corpus

    corpus = make_corpus(tmp_path / "corpora", train=400, valid=5, test=5)  # rows of >= 22 tokens up to 150 rows
    vocab = len(json.loads((corpus / "vocab.json").read_text())["itos"])
    model = TinyLSTM(vocab)
    memory = fits.measure_step_memory(LMLoss(model, 2.0, 1.0), model, torch.device("cpu"), 22)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    copies = fits.state_copies(load_config("tiny-lstm"))
    free = int(weights * (copies - 1) + memory.bytes(10, 22)) + 1
    monkeypatch.setattr(fits, "available_bytes", lambda device: free)
    args = ("data.bptt=20", "data.max_bptt_extra=2")  # segments of up to 22 tokens
    out = clean_failure(runner.invoke(app, train_args(corpus, tmp_path / "run", "data.batch_size=100", *args)))
    assert "data.batch_size=100: a training step on 100 rows of segments of up to 22 tokens keeps about" in out
    assert "; data.batch_size=10 fits" in out, out
    assert runner.invoke(app, train_args(corpus, tmp_path / "ok", "data.batch_size=10", *args)).exit_code == 0
    out = clean_failure(runner.invoke(app, train_args(corpus, tmp_path / "run", "data.batch_size=11", *args)))
    assert "a training step on 11 rows" in out and not (tmp_path / "run").exists()


def test_the_memory_probe_runs_a_training_step_and_leaves_the_random_streams_alone(tmp_path, one_thread):
    """The probe's two small steps run in training mode (cuDNN's LSTM refuses a backward pass through an
    eval-mode forward: PaLM on a GPU), draw their dropout masks like a real step, and leave the random
    generator where it was and the model's mode as it was."""
    from induce.training import fits
    from induce.training.lm import LMLoss

    from helpers import TinyLSTM

    model = TinyLSTM(30)
    modes = []
    model.lstm.register_forward_pre_hook(lambda module, args: modes.append(module.training))

    def draw(module, args, out):  # a random draw, as a dropout mask is
        torch.rand(3)

    model.lstm.register_forward_hook(draw)
    for mode in (False, True):
        model.train(mode)
        before = torch.get_rng_state()
        memory = fits.measure_step_memory(LMLoss(model, 2.0, 1.0), model, torch.device("cpu"), 12)
        assert torch.equal(torch.get_rng_state(), before) and model.training is mode
        assert memory.per_row > 0 and all(p.grad is None for p in model.parameters())
    assert modes == [True] * 4


def test_the_memory_probe_leaves_a_batchnorm_s_running_statistics_alone():
    """PRPN's BatchNorm layers update their running statistics in a training-mode forward: the probe puts them
    back (else every LM run with a BatchNorm started from statistics the probe's zero batch had moved)."""
    from induce.models.prpn.model import PRPN, PRPNConfig
    from induce.training import fits
    from induce.training.objectives import LMLoss

    torch.manual_seed(0)
    model = PRPN(30, PRPNConfig(emb_size=8, hidden_size=8, n_slots=3, n_lookback=2))
    before = {name: buffer.clone() for name, buffer in model.named_buffers()}
    assert any("running_mean" in name for name in before)
    fits.measure_step_memory(LMLoss(model, 0.0, 0.0), model, torch.device("cpu"), 6)
    after = dict(model.named_buffers())
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_a_full_disk_during_training_fails_the_run_and_keeps_the_last_checkpoint(tmp_path, tiny_corpus, monkeypatch):
    """ENOSPC while epoch 2's checkpoint is written (the file half-written): exit 2 with one line, the
    run marked failed, epoch 1's checkpoint whole (it loads), and --resume finishes the run."""
    import errno

    from induce.training import checkpoint
    from induce.training.run_folder import read_status

    real_save, writes = checkpoint.save_file, []

    def disk_fills_up(tensors, filename):
        writes.append(Path(filename).name)
        if len(writes) == 3:  # best and last of epoch 1 are written; then epoch 2's best
            Path(filename).write_bytes(b"half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device", filename)
        return real_save(tensors, filename)

    monkeypatch.setattr(checkpoint, "save_file", disk_fills_up)
    run = tmp_path / "run"
    out = clean_failure(runner.invoke(app, train_args(tiny_corpus, run, "train.epochs=3")))
    assert f"{run / 'best.safetensors'}: no space left on the device" in out and "marked failed" in out
    assert f"induce train --resume {run}" in out and "free some space" in out
    assert read_status(run)["state"] == "failed"
    assert not [p for p in run.iterdir() if p.name.startswith(".")]  # no temporary file left
    tensors, meta = checkpoint.load_checkpoint(run / "last")  # hash-checked: whole
    assert meta["trainer"]["epoch"] == 2 and tensors
    monkeypatch.setattr(checkpoint, "save_file", real_save)
    result = runner.invoke(app, ["train", "--resume", str(run), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert read_status(run)["state"] == "finished"
    assert [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_option_values_that_used_to_end_in_a_traceback_or_silently(tmp_path, run_dir, gold_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    # show attention -o: not an image name, under a file, and an image writer that fails (a read-only place)
    out = clean_failure(runner.invoke(app, ["show", "attention", "a b", "-c", str(run_dir), "-o", "fig.txt"]))
    assert "fig.txt: --out: '.txt' is not an image format; give a name ending in .png" in out
    out = clean_failure(runner.invoke(app, ["show", "attention", "a b", "-c", str(run_dir),
                                            "-o", str(a_file / "f.png")]))
    assert f"{a_file} is a file, not a folder" in out
    import induce.report.figures

    def read_only(fig, path, dpi=100):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(induce.report.figures, "save_figure", read_only)
    out = clean_failure(runner.invoke(app, ["show", "attention", "a b", "-c", str(run_dir), "-o", "f.png"]))
    assert out == "error: f.png: permission denied"
    # generate -t nan / inf
    for value, says in (("nan", "not a number"), ("inf", "must be positive and finite")):
        out = clean_failure(runner.invoke(app, ["generate", "-c", str(run_dir), "-t", value]))
        assert f"--temperature {value}: {says}" in out
    # reproduce --models nosuch, --out under a file or not writable (root ignores modes: os.access stands in)
    out = clean_failure(runner.invoke(app, ["reproduce", "--profile", "toy", "--models", "prpn,nosuch"]))
    assert out.startswith("error: --models prpn,nosuch: unknown model 'nosuch'")
    out = clean_failure(runner.invoke(app, ["reproduce", "--profile", "toy", "--out", str(a_file / "results")]))
    assert "(choose another --out)" in out
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    out = clean_failure(runner.invoke(app, ["reproduce", "--profile", "toy", "--out", "results"]))
    assert out == f"error: cannot create folders in {tmp_path}: permission denied (choose another --out)"
    monkeypatch.undo()
    assert not (tmp_path / "results").exists()
    # eval --wsj10 --wsj40 silently used the smaller limit
    out = clean_failure(runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(gold_file),
                                            "--wsj10", "--wsj40"]))
    assert "--wsj10 and --wsj40 together: choose one" in out
