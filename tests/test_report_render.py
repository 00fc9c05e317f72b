"""REPORT.md rendered from fixed results (``tests/data/report/results.json``: a toy reproduction's
results with its paths replaced and the per-seed details the report does not read left out), in
several variants, compared with the text in ``tests/data/report/REPORT-<variant>.md``.

The expected texts were rendered before ``render_markdown`` was split into one function per
section: the split moved code without changing what the report says. A deliberate change of the
report's text updates them (``python tests/test_report_render.py --write``) in the same commit.

The fixture's later fields were computed for that same toy run (corpora/ptb-wsj, WSJ 22): each model's
``traits``, each run's summary (``run``, from its history), ``splits``, ``monitor`` (on the same subset
corpus), and the scores on the untrained models' 20 sentences of the three runs whose trees are exactly
left- or right-branching (those of that baseline on the same sentences). The ``test`` and ``pcfg`` variants
are made up from it here: only their rendering is tested, their figures mean nothing.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
import torch

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
    return {"plain": plain, "trouble": trouble, "synthetic": synthetic, "test": on_test_split(plain),
            "pcfg": with_grammars(plain)}


def _scores_from_summary(summary: dict, shift: float = 0.0) -> dict:
    return {name: {"sentence_f1": summary[f"sentence_f1_{name}"]["mean"] + shift} for name in ("all", "wsj40")}


def on_test_split(plain: dict) -> dict:
    """The figures as if the final split were test (WSJ 23): each run's dev figures beside them (the same
    figures plus one point, made up)."""
    test = copy.deepcopy(plain)
    test.update(split="test", splits=dict(plain["splits"], final="test", evaluated=["valid", "test"],
                                          test_available=True))
    test["corpus"]["eval"]["splits"]["test"] = dict(plain["corpus"]["eval"]["splits"]["valid"])
    for model in test["models"].values():
        for data in model["seeds"].values():
            data["scores"] = _scores_from_summary(model["summary"])
        model["dev"] = {"split": "valid", "seeds": {seed: {"split": "valid", "scores": _scores_from_summary(
            model["summary"], 1.0)} for seed in model["seeds"]}}
    return test


def with_grammars(plain: dict) -> dict:
    """Two grammars added to the toy run (made up from PRPN's figures): a C-PCFG whose perplexity is a bound,
    trained on sentences of at most 20 words, evaluated inside epochs (steps, CPU seconds), whose selection took
    its first evaluation; an N-PCFG whose history has no CPU seconds (the learning curve falls back to the
    clock)."""
    results = copy.deepcopy(plain)
    prpn = plain["models"]["prpn"]
    cpcfg_history = [
        {"epoch": 1, "mid_epoch": True, "batch": 100, "steps": 100, "tokens": 1800, "train_cpu_seconds": 30.0,
         "dev_f1": 20.8, "valid_ppl": 700.0, "best": True},
        {"epoch": 1, "steps": 160, "tokens": 2900, "train_cpu_seconds": 48.0, "dev_f1": 31.0, "valid_ppl": 720.0,
         "train_ppl": 900.0, "train_tokens": 2900, "train_seconds": 50.0, "epoch_seconds": 55.0, "best": False},
        {"epoch": 2, "mid_epoch": True, "batch": 100, "steps": 260, "tokens": 4700, "train_cpu_seconds": 80.0,
         "dev_f1": 39.0, "valid_ppl": 760.0, "best": False},
        {"epoch": 2, "steps": 320, "tokens": 5800, "train_cpu_seconds": 97.0, "dev_f1": 40.1, "valid_ppl": 790.0,
         "train_ppl": 600.0, "train_tokens": 2900, "train_seconds": 49.0, "epoch_seconds": 54.0, "best": False}]
    npcfg_history = [
        {"epoch": 1, "steps": 160, "dev_f1": 25.0, "valid_ppl": 650.0, "train_ppl": 800.0, "train_tokens": 2900,
         "train_seconds": 40.0, "epoch_seconds": 44.0, "best": True},
        {"epoch": 2, "steps": 320, "dev_f1": 30.0, "valid_ppl": 600.0, "train_ppl": 560.0, "train_tokens": 2900,
         "train_seconds": 41.0, "epoch_seconds": 45.0, "best": True}]
    for name, history, bound in (("cpcfg", cpcfg_history, True), ("npcfg", npcfg_history, False)):
        best = [h for h in history if h["best"]][-1]
        run = {"params": 3357800, "epochs": 2, "complete_epochs": 2, "evaluations": len(history),
               "stop_reason": "max_steps", "train_tokens": 5800, "train_seconds": 109.0,
               "train_cpu_seconds": history[-1].get("train_cpu_seconds"), "steps": 320, "best_epoch": best["epoch"],
               "best_steps": best["steps"], "best_mid_epoch": bool(best.get("mid_epoch")), "best_partial": False,
               "best_dev_f1": best["dev_f1"], "last_dev_f1": history[-1]["dev_f1"],
               "peak_dev_f1": max(h["dev_f1"] for h in history), "monitor_valid_ppl": best["valid_ppl"],
               "perplexity_bound": bound}
        seed = {"history": history, "run": run, "earlier_invocation": name == "npcfg",
                "scores": _scores_from_summary(prpn["summary"])}
        results["models"][name] = {"seeds": {"1": seed}, "summary": copy.deepcopy(prpn["summary"]),
                                   "diverged_seeds": [], "failed_seeds": {}, "earlier_invocation": name == "npcfg",
                                   "traits": {"control": False, "supervised": False, "parser_kind": "grammar",
                                              "sentence_level": True, "train_max_length": 20}}
        results["models"][name]["summary"]["perplexity"] = {"mean": best["valid_ppl"], "n": 1, "std": None}
        results["models_order"].append(name)
        results["configs"][name] = {"data": {"batch_size": 4, "max_length": 20},
                                    "model": {"nt_states": 15, "t_states": 30, "state_dim": 128}}
        results["monitor"]["models"][name] = {"select_by": "valid_ppl", "dev_f1_sentences": 20,
                                              "bound_sentences": 31, "bound_min_length": 2, "bound_max_length": 20}
    results["earlier_runs"] = ["npcfg seed 1"]
    results["figures"] = dict(plain["figures"], learning_curves="figures/learning-curves.png")
    return results


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


def test_the_pcfgs_stand_beside_their_published_figures_with_their_bound_and_length_cap():
    """Each grammar's all-length F1 beside the published one (source, convention, split); its perplexity, where
    a bound, marked as one, and its training length cap said wherever it stands beside the LSTMs'."""
    text = render(variants()["pcfg"])
    assert "## Sentence F1 over all lengths against the published figures" in text
    assert "| C-PCFG | 26.9 | 55.2 | Kim, Dyer & Rush 2019, Table 1 |" in text
    assert "| N-PCFG | 26.9 | 50.8 | Kim, Dyer & Rush 2019, Table 1 |" in text
    assert "**Ours are dev figures (dev (WSJ 22)), not test figures**" in text
    assert "| C-PCFG | 1 | 6,624 | 10 s | ≤ 700.0 |" in text and "| N-PCFG | 1 | 6,624 | 10 s | 600.0 |" in text
    assert "C-PCFG: **an upper bound**" in text and "N-PCFG: exact" in text
    assert "trained on sentences of at most 20 words (C-PCFG and N-PCFG)" in text
    assert "![learning curves](figures/learning-curves.png)" in text
    assert "| C-PCFG | step 100 of 320 (inside epoch 1 of 2) |" in text
    assert "N-PCFG (earlier invocation)" in text and "| runs of earlier invocations |" in text
    on_test = render(dict(variants()["pcfg"], split="test"))
    assert "Ours are test figures, on the same split as the published ones" in on_test



def test_the_seed_papers_findings_stand_beside_ours():
    """ON-LSTM and PRPN against right-branching, here and in their papers (all lengths, with the sources), and
    PaLM-S's perplexity against PaLM-U's beside the paper's finding that supervision lowers it."""
    results = copy.deepcopy(variants()["test"])
    results["models"]["palm-s"]["summary"]["perplexity"] = {"mean": 95.0, "n": 1, "std": None}
    results["models"]["palm"]["summary"]["perplexity"] = {"mean": 100.0, "n": 1, "std": None}
    text = render(results)
    assert "| right-branching (baseline) | 38.3 | 39.5 | Kim, Dyer & Rush 2019, Table 1 | — | — |" in text
    assert ("* ON-LSTM: 19.9 against right-branching's 38.3 here (-18.4); published 47.7 against 39.5 (+8.2, "
            "Shen et al. 2019, ON-LSTM, Table 2).") in text
    assert "* PRPN: 26.9 against right-branching's 38.3 here (-11.4); published 37.4 against 39.5 (-2.1," in text
    assert ("**Supervision and perplexity**: PaLM-S 95.0 against PaLM-U 100.0 on this text (-5.00% relative: "
            "lower); the paper: \"PaLM-S further reduces the perplexity by 1.6-3.4% (relative)\"") in text
    assert "against PaLM-RB" not in text  # a control is not the unsupervised twin

def test_on_a_test_split_every_section_names_it_and_the_dev_figures_stand_beside():
    text = render(variants()["test"])
    assert "The figures of ours below are on **test (WSJ 23)**, unless marked dev" in text
    for heading in ("## 1. Language modelling (PaLM Table 1 style), test (WSJ 23)",
                    "## 2. Unsupervised parsing, WSJ40 (PaLM Table 3), test (WSJ 23)",
                    "## 3. Branching, WSJ40 (PaLM Table 4), test (WSJ 23)"):
        assert heading in text
    assert ("| PRPN | epoch 1 of 1 (step 69 of 69) | lowest validation perplexity on the monitor's text (50 "
            "sentences) | 25.0 | 25.0 | 25.0 | 28.2 | 27.9 | 27.2 | 26.9 |") in text
    assert "There are no test figures" not in text


def test_the_terminal_summary_marks_a_bound_and_names_the_split():
    """``induce reproduce``'s closing table: a perplexity that is an upper bound carries ``≤`` (explained in the
    caption) and the title names the split the figures come from; an exact one carries no mark."""
    from rich.console import Console

    from induce.cli.reproduce import _print_summary

    console = Console(record=True, width=200)
    _print_summary(variants()["pcfg"], console)
    text = console.export_text()
    words = " ".join(text.split())  # the caption wraps at the table's width
    assert "≤: an upper bound" in words and "dev (WSJ 22)" in words
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 2}
    assert "≤ 700.0" in rows["C-PCFG"] and "≤" not in rows["N-PCFG"] and "600.0" in rows["N-PCFG"]
    plain = Console(record=True, width=200)
    _print_summary(fixture_results(), plain)
    assert "≤" not in plain.export_text()


