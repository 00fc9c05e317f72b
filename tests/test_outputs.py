"""Every output a command writes goes through one writer (:func:`induce.files.write_output`), which never swaps
what stands at the path: a character device or a FIFO is written through and stays what it is, a symbolic link
stays a link and its target gets the content, a hard-linked file is written in place (every name sees it), a
block device or a socket is refused; and a path whose folders do not exist yet (``nosuch/../x.txt``) is resolved
before the same-file check against the inputs.

Devices are made with ``os.mknod`` in a temporary folder (the null device's numbers: whatever is written is
discarded), never at a real /dev path; those cases are skipped where mknod is not permitted."""
from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from induce.cli.main import app

from helpers import train_tiny_run

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")

GOLD = "(S (NP (DT a) (NN b)) (VP (VBD c) (RB d)))\n"
PREDICTED = {"A": "(S (S a b) (S c d))\n", "B": "(S (S (S a b) c) d)\n", "C": "(S a (S b (S c d)))\n"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("outputs"))


def _mknod(path: Path, kind: int, device: tuple[int, int]) -> None:
    try:
        os.mknod(path, kind | 0o666, os.makedev(*device))
    except (PermissionError, OSError) as err:
        pytest.skip(f"cannot make a device node here: {err}")


class Standing:
    """Something made at an output path before a command writes there, and the check afterwards that it is
    still what it was (and, where it can be read, that the output reached it)."""

    def __init__(self, kind: str, path: Path):
        self.kind, self.path, self.received = kind, path, []
        if kind == "device":
            _mknod(path, stat.S_IFCHR, (1, 3))  # the null device's numbers
            self.rdev = os.lstat(path).st_rdev
        elif kind == "fifo":
            os.mkfifo(path)
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
        elif kind == "symlink":
            self.target = path.parent / "target-of-link"
            self.target.write_text("old\n")
            path.symlink_to(self.target.name)
        elif kind == "hardlink":
            self.other = path.parent / "other-name"
            self.other.write_text("old\n")
            os.link(self.other, path)

    def _read(self):
        with open(self.path, "rb") as handle:  # blocks until the writer opens it
            self.received.append(handle.read())

    def written(self) -> bytes:
        """Check that the path is still what was made there; the bytes that reached it (b"" for the device)."""
        info = os.lstat(self.path)
        if self.kind == "device":
            assert stat.S_ISCHR(info.st_mode) and info.st_rdev == self.rdev, "the device node was replaced"
            return b""
        if self.kind == "fifo":
            assert stat.S_ISFIFO(info.st_mode), "the FIFO was replaced"
            self.reader.join(timeout=30)
            assert self.received, "nothing was written into the FIFO"
            return self.received[0]
        if self.kind == "symlink":
            assert stat.S_ISLNK(info.st_mode) and os.readlink(self.path) == self.target.name, "the link was replaced"
            return self.target.read_bytes()
        assert info.st_ino == os.stat(self.other).st_ino, "the hard link was broken"
        return self.other.read_bytes()


KINDS = ["device", "fifo", "symlink", "hardlink"]


