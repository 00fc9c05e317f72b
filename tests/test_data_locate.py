"""Data-root precedence, treebank discovery, the default corpus and its synthetic fallback."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import nltk
import pytest
from rich.console import Console

from induce.data import locate, preprocess
from induce.data.corpus import PreparedCorpus
from induce.errors import InduceError

TREE = "( (S (NP-SBJ (DT The) (NN {w}) ) (VP (VBD sat) ) (. .) ))\n"


def make_wsj_files(root: Path, test: bool = False) -> Path:
    (root / "wsj").mkdir(parents=True)
    for name in ["02-21.mrg", "22.mrg"] + (["23.mrg"] if test else []):
        (root / "wsj" / name).write_text(TREE.format(w=name[:2]))
    return root


def make_sample(folder: Path, numbers=range(1, 200)) -> Path:
    folder.mkdir(parents=True)
    for n in numbers:
        (folder / f"wsj_{n:04d}.mrg").write_text(TREE.format(w=f"w{n}"))
    return folder


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv(locate.ENV_VAR, raising=False)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "no-nltk-data")])
    return monkeypatch


def test_precedence(clean_env, tmp_path):
    explicit, env = tmp_path / "explicit", tmp_path / "env"
    explicit.mkdir()
    env.mkdir()
    corpora = tmp_path / "corpora"
    nltk_root = tmp_path / "nltk_data"
    make_sample(nltk_root / "corpora" / "treebank" / "combined", [1])
    clean_env.setattr(nltk.data, "path", [str(tmp_path / "nothing"), str(nltk_root)])
    assert locate.resolve_data_root(None, corpora) == nltk_root
    make_wsj_files(corpora)
    assert locate.resolve_data_root(None, corpora) == corpora
    clean_env.setenv(locate.ENV_VAR, str(env))
    assert locate.resolve_data_root(None, corpora) == env
    assert locate.resolve_data_root(explicit, corpora) == explicit
    with pytest.raises(InduceError, match="no such folder"):
        locate.resolve_data_root(tmp_path / "typo", corpora)
    clean_env.setenv(locate.ENV_VAR, str(tmp_path / "typo"))
    with pytest.raises(InduceError, match="INDUCE_DATA"):
        locate.resolve_data_root(None, corpora)


def test_nothing_found(clean_env, tmp_path):
    assert locate.resolve_data_root(None, tmp_path / "corpora") is None


def test_find_treebank_kinds_and_priority(tmp_path):
    root = make_wsj_files(tmp_path / "a", test=True)
    found = locate.find_treebank(root)
    assert found.kind == "wsj-files" and sorted(found.split_files) == ["test", "train", "valid"]
    make_sample(root / "nltk_treebank")
    assert locate.find_treebank(root).kind == "wsj-files"  # full WSJ beats the sample
    sample = locate.find_treebank(tmp_path / "a" / "nltk_treebank")
    assert sample.kind == "nltk-sample"
    assert {s: [p.name for p in f] for s, f in sample.split_files.items()} == {
        split: [f"wsj_{n:04d}.mrg" for n in numbers] for split, numbers in preprocess.NLTK_SAMPLE_SPLIT.items()}
    ldc = tmp_path / "ldc" / "treebank_3" / "parsed" / "mrg" / "wsj"
    for section in (2, 3, 22):
        (ldc / f"{section:02d}").mkdir(parents=True)
        for n in (0, 1):
            (ldc / f"{section:02d}" / f"wsj_{section:02d}{n:02d}.mrg").write_text(TREE.format(w="x"))
    with pytest.raises(InduceError, match="lacks section"):  # train 02-21 but only 02, 03 exist
        locate.find_treebank(tmp_path / "ldc")
    found = locate.find_treebank(tmp_path / "ldc", {"train": (2, 3), "valid": (22,), "test": (23,)})
    assert found.kind == "ldc" and sorted(found.split_files) == ["train", "valid"]  # 23 absent: no test
    assert [p.name for p in found.split_files["train"]] == [
        "wsj_0200.mrg", "wsj_0201.mrg", "wsj_0300.mrg", "wsj_0301.mrg"]


def test_parse_sections():
    assert preprocess.parse_sections("02-21") == tuple(range(2, 22))
    assert preprocess.parse_sections("0,1,5-7") == (0, 1, 5, 6, 7)
    with pytest.raises(InduceError):
        preprocess.parse_sections("21-02")


def test_default_corpus_falls_back_to_synthetic_loudly(clean_env, tmp_path):
    stderr = io.StringIO()
    folder = locate.default_corpus(None, tmp_path / "corpora", Console(file=stderr, width=300))
    message = stderr.getvalue()
    assert "SYNTHETIC" in message and "nltk.downloader treebank" in message and "INDUCE_DATA" in message
    assert PreparedCorpus(folder).name == "synthetic"
    # it says where it writes, as an absolute path (the user gave none)
    assert str((tmp_path / "corpora" / "synthetic").resolve()) in message.replace("\n", "")
    with pytest.raises(InduceError, match="no treebank found"):
        locate.default_corpus(tmp_path, tmp_path / "corpora", Console(file=io.StringIO()))


def test_default_corpus_prefers_wsj_and_is_cached(clean_env, tmp_path):
    root = make_wsj_files(tmp_path / "data")
    make_sample(root / "nltk_treebank", [1])
    clean_env.setenv(locate.ENV_VAR, str(root))
    out = tmp_path / "corpora"
    folder = locate.default_corpus(None, out, Console(file=io.StringIO()))
    corpus = PreparedCorpus(folder)
    assert corpus.name == "ptb-wsj" and corpus.splits == ["train", "valid"]
    stamp = (folder / "meta.json").stat().st_mtime_ns
    log = io.StringIO()
    locate.default_corpus(None, out, Console(file=log))
    assert "reusing" in log.getvalue() and (folder / "meta.json").stat().st_mtime_ns == stamp
    (root / "wsj" / "22.mrg").write_text(TREE.format(w="changed"))  # stale cache: rebuilt silently
    locate.default_corpus(None, out, Console(file=io.StringIO()))
    assert PreparedCorpus(folder).lm_sentences("valid") == [["the", "<unk>", "sat"]]


def test_real_nltk_sample_split_covers_every_file_once():
    root = os.environ.get("INDUCE_DATA")
    if not root or not (Path(root) / "nltk_treebank").is_dir():
        pytest.skip("INDUCE_DATA with nltk_treebank/ not available")
    folder = Path(root) / "nltk_treebank"
    first = preprocess.nltk_sample_split_files(folder)
    assert first == preprocess.nltk_sample_split_files(folder)
    names = [p.name for split in ("train", "valid", "test") for p in first[split]]
    assert sorted(names) == [f"wsj_{n:04d}.mrg" for n in range(1, 200)]
    assert len(set(names)) == 199


@pytest.mark.parametrize("missing", [[42], [1], list(range(150, 199))])
def test_an_nltk_sample_with_files_missing_is_an_error_naming_them(tmp_path, missing):
    """A sample with a file missing (an interrupted download or copy) was split silently, its splits
    short of sentences; without wsj_0001.mrg it was not recognised at all (synthetic fallback)."""
    from induce.errors import InputError

    folder = make_sample(tmp_path / "nltk_treebank", [n for n in range(1, 200) if n not in missing])
    with pytest.raises(InputError) as info:
        locate.find_treebank(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{folder}: the NLTK treebank sample is incomplete: {len(missing)} of its 199 files")
    assert f"wsj_{missing[0]:04d}.mrg" in message and ("more" in message) == (len(missing) > 5)


def test_a_prepared_treebank_in_corpora_is_the_default_without_its_sources(clean_env, tmp_path):
    """After `make reproduce` (or `induce preprocess` with INDUCE_DATA set) has prepared corpora/ptb-wsj,
    the bare commands use it: not "no Penn Treebank found" and the synthetic grammar."""
    from typer.testing import CliRunner

    from induce.cli.main import app

    root = make_wsj_files(tmp_path / "data")
    clean_env.setenv(locate.ENV_VAR, str(root))
    work = tmp_path / "work"
    work.mkdir()
    clean_env.chdir(work)
    prepared = locate.default_corpus(None, Path("corpora"), Console(file=io.StringIO()))
    assert prepared == Path("corpora") / "ptb-wsj"
    clean_env.delenv(locate.ENV_VAR)  # a new shell: the data root is no longer named anywhere
    log = io.StringIO()
    assert locate.default_corpus(None, Path("corpora"), Console(file=log, width=300)) == prepared
    assert "prepared in corpora/ptb-wsj" in log.getvalue() and "SYNTHETIC" not in log.getvalue()
    assert not (work / "corpora" / "synthetic").exists()
    # another folder of prepared corpora (a reproduction's OUT/corpora) may fall back on ./corpora
    assert locate.default_corpus(None, tmp_path / "elsewhere", Console(file=io.StringIO()),
                                 also_prepared_in=[Path("corpora")]) == prepared
    result = CliRunner().invoke(app, ["eval", "--baseline", "right", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["gold"] == "corpora/ptb-wsj/valid.gold.txt"
    # the full treebank before the sample; a subset of it, or a corpus only named so, does not count
    sample = locate.preprocess.preprocess_tree_files(
        {"train": [root / "wsj" / "02-21.mrg"]}, Path("corpora"), "ptb-sample", source_kind="nltk-sample")
    assert locate.find_prepared(Path("corpora")).path == prepared
    (prepared / "meta.json").unlink()
    assert locate.find_prepared(Path("corpora")).path == sample
    meta = json.loads((sample / "meta.json").read_text())
    meta["subset"] = {"of": "elsewhere"}
    (sample / "meta.json").write_text(json.dumps(meta))
    assert locate.find_prepared(Path("corpora")) is None


def test_the_only_prepared_corpus_in_corpora_is_the_default_whatever_its_name(clean_env, tmp_path):
    """A corpus prepared as corpora/mine was not found by the bare commands (only ptb-wsj and ptb-sample
    were): `induce eval` scored the synthetic treebank instead. Several: named, and --corpus asked for."""
    from typer.testing import CliRunner

    from induce.cli.main import app

    root = make_wsj_files(tmp_path / "data")
    clean_env.chdir(tmp_path)
    mine = preprocess.preprocess_tree_files({"train": [root / "wsj" / "02-21.mrg"], "valid": [root / "wsj" / "22.mrg"]},
                                            Path("corpora"), "mine")
    preprocess.preprocess_synthetic(Path("corpora"), sizes={"train": 5, "valid": 2})  # the fallback's: not counted
    log = io.StringIO()
    assert locate.default_corpus(None, Path("corpora"), Console(file=log, width=300)) == mine
    assert "using the treebank corpus prepared in corpora/mine (files;" in log.getvalue()
    result = CliRunner().invoke(app, ["eval", "--baseline", "right", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["gold"] == "corpora/mine/valid.gold.txt"

    preprocess.preprocess_tree_files({"train": [root / "wsj" / "02-21.mrg"]}, Path("corpora"), "other")
    with pytest.raises(InduceError, match=r"2 prepared corpora in corpora/ \(mine, other\) and no data root named: "
                                          r"choose one with --corpus corpora/mine"):
        locate.default_corpus(None, Path("corpora"), Console(file=io.StringIO()))
    result = CliRunner().invoke(app, ["eval", "--baseline", "right", "--json"])
    assert result.exit_code == 2 and "--corpus" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["eval", "--baseline", "right", "--json", "--corpus", "corpora/mine"])
    assert result.exit_code == 0, result.output
