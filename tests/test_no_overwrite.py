"""No command writes its output over one of its inputs: `parse -o`, `eval --per-sentence`, `show attention -o`,
`preprocess` (an input inside the corpus folder it replaces), `reproduce --out` (the output inside a prepared
corpus, or the same folder as an input). The same file under any path counts: relative, `..`, symbolic and
hard links. Each refusal comes before anything is read, with exit status 2, and leaves the input unchanged."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from induce.cli.main import app
from induce.errors import InputError
from induce.files import check_not_input, same_file

from helpers import make_corpus, train_tiny_run

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("no-overwrite")
    return root, train_tiny_run(root)


def _aliases(path: Path, tmp_path: Path) -> dict:
    """Other names of the same file: relative with `..`, a symbolic link, a hard link."""
    symlink, hardlink = tmp_path / "sym.txt", tmp_path / "hard.txt"
    symlink.symlink_to(path)
    os.link(path, hardlink)
    dotted = path.parent / ".." / path.parent.name / path.name
    return {"same": path, "dotted": dotted, "symlink": symlink, "hardlink": hardlink}


def test_same_file_sees_through_paths_and_links(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("a\n")
    for name, alias in _aliases(text, tmp_path).items():
        assert same_file(alias, text), name
        with pytest.raises(InputError, match="same file as the input"):
            check_not_input(alias, {"the input": text}, "--out")
    other = tmp_path / "other.txt"
    other.write_text("a\n")  # same content, another file: fine
    check_not_input(other, {"the input": text}, "--out")
    check_not_input(tmp_path / "new.txt", {"the input": text}, "--out")  # not there yet: fine
    check_not_input("-", {"the input": text}, "--out")
    # a folder replaced as a whole must not hold an input; an output must not lie in a folder that is
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "train.mrg").write_text("(S a)\n")
    with pytest.raises(InputError, match="holds the input"):
        check_not_input(folder, {"the input": [folder / "sub" / "train.mrg"]}, "--out-dir", holding=True)
    with pytest.raises(InputError, match="inside"):
        check_not_input(folder / "results", {"the corpus": folder}, "--out", within=True)
    check_not_input(tmp_path / "results", {"the corpus": folder}, "--out", within=True)


@pytest.mark.parametrize("alias", ["same", "dotted", "symlink", "hardlink"])
def test_parse_refuses_to_write_over_its_input(tiny, tmp_path, alias):
    _, run = tiny
    text = tmp_path / "same.txt"
    text.write_text("The cat sat .\n")
    out = _aliases(text, tmp_path)[alias]
    result = runner.invoke(app, ["parse", str(text), "-o", str(out), "--checkpoint", str(run), "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert "same file as the input text" in result.output and "Traceback" not in result.output
    assert text.read_text() == "The cat sat .\n"  # untouched
    # ... or over the run's own checkpoint
    result = runner.invoke(app, ["parse", str(text), "-o", str(run / "best.safetensors"), "--checkpoint", str(run)])
    assert result.exit_code == 2 and "a file of the run" in result.output
    result = runner.invoke(app, ["parse", str(text), "-o", str(tmp_path / "trees.txt"), "--checkpoint", str(run),
                                 "--device", "cpu"])
    assert result.exit_code == 0, result.output


def test_eval_and_show_outputs_are_not_their_inputs(tiny, tmp_path):
    root, run = tiny
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (DT the) (NN cat)) (VP (VBD sat)))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("(S (S the cat) sat)\n")
    before = gold.read_bytes()
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(gold), "--per-sentence", str(gold)])
    assert result.exit_code == 2 and "--per-sentence" in result.output and "same file as --gold" in result.output
    assert gold.read_bytes() == before
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(gold), "--per-sentence", str(pred)])
    assert result.exit_code == 2 and "the predicted trees" in result.output
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--gold", str(gold), "--device", "cpu",
                                 "--per-sentence", str(run / "best.json")])
    assert result.exit_code == 2 and "the run's checkpoint" in result.output
    weights = (run / "best.safetensors").read_bytes()
    result = runner.invoke(app, ["show", "attention", "the cat sat", "--checkpoint", str(run), "--device", "cpu",
                                 "-o", str(run / "best.safetensors")])
    assert result.exit_code == 2 and "a file of the run" in result.output
    assert (run / "best.safetensors").read_bytes() == weights


def test_preprocess_refuses_an_output_folder_holding_its_input(tmp_path):
    corpus = make_corpus(tmp_path / "corpora", train=6, valid=2, test=2)
    source = corpus / "train.gold.txt"  # a tree file that lives inside the folder a rebuild would replace
    before = source.read_bytes()
    result = runner.invoke(app, ["preprocess", "--train", str(source), "--out-dir", str(tmp_path / "corpora"),
                                 "--name", "tiny", "--force"])
    assert result.exit_code == 2, result.output
    assert "holds the input" in result.output and "Traceback" not in result.output
    assert source.read_bytes() == before and (corpus / "meta.json").is_file()
    result = runner.invoke(app, ["preprocess", "--train", str(source), "--out-dir", str(tmp_path / "corpora"),
                                 "--name", "elsewhere"])
    assert result.exit_code == 0, result.output


def test_reproduce_out_is_not_an_input_or_inside_a_corpus(tmp_path):
    corpus = make_corpus(tmp_path / "corpora", train=6, valid=2, test=2)
    for out, expected in ((corpus, "same folder as --corpus"), (corpus / "results", "inside the prepared corpus")):
        result = runner.invoke(app, ["reproduce", "--profile", "toy", "--corpus", str(corpus), "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert expected in result.output
    assert not (corpus / "results").exists() and not (corpus / "runs").exists()
    # the default corpora folder's prepared corpora count too (a rebuild would take the results with it)
    result = runner.invoke(app, ["reproduce", "--profile", "toy", "--corpora-dir", str(tmp_path / "corpora"),
                                 "--out", str(corpus / "out")])
    assert result.exit_code == 2 and "inside the prepared corpus" in result.output