def test_only_a_wsj_test_split_is_called_the_published_figures_split():
    """A test split of other data (the NLTK sample's files 180-199, a synthetic treebank) gives test figures, but
    not on WSJ section 23, where the published ones are: the PCFG section says so instead of 'the same split'."""
    results = copy.deepcopy(variants()["pcfg"])
    results["split"] = "test"
    results["corpus"]["eval"]["source_kind"] = "nltk-sample"
    text = render(results)
    assert "on **test (NLTK sample)**, unless marked dev (this data's own test split, **not WSJ section 23**" in text
    assert "not WSJ section 23" not in render(dict(variants()["pcfg"], split="test"))
    assert "same split as the published ones" not in text
    assert "**Ours are test figures of other data (test (NLTK sample)), not of WSJ section 23**" in text


def test_a_table_cell_with_a_bar_keeps_the_tables_columns():
    """The C-PCFG's selection criterion reads "z at the mean of q(z | x)": unescaped, its bar would split the cell
    and shift every later column of the Model selection table."""
    import re

    from induce.models.registry import get_model_class
    from induce.report.text import markdown_table

    assert markdown_table(["a", "b"], [["q(z | x)", "1"]])[2] == "| q(z \\| x) | 1 |"
    cls = get_model_class("cpcfg")
    results = copy.deepcopy(variants()["pcfg"])
    criterion = cls(7, cls.Config(nt_states=2, t_states=3, state_dim=8, valid_z="mean")).validation_loss_text
    assert "|" in criterion
    for seed in results["models"]["cpcfg"]["seeds"].values():
        seed["run"]["validation_loss"] = criterion
    text = render(results)
    section = text.split("## Model selection")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    columns = {len(re.findall(r"(?<!\\)\|", line)) for line in rows}
    assert len(columns) == 1 and any("C-PCFG" in line and "q(z \\| x)" in line for line in rows)


