"""bench/originals/prepare.py: the patched copies of the original implementations are our own edits applied to
a checkout, exactly where expected (a different version of the code is refused, not half-patched), with the
provenance of every file; missing files are named. Fake checkouts stand in for the repositories here."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from helpers import script_module

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def prepare():
    with script_module(REPO / "bench" / "originals" / "prepare.py", "originals_prepare") as module:
        yield module


def fake_checkout(prepare, name: str, folder: Path, skip: tuple = ()) -> Path:
    """A folder with every file the original's step needs: placeholder text, plus each patch's expected text."""
    original = prepare.ORIGINALS[name]
    folder.mkdir(parents=True)
    for file_name in original.files:
        if file_name not in skip:
            expected = "".join(f"{p.old}\n" for p in original.patches if p.file == file_name)
            (folder / file_name).parent.mkdir(parents=True, exist_ok=True)
            (folder / file_name).write_text(f"# {file_name}\n{expected}# end\n")
    return folder


@pytest.fixture
def pinned_to_fakes(prepare, monkeypatch):
    """The originals' pins set to the sha256 of :func:`fake_checkout`'s files (the real ones pin the tested commit)."""
    for name, original in prepare.ORIGINALS.items():
        fake = {}
        for file_name in original.pinned:
            expected = "".join(f"{p.old}\n" for p in original.patches if p.file == file_name)
            fake[file_name] = prepare.sha256(f"# {file_name}\n{expected}# end\n".encode())
        monkeypatch.setitem(prepare.ORIGINALS, name, dataclasses.replace(original, pinned=fake))


def test_patches_applied_and_recorded(prepare, tmp_path, pinned_to_fakes):
    out = tmp_path / "out"
    for name in prepare.ORIGINALS:
        assert prepare.main([f"--{name}", str(fake_checkout(prepare, name, tmp_path / name)), "--out", str(out)]) == 0
        record = json.loads((out / name / "PROVENANCE.json").read_text())
        assert [f["file"] for f in record["files"]] == list(prepare.ORIGINALS[name].files)
        ours = REPO / "bench" / "originals"
        assert (out / name / "bench_entry.py").read_text() == (ours / name / "bench_entry.py").read_text()
        assert (out / name / "entry_common.py").read_text() == (ours / "entry_common.py").read_text()
        for patch in prepare.ORIGINALS[name].patches:
            text = (out / name / patch.file).read_text()
            assert patch.new in text
        patched = {f["file"] for f in record["files"] if f["patched"]}
        assert patched == {p.file for p in prepare.ORIGINALS[name].patches}
        assert record["checkout_commit"] is None and len(record["files"][0]["sha256"]) == 64
    assert "dtype=torch.bool" in (out / "onlstm" / "ON_LSTM.py").read_text()
    assert "nn.Module.__init__(self)" in (out / "prpn" / "LSTMCell.py").read_text()
    assert "torch.zeros(batch_size, 1, device=x.device)" in (out / "compound-pcfg" / "models.py").read_text()
    assert (out / "tn-pcfg" / "parser" / "pcfgs" / "tdpcfg.py").is_file()  # the package's folders are kept


def test_a_pinned_file_of_another_version_is_refused(prepare, tmp_path, capsys):
    """TN-PCFG needs no patch, so only the pins tell its tested version from another: a checkout whose
    pinned module differs (here: every file is a placeholder) is refused, and nothing is written."""
    checkout = fake_checkout(prepare, "tn-pcfg", tmp_path / "tn-pcfg")
    out = tmp_path / "out"
    assert prepare.main(["--tn-pcfg", str(checkout), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "parser/model/C_PCFG.py: sha256" in err and "not the version" in err
    assert list(out.iterdir()) == []


def test_the_pins_are_those_of_the_tested_files(prepare):
    """Every pinned file is one the original's step imports, and each pin is a sha256."""
    for original in prepare.ORIGINALS.values():
        assert set(original.pinned) <= set(original.files)
        assert all(len(pin) == 64 and int(pin, 16) >= 0 for pin in original.pinned.values())


def test_unexpected_version_is_refused_and_leaves_nothing(prepare, tmp_path, capsys):
    checkout = fake_checkout(prepare, "onlstm", tmp_path / "onlstm")
    (checkout / "ON_LSTM.py").write_text("mask = weight.new_empty(size, dtype=torch.bool)\n")  # already changed
    out = tmp_path / "out"
    assert prepare.main(["--onlstm", str(checkout), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ON_LSTM.py: expected 1 occurrence(s) of 'dtype=torch.uint8'" in err and "found 0" in err
    assert list(out.iterdir()) == []


def test_awd_helpers_come_from_awd_only_when_missing(prepare, tmp_path, capsys):
    checkout = fake_checkout(prepare, "onlstm", tmp_path / "onlstm", skip=("splitcross.py",))
    out = tmp_path / "out"
    assert prepare.main(["--onlstm", str(checkout), "--out", str(out)]) == 2
    assert "splitcross.py is missing (an AWD-LSTM helper: give --awd CHECKOUT" in capsys.readouterr().err
    awd = tmp_path / "awd"
    awd.mkdir()
    (awd / "splitcross.py").write_text("# the AWD-LSTM copy\n")
    (awd / "locked_dropout.py").write_text("# not used: the checkout has its own\n")
    assert prepare.main(["--onlstm", str(checkout), "--awd", str(awd), "--out", str(out)]) == 0
    sources = {f["file"]: f["from"] for f in json.loads((out / "onlstm" / "PROVENANCE.json").read_text())["files"]}
    assert sources["splitcross.py"] == "awd" and sources["locked_dropout.py"] == "onlstm"
    assert (out / "onlstm" / "splitcross.py").read_text() == "# the AWD-LSTM copy\n"