@pytest.fixture
def files(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text(GOLD)
    predicted = {}
    for name, tree in PREDICTED.items():
        predicted[name] = tmp_path / f"{name}.txt"
        predicted[name].write_text(tree)
    return gold, predicted


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("kind", KINDS)
def test_parse_out(run, tmp_path, kind):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\na dog ran\n")
    standing = Standing(kind, tmp_path / "out")
    _ok(runner.invoke(app, ["parse", str(text), "-o", str(standing.path), "-c", str(run), "--device", "cpu"]))
    written = standing.written()
    assert kind == "device" or (written.count(b"\n") == 2 and written.startswith(b"("))


@pytest.mark.parametrize("kind", KINDS)
def test_ensemble_out(files, tmp_path, kind):
    gold, predicted = files
    standing = Standing(kind, tmp_path / "out")
    _ok(runner.invoke(app, ["ensemble", *map(str, predicted.values()), "--gold", str(gold), "-o", str(standing.path)]))
    written = standing.written()
    assert kind == "device" or written == PREDICTED["A"].encode()


@pytest.mark.parametrize("kind", KINDS)
def test_eval_per_sentence(files, tmp_path, kind):
    gold, predicted = files
    standing = Standing(kind, tmp_path / "rows.csv")
    _ok(runner.invoke(app, ["eval", str(predicted["B"]), "--gold", str(gold), "--per-sentence", str(standing.path)]))
    written = standing.written()
    assert kind == "device" or written.startswith(b"index,length,f1")


@pytest.mark.parametrize("kind", KINDS)
def test_show_attention_out(run, tmp_path, kind):
    pytest.importorskip("matplotlib")
    standing = Standing(kind, tmp_path / "figure.png")
    _ok(runner.invoke(app, ["show", "attention", "the cat sat", "-c", str(run), "--device", "cpu",
                            "-o", str(standing.path)]))
    written = standing.written()
    assert kind == "device" or written.startswith(b"\x89PNG")


@pytest.mark.parametrize("kind", KINDS)
def test_report_and_results_files(tmp_path, kind):
    from induce.report.markdown import write_results

    results = json.loads((Path(__file__).parent / "data" / "report" / "results.json").read_text())
    out = tmp_path / "report"
    out.mkdir()
    standing = Standing(kind, out / "REPORT.md")
    write_results(results, out)
    written = standing.written()
    assert kind == "device" or written.startswith(b"# ")
    assert json.loads((out / "results.json").read_text())["profile"] == results["profile"]


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_runs_config(tmp_path, kind):
    from induce.config import load_config, load_config_file, save_config

    from helpers import STANDIN

    config = load_config(STANDIN, overrides=["train.seed=7"])
    standing = Standing(kind, tmp_path / "config.yaml")
    save_config(config, standing.path)
    assert b"seed: 7" in standing.written()
    assert load_config_file(standing.path) == config


def test_the_writer_keeps_modes_and_writes_atomically(tmp_path):
    from induce.files import new_file_mode, output_target, write_output

    new = tmp_path / "sub" / "new.txt"
    write_output(new, "a\n")  # folders made, the mode open() would give
    assert new.read_text() == "a\n" and stat.S_IMODE(new.stat().st_mode) == new_file_mode()
    private = tmp_path / "private.txt"
    private.write_text("secret\n")
    private.chmod(0o600)
    before = private.stat().st_ino
    write_output(private, b"still secret\n")
    # replaced (a new inode: readers never see half a file), keeping its own permission bits
    assert private.stat().st_ino != before and stat.S_IMODE(private.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left
    assert output_target(private).kind == "file" and output_target(tmp_path / "none").kind == "new"


def test_what_cannot_take_an_output_is_refused(run, files, tmp_path):
    """A block device (a disk) and a socket: refused before any work, left as they are."""
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    sock_path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    try:
        result = runner.invoke(app, ["parse", str(text), "-o", str(sock_path), "-c", str(run), "--device", "cpu"])
        assert result.exit_code == 2 and "socket" in result.output and "Traceback" not in result.output
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    finally:
        server.close()
    disk = tmp_path / "disk"
    _mknod(disk, stat.S_IFBLK, (7, 0))  # a loop device's numbers; never opened
    result = runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(files[0]), "--per-sentence", str(disk)])
    assert result.exit_code == 2 and "block device" in result.output, result.output
    assert stat.S_ISBLK(os.lstat(disk).st_mode)


def test_writing_to_dev_stdout_writes_into_the_descriptor(tmp_path):
    """``/dev/stdout`` is a link into /proc: written through (appended), never resolved to a path and replaced."""
    import subprocess
    import sys

    from helpers import child_env

    out = tmp_path / "captured.txt"
    with open(out, "w") as handle:
        handle.write("before\n")
        handle.flush()
        code = "from induce.files import write_output; write_output('/dev/stdout', 'written\\n')"
        subprocess.run([sys.executable, "-c", code], stdout=handle, env=child_env(), check=True, timeout=120)
    assert out.read_text() == "before\nwritten\n"


@pytest.mark.parametrize("command", ["parse", "ensemble", "eval"])
def test_a_path_through_a_missing_folder_is_resolved_before_the_input_check(run, files, tmp_path, monkeypatch,
                                                                            command):
    """``nosuch/../INPUT`` is INPUT (the folder would be made, then left): refused, the input unchanged."""
    gold, predicted = files
    monkeypatch.chdir(tmp_path)
    text = Path("in.txt")
    text.write_text("the cat sat\n")
    target = {"parse": text, "ensemble": Path(predicted["A"].name), "eval": Path(gold.name)}[command]
    before = target.read_bytes()
    out = str(Path("nosuch") / ".." / target)
    args = {"parse": ["parse", str(text), "-c", str(run), "--device", "cpu", "-o", out],
            "ensemble": ["ensemble", *map(str, predicted.values()), "--gold", str(gold), "-o", out],
            "eval": ["eval", str(predicted["B"]), "--gold", str(gold), "--per-sentence", out]}[command]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "same file as" in result.output and "Traceback" not in result.output
    assert target.read_bytes() == before and not Path("nosuch").exists()


