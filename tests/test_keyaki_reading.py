"""Damaged and foreign tree files are refused, naming the file and the line: a Keyaki Treebank ``.psd`` file cut
mid-tree or with a stray bracket, Penn Treebank trees given as Keyaki's (``--treebank ktb``) and the reverse, for
``induce preprocess`` and for the gold file of ``induce eval``; the Penn Treebank readers likewise.

The Keyaki trees here are written by hand in the treebank's layout (CorpusSearch: a tree over several lines, an
``(ID ...)`` node last, a blank line after each tree; a file ends with ``)\\n``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from induce.cli.main import app
from induce.data import keyaki
from induce.errors import InputError
from induce.trees.treebanks import KTB, PTB

KEYAKI_TREES = [
    """( (IP-MAT (NP-SBJ (PRO 私))
          (PP (NP (N 猫))
              (P が))
          (ADJN 好き)
          (AX だ)
          (PU 。))
  (ID {n}_handmade;JP))""",
    """( (IP-MAT (NP-SBJ *pro*)
          (NP-OB1 (N 本)
                  (P を))
          (VB 読ん)
          (AXD だ)
          (PU 。))
  (ID {n}_handmade;JP))""",
    """( (FRAG (NP (NPR 東京)))
  (ID {n}_handmade;JP))""",
    """( (IP-MAT (PP (NP (N 雨))
              (P が))
          (VB 降っ)
          (P て)
          (VB2 いる)
          (PU 。))
  (ID {n}_handmade;JP))""",
    """( (IP-MAT (NP-SBJ (PRO 彼))
          (PP (NP (N 駅))
              (P に))
          (ADV すぐ)
          (VB 着い)
          (AXD た)
          (PU 。))
  (ID {n}_handmade;JP))""",
    """( (IP-MAT (NP-SBJ *speaker*)
          (NP-OB1 (N 水))
          (VB 飲み)
          (MD たい)
          (PU 。))
  (ID {n}_handmade;JP))""",
]

PTB_MRG = """( (S
    (NP-SBJ (DT The) (NN dog) )
    (VP (VBZ barks)
      (PP (IN at)
        (NP (DT the) (NN mailman) )))
    (. .) ))
( (S
    (NP-SBJ (PRP She) )
    (VP (VBD read)
      (NP (DT a) (JJ long) (NN book) ))
    (. .) ))
( (S
    (NP-SBJ (NNS Prices) )
    (VP (VBD rose)
      (NP-EXT (CD 3) (NN %) ))
    (. .) ))