def test_a_missing_mikolov_text_is_named_for_the_final_split():
    results = copy.deepcopy(variants()["test"])
    results["mikolov"] = None
    text = render(results)
    assert "`ptb.test.txt`, or `ptb_lm/`" in text and "`ptb.valid.txt`, or" not in text


def test_the_setup_names_the_vector_instructions_torch_used():
    """Bit-for-bit equal figures need the same vector instructions (torch's CPU kernels and the compiled PCFG
    loops round by them): the report's machine line names them, as ``induce reproduce`` records them."""
    from induce.reproduce.results import machine_info

    info = machine_info("cpu")
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    results = next(iter(variants().values()))
    results = dict(results, machine=dict(results["machine"], cpu_capability="AVX2"))
    machine_line = next(line for line in render(results).splitlines() if line.startswith("| machine |"))
    assert "(AVX2)" in machine_line


def test_the_wall_time_says_the_steps_ran_at_once():
    """With --jobs 2 the steps' own times add up to more than the invocation's wall time: the row says why."""
    from induce.report.text import wall_text

    results = {"wall_seconds": 600.0, "jobs": 2, "step_log": {"a": {"seconds": 600.0}, "b": {"seconds": 540.0}}}
    assert wall_text(results) == ("this invocation 10.0 min; the steps' own times add up to 19.0 min (each step's "
                                  "last run, up to 2 at once; steps skipped here ran in an earlier invocation)")
    assert "at once" not in wall_text(dict(results, jobs=1))