def test_dotdot_after_a_link_is_taken_from_the_links_target(tmp_path):
    """``link/../x.txt`` is ``x.txt`` beside the folder the link points to, as the system resolves it."""
    from induce.errors import InputError
    from induce.files import check_not_input, output_target, write_output

    (tmp_path / "far" / "deep").mkdir(parents=True)
    (tmp_path / "near").mkdir()
    (tmp_path / "near" / "link").symlink_to(tmp_path / "far" / "deep")
    path = tmp_path / "near" / "link" / ".." / "x.txt"
    assert output_target(path).path == tmp_path / "far" / "x.txt"
    write_output(path, "x\n")
    assert (tmp_path / "far" / "x.txt").read_text() == "x\n" and not (tmp_path / "near" / "x.txt").exists()
    with pytest.raises(InputError, match="same file as the input"):
        check_not_input(path, {"the input": tmp_path / "far" / "x.txt"}, "--out")
    # and through a missing folder after the link
    with pytest.raises(InputError, match="same file as the input"):
        check_not_input(tmp_path / "near" / "link" / "nosuch" / ".." / ".." / "x.txt",
                        {"the input": tmp_path / "far" / "x.txt"}, "--out")


def test_a_set_of_outputs_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """:func:`induce.files.output_set`: every file in place with the modes the writer gives (a new file the
    umask's, a replaced one its own bits), or after a failure (in the block, or in a rename) the old files as
    they were, and no new or temporary file or folder left."""
    from induce.files import new_file_mode, output_set

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.md").write_text("old a\n")
    (out / "a.md").chmod(0o600)
    with output_set() as outputs:
        outputs.write(out / "a.md", "new a\n")
        outputs.path(out / "b.png").write_bytes(b"new b")  # any writer, into the path it is given
        assert outputs.path(out / "b.png").suffix == ".png"  # a figure's format is read from its name
        assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["a.md"]  # nothing yet
    assert (out / "a.md").read_text() == "new a\n" and (out / "b.png").read_bytes() == b"new b"
    assert stat.S_IMODE((out / "a.md").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "b.png").stat().st_mode) == new_file_mode()
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    with pytest.raises(OSError), output_set() as outputs:
        outputs.write(out / "a.md", "newer a\n")
        outputs.write(tmp_path / "made" / "deep" / "c.json", "{}\n")
        raise OSError(28, "No space left on device")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and not (tmp_path / "made").exists()

    real_replace = os.replace
    renamed = []

    def refuse_the_second(src, dst):
        if str(src).endswith(".tmp.png") and renamed:
            raise PermissionError(13, "Permission denied", str(dst))
        real_replace(src, dst)
        renamed.append(dst)

    monkeypatch.setattr(os, "replace", refuse_the_second)
    with pytest.raises(PermissionError), output_set() as outputs:
        outputs.write(out / "a.md", "newer a\n")  # renamed first, then put back
        outputs.write(out / "b.png", b"newer b")
        outputs.write(out / "d.txt", "new d\n")
    monkeypatch.setattr(os, "replace", real_replace)
    assert renamed and {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_reports_files_are_written_both_or_neither(tmp_path, monkeypatch):
    """results.json and REPORT.md are one result: a failure writing REPORT.md (a full disk) leaves the old
    results.json too, and no temporary file."""
    from induce import files
    from induce.report.markdown import write_results

    from helpers import full_disk

    results = json.loads((Path(__file__).parent / "data" / "report" / "results.json").read_text())
    out = tmp_path / "report"
    write_results(results, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == ["REPORT.md", "results.json"]
    opened = []
    real = files._text_or_binary
    full_disk(monkeypatch)
    failing = files._text_or_binary

    def second_fails(fd, binary):  # results.json is written, then REPORT.md meets the full disk
        opened.append(fd)
        return real(fd, binary) if len(opened) == 1 else failing(fd, binary)

    monkeypatch.setattr("induce.files._text_or_binary", second_fails)
    with pytest.raises(OSError):
        write_results(dict(results, seeds=[*results["seeds"], 99]), out)
    assert len(opened) == 2 and {p.name: p.read_bytes() for p in out.iterdir()} == before
