"""induce.report.findings on synthetic results dicts: the report's generated sentences (a model below a
trivial baseline, an outlier seed, a dev F1 curve that falls) say what the numbers show, and
nothing when there is nothing to say."""
from __future__ import annotations

import copy
from pathlib import Path

from induce.report import findings
from induce.reproduce import mean_std


def _summary(f1_by_seed: dict, left=40.0, right=30.0, ppl_by_seed=None) -> dict:
    ppl_by_seed = ppl_by_seed or {s: 100.0 for s in f1_by_seed}
    return {
        "sentence_f1_wsj40": mean_std(f1_by_seed.values()),
        "left_split_pct_wsj40": mean_std([left]), "right_split_pct_wsj40": mean_std([right]),
        "perplexity": mean_std(ppl_by_seed.values()),
    }


def _model(f1_by_seed: dict, history=None, ppl_by_seed=None, **kw) -> dict:
    ppl_by_seed = ppl_by_seed or {s: 100.0 for s in f1_by_seed}
    seeds = {s: {"scores": {"wsj40": {"sentence_f1": f1}}, "perplexity": ppl_by_seed[s], "history": history or []}
             for s, f1 in f1_by_seed.items()}
    return {"seeds": seeds, "summary": _summary(f1_by_seed, ppl_by_seed=ppl_by_seed, **kw)}


def results(**models) -> dict:
    base = {"left": 8.6, "right": 38.7, "random": 18.1, "balanced": 21.3}
    return {
        "models_order": list(models), "models": models, "seeds": ["1"],
        "baselines": {k: {"scores": {"wsj40": {"sentence_f1": v}}} for k, v in base.items()},
        "random_init": {}, "gold": {"wsj40": {"left_split_pct": 2.9, "right_split_pct": 45.5}},
        "published": {"table4": {"palm": {"left": 1.1, "right": 85.6}}},
    }


def test_a_model_below_left_branching_is_named_with_its_numbers_and_branching():
    data = results(palm=_model({"1": 6.9}, left=40.0, right=20.0), prpn=_model({"1": 45.0}))
    sentences = findings.below_baselines(data)
    assert len(sentences) == 1
    text = sentences[0]
    assert "PaLM-U at 6.9 WSJ40 F1 is below left-branching (8.6)" in text
    assert "right-branching (38.7)" in text
    assert "40% left" in text and "1.1% left / 85.6% right" in text and "opposite of the paper's finding" in text
    # a model at or above every baseline gives no sentence; the headline names the best one
    assert not findings.below_baselines(results(prpn=_model({"1": 45.0})))
    assert "PRPN at 45.0 WSJ40 F1, above" in findings.headline(data)[0]


def test_below_the_untrained_model_and_gold_branching_for_models_the_paper_does_not_list():
    data = results(onlstm=_model({"1": 30.0}, left=10.0, right=50.0))
    data["random_init"] = {"onlstm": {"n_models": 5, "sentence_f1": mean_std([33.0, 35.0])}}
    text = findings.below_baselines(data)[0]
    assert "below right-branching (38.7)" in text and "untrained initialisation (34.0, mean of 5 inits)" in text
    assert "gold trees make 3% / 46%" in text


def test_an_outlier_seed_is_flagged_and_a_spread_without_outlier_is_not():
    data = results(palm=_model({"1": 30.0, "2": 31.0, "3": 29.5, "4": 8.0}))
    sentences = findings.seed_outliers(data)
    assert len(sentences) == 1
    assert "seed 4: WSJ40 F1 8.0 is an outlier" in sentences[0]
    assert "30.2 ± 0.8 without" in sentences[0]
    even = results(palm=_model({"1": 20.0, "2": 30.0, "3": 40.0}))
    assert not findings.seed_outliers(even)
    # perplexity: a diverging seed
    ppl = results(prpn=_model({"1": 30.0, "2": 30.5, "3": 31.0}, ppl_by_seed={"1": 80.0, "2": 82.0, "3": 400.0}))
    assert any("seed 3: perplexity 400.0 is an outlier" in s for s in findings.seed_outliers(ppl))


def test_a_falling_dev_f1_curve_reports_peak_and_last_epoch():
    history = [{"epoch": 1, "dev_f1": 20.0, "best": True}, {"epoch": 2, "dev_f1": 35.2, "best": True},
               {"epoch": 3, "dev_f1": 30.0, "best": True}, {"epoch": 4, "dev_f1": 28.0, "partial": True}]
    data = results(palm=_model({"1": 20.0}, history=history))
    sentences = findings.falling_curves(data)
    assert len(sentences) == 1
    assert "peaked at 35.2 in epoch 2 and fell to 28.0 by the last, epoch 4 (partial)" in sentences[0]
    assert "from epoch 3, dev F1 30.0" in sentences[0]
    rising = copy.deepcopy(data)
    rising["models"]["palm"]["seeds"]["1"]["history"] = [{"epoch": k, "dev_f1": 10.0 * k} for k in (1, 2, 3)]
    assert not findings.falling_curves(rising)


def test_findings_do_not_import_the_report():
    """The display names live in a leaf module (induce.report.names) that the report and its findings both
    import: no import circle between the report's markdown and its findings (findings imported the report
    inside a function to get around it). The whole tree's imports are checked in test_layout."""
    import ast

    import induce.report.findings
    import induce.report.names

    def imported(module) -> set:
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        return found | {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}

    assert {name for name in imported(induce.report.findings) if name.startswith("induce")} == {"induce.report.names"}
    assert not {name for name in imported(induce.report.names) if name.startswith("induce")}
