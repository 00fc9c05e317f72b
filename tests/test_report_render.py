"""REPORT.md rendered from fixed results (``tests/data/report/results.json``: a toy reproduction's
results with its paths replaced and the per-seed details the report does not read left out), in
several variants, compared with the text in ``tests/data/report/REPORT-<variant>.md``.

The expected texts were rendered before ``render_markdown`` was split into one function per
section: the split moved code without changing what the report says. A deliberate change of the
report's text updates them (``python tests/test_report_render.py --write``) in the same commit.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data" / "report"


def fixture_results() -> dict:
    return json.loads((DATA / "results.json").read_text(encoding="utf-8"))


def variants() -> dict:
    """``{name: results}``: the toy run as it is, and the same figures through the report's other
    branches (unfinished chunk, diverged seed, failed step, no Mikolov text, time budgets, synthetic data)."""
    plain = fixture_results()
    trouble = copy.deepcopy(plain)
    trouble.update(incomplete=["palm-seed1"], chunk_s=10800.0, mikolov=None,
                   time_budgets_s={"prpn": 240.0, "onlstm": 300.0, "palm": None, "palm-s": None, "palm-rb": None})
    trouble["models"]["prpn"]["diverged_seeds"] = ["1"]
    trouble["steps"][1] = dict(trouble["steps"][1], status="failed", detail="out of memory | retry")
    synthetic = copy.deepcopy(plain)
    synthetic["corpus"]["eval"].update(kind="synthetic", source_kind="synthetic")
    synthetic.update(time_per_model_s=360.0)
    synthetic["profile"] = dict(synthetic["profile"], train_sentences=None, random_init_sentences=None)
    return {"plain": plain, "trouble": trouble, "synthetic": synthetic}


def render(results: dict) -> str:
    from induce.report.markdown import render_markdown
    from induce.report.published import PUBLISHED

    return render_markdown(dict(results, published=PUBLISHED))


@pytest.mark.parametrize("name", sorted(variants()))
def test_report_renders_as_expected(name):
    expected = (DATA / f"REPORT-{name}.md").read_text(encoding="utf-8")
    assert render(variants()[name]) == expected


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    for variant, results in variants().items():
        (DATA / f"REPORT-{variant}.md").write_text(render(results), encoding="utf-8")


def test_the_report_says_what_each_token_count_counts():
    """Words, tokens with the sentence ends, and tokens predicted per epoch: one count of the training text
    each, named (the toy report had 6,335 "LM tokens" and 6,624 "tokens trained" for the same 300 sentences)."""
    results = fixture_results()
    counts = results["corpus"]["train"]["splits"]["train"]
    words, sentences = counts["lm_tokens"], counts["lm_sentences"]
    text = render(results)
    assert (f"{sentences:,} sentences: {words:,} words + {sentences:,} sentence ends = {words + sentences:,} tokens"
            in text)
    per_epoch = {run["train_tokens"] for model in results["models"].values() for seed in model["seeds"].values()
                 for run in seed["history"]}
    assert per_epoch == {((words + sentences) // 8 - 1) * 8}  # batch size 8: as the note says
    assert f"up to {per_epoch.pop():,} with 8 streams per epoch here" in text
    assert "LM tokens" not in text


def test_the_convention_says_how_each_models_parser_kind_reads_a_sentence():
    """From the models' parser kinds: the language models read `<eos> words <eos>`, a grammar (words_only) the
    words alone; the toy run (language models only) keeps its sentence."""
    from induce.report.markdown import sentence_reading

    results = fixture_results()
    assert "(words after punctuation removal, `<eos> words <eos>` from a fresh state)" in render(results)
    assert sentence_reading(results["models_order"]) in render(results)
    grammars = sentence_reading(["npcfg", "tnpcfg"])
    assert "<eos>" not in grammars and "without end marks" in grammars
    mixed = sentence_reading(["prpn", "palm", "npcfg", "tnpcfg"])
    assert "PRPN and PaLM-U as `<eos> words <eos>`; N-PCFG and TN-PCFG as the words alone" in mixed