"""


def keyaki_text(first: int = 1) -> str:
    """A file of the six trees, numbered from ``first``, laid out as the released files are."""
    return "\n" + "\n\n".join(tree.format(n=first + k) for k, tree in enumerate(KEYAKI_TREES)) + "\n"


def keyaki_folder(tmp_path: Path, files: int = 3) -> Path:
    folder = tmp_path / "ktb" / "treebank"
    folder.mkdir(parents=True)
    for k in range(files):
        (folder / f"part_{k}.psd").write_text(keyaki_text(1 + 6 * k), encoding="utf-8")
    return tmp_path / "ktb"


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def preprocess_ktb(folder: Path, out: Path):
    return CliRunner().invoke(app, ["preprocess", "--treebank", "ktb", "--data", str(folder), "--out-dir", str(out),
                                    "--name", "k"])


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    return " ".join(" ".join(lines).split())


def test_the_hand_written_keyaki_folder_prepares(tmp_path):
    result = preprocess_ktb(keyaki_folder(tmp_path), tmp_path / "corpora")
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "corpora" / "k" / "meta.json").read_text(encoding="utf-8"))["source"]["split"]
    assert record["files"] == 3 and record["trees_read"] == 15 and record["last_trees_left_out"] == 3


def test_a_keyaki_file_cut_mid_tree_is_refused_naming_the_line_where_the_cut_tree_starts(tmp_path):
    folder = keyaki_folder(tmp_path)
    path = folder / "treebank" / "part_1.psd"
    text = path.read_text(encoding="utf-8")
    cut = text[: int(0.6 * len(text))]
    assert not cut.rstrip().endswith("JP))")  # mid-tree
    path.write_text(cut, encoding="utf-8")
    unfinished = max(k for k, line in enumerate(cut.split("\n"), start=1) if line.startswith("( ("))
    result = preprocess_ktb(folder, tmp_path / "corpora")
    message = one_line_error(result)
    assert f"error: {path}:{unfinished}: " in message and "not closed by the end of the file" in message
    assert not (tmp_path / "corpora" / "k").exists()
    with pytest.raises(InputError) as info:
        keyaki.read_blocks([path])
    assert info.value.path == str(path) and info.value.line == unfinished


def test_a_keyaki_file_cut_inside_a_word_or_after_a_bracket_is_refused(tmp_path):
    text = keyaki_text()
    for end in (text.index("降っ") + 1, text.index("(VB 降っ)") + 1, text.index("(ID 4_") + 3):
        path = tmp_path / f"cut_{end}.psd"
        path.write_text(text[:end], encoding="utf-8")
        with pytest.raises(InputError, match="not closed by the end of the file") as info:
            keyaki.read_blocks([path])
        assert info.value.line == line_of(text, "( (IP-MAT (PP (NP (N 雨))")


def test_a_stray_closing_bracket_or_text_outside_the_trees_of_a_keyaki_file_is_refused(tmp_path):
    text = keyaki_text()
    stray = text.replace("(ID 3_handmade;JP))", "(ID 3_handmade;JP)))")  # one ')' too many
    (tmp_path / "stray.psd").write_text(stray, encoding="utf-8")
    with pytest.raises(InputError, match="without a matching") as info:
        keyaki.read_blocks([tmp_path / "stray.psd"])
    assert info.value.line == line_of(stray, "(ID 3_handmade")
    # The same in the file's last tree, which Li et al.'s reader leaves out: refused all the same.
    last = text.rstrip("\n") + ")\n"
    (tmp_path / "last.psd").write_text(last, encoding="utf-8")
    with pytest.raises(InputError, match="without a matching") as info:
        keyaki.read_blocks([tmp_path / "last.psd"])
    assert info.value.line == line_of(last, "(ID 6_handmade")
    outside = text.replace("\n\n( (FRAG", "\n\nTokyo\n( (FRAG")
    (tmp_path / "outside.psd").write_text(outside, encoding="utf-8")
    with pytest.raises(InputError, match="text outside any bracketed tree: 'Tokyo'") as info:
        keyaki.read_blocks([tmp_path / "outside.psd"])
    assert info.value.line == line_of(outside, "Tokyo")


def test_penn_treebank_trees_named_psd_are_refused_as_not_keyaki_naming_the_file_and_why(tmp_path):
    for name, text in (("packed.psd", PTB_MRG), ("spaced.psd", PTB_MRG.replace("\n( (S", "\n\n( (S"))):
        folder = tmp_path / name / "treebank"
        folder.mkdir(parents=True)
        (folder / name).write_text(text, encoding="utf-8")
        message = one_line_error(preprocess_ktb(folder.parent, tmp_path / "corpora"))
        assert f"error: {folder / name}: " in message
        assert "its POS tags are not the Keyaki Treebank's" in message and "the Penn Treebank's" in message
        assert "(NN, DT" in message and "split 'train' is empty" not in message


def test_a_gold_file_of_the_other_treebank_is_refused_by_eval_in_either_direction(tmp_path):
    ptb, ktb = tmp_path / "ptb.mrg", tmp_path / "ktb.psd"
    ptb.write_text(PTB_MRG, encoding="utf-8")
    ktb.write_text(keyaki_text(), encoding="utf-8")
    runner = CliRunner()
    for gold, treebank, ours, theirs in ((ptb, "ktb", "Keyaki Treebank's", "--treebank ptb"),
                                         (ktb, "ptb", "Penn Treebank's", "--treebank ktb")):
        result = runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(gold), "--treebank", treebank,
                                     "--no-progress"])
        message = one_line_error(result)
        assert f"error: {gold}: its POS tags are not the {ours}" in message and theirs in message
    for gold, treebank in ((ptb, "ptb"), (ktb, "ktb")):
        result = runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(gold), "--treebank", treebank,
                                     "--json", "--no-progress"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["n_sentences"] > 0


def test_keyaki_trees_given_to_preprocess_as_the_penn_treebank_s_are_refused_naming_ktb(tmp_path):
    (tmp_path / "k.psd").write_text(keyaki_text(), encoding="utf-8")
    result = CliRunner().invoke(app, ["preprocess", "--train", str(tmp_path / "k.psd"), "--out-dir",
                                      str(tmp_path / "c")])
    message = one_line_error(result)
    assert f"error: {tmp_path / 'k.psd'}: its POS tags are not the Penn Treebank's" in message
    assert "those other tags are the Keyaki Treebank's (--treebank ktb)" in message


def test_the_tag_census_of_each_treebank_passes_its_own_trees_and_refuses_the_other_s(tmp_path):
    from induce.trees.brackets import read_trees
    from induce.trees.treebanks import tag_census, tag_refusal

    (tmp_path / "k.psd").write_text(keyaki_text(), encoding="utf-8")
    (tmp_path / "p.mrg").write_text(PTB_MRG, encoding="utf-8")
    keyaki_trees = [t.tree for t in read_trees(tmp_path / "k.psd")]
    ptb_trees = [t.tree for t in read_trees(tmp_path / "p.mrg")]
    for profile, own, other in ((KTB, keyaki_trees, ptb_trees), (PTB, ptb_trees, keyaki_trees)):
        census = tag_census(profile)
        for tree in own:
            census.add(tree)
        assert tag_refusal(census, profile) is None
        census = tag_census(profile)
        for tree in other:
            census.add(tree)
        assert tag_refusal(census, profile) is not None


@pytest.mark.parametrize("name, text", [
    ("wsj_0001.mrg", PTB_MRG),
    ("one.txt", "".join(" ".join(tree.split()) + "\n" for tree in PTB_MRG.split("\n( (S")[0:1]) +
     "(S (NP (PRP She)) (VP (VBD read) (NP (DT a) (NN book))) (. .))\n"),
])
def test_penn_treebank_files_cut_mid_tree_are_refused_by_preprocess_and_eval(tmp_path, name, text):
    """The PTB reader (multi-line ``.mrg`` and one tree per line) refuses a cut file for every command that
    reads trees: the custom files of preprocess and the gold file of eval."""
    path = tmp_path / name
    cut = text[: int(0.6 * len(text))]
    path.write_text(cut, encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["preprocess", "--train", str(path), "--out-dir", str(tmp_path / "c")])
    assert "not closed by the end of the file" in one_line_error(result) and f"{path}:" in result.output
    result = runner.invoke(app, ["eval", "--baseline", "right", "--gold", str(path), "--no-progress"])
    assert "not closed by the end of the file" in one_line_error(result) and f"{path}:" in result.output
