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
        "models_order": list(models), "models": models, "seeds": ["1"], "split": "valid",
        "corpus": {"eval": {"source_kind": "wsj-files"}},
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
    assert "PRPN at 45.0 WSJ40 F1 on dev (WSJ 22), above" in findings.headline(data)[0]


def test_below_the_untrained_model_on_its_sentences_and_gold_branching_for_models_the_paper_does_not_list():
    data = results(onlstm=_model({"1": 30.0}, left=10.0, right=50.0))
    data["random_init"] = {"onlstm": {"n_models": 5, "n_sentences": 400, "sentence_f1": mean_std([33.0, 35.0])}}
    data["models"]["onlstm"]["summary"]["init_sentences_sentence_f1"] = mean_std([31.5])
    text = findings.below_baselines(data)[0]
    assert "below right-branching (38.7)" in text
    assert ("On the 400 sentences its untrained initialisation parses, ON-LSTM scores 31.5 WSJ40 F1, below that "
            "initialisation (34.0, mean of 5 inits)") in text
    assert "gold trees make 3% / 46% (mostly right-branching)" in text


def test_a_model_is_compared_with_its_untrained_initialisation_on_the_same_sentences_only():
    """PaLM-U was called "below its own untrained initialisation" with its F1 on 1,641 sentences against the
    untrained models' on the first 400 of them. Without the trained model's figure on those 400, nothing is
    said; with it, that figure decides (here above the initialisation, so no sentence)."""
    data = results(palm=_model({"1": 40.0}, left=20.0, right=60.0))  # above every baseline
    data["random_init"] = {"palm": {"n_models": 5, "n_sentences": 400, "sentence_f1": mean_std([44.0])}}
    assert not findings.below_baselines(data)
    data["models"]["palm"]["summary"]["init_sentences_sentence_f1"] = mean_std([45.0])
    assert not findings.below_baselines(data)
    data["models"]["palm"]["summary"]["init_sentences_sentence_f1"] = mean_std([42.0])
    (text,) = findings.below_baselines(data)
    assert text.startswith("**On the 400 sentences its untrained initialisation parses, PaLM-U scores 42.0 WSJ40 F1, "
                           "below that initialisation (44.0, mean of 5 inits).**")


def test_branching_is_named_only_where_one_direction_dominates():
    """43% left / 31% right splits is not "left-branching": a direction is named when it makes at least 40% of the
    splits and twice the other's; the paper's 1.1 / 85.6 is right-branching, and ours then "is not"."""
    assert findings.branching_direction(43.0, 31.0) is None
    assert findings.branching_direction(1.1, 85.6) == "right"
    assert findings.branching_direction(6.5, 52.7) == "right"
    assert findings.branching_direction(45.0, 20.0) == "left"
    assert findings.branching_direction(30.0, 5.0) is None  # most splits are neither
    data = results(palm=_model({"1": 6.8}, left=43.0, right=31.0))
    text = findings.below_baselines(data)[0]
    assert "43% left and 31% right splits (WSJ40): no dominant direction" in text
    assert "(mostly right-branching), which ours is not." in text
    assert "left-branching," not in text and "opposite" not in text


def test_the_headline_names_the_best_learned_parser_and_sets_controls_apart():
    """"The best parser here is PaLM-RB at 38.7": PaLM-RB is the right-branching control. The headline names
    the best learned unsupervised parser; the control and the model trained with gold trees are named apart."""
    data = results(prpn=_model({"1": 27.5}), palm_rb=_model({"1": 38.7}), palm_s=_model({"1": 30.0}))
    data["models"]["palm_rb"]["traits"] = {"control": True}
    data["models"]["palm_s"]["traits"] = {"supervised": True}
    text = findings.headline(data)[0]
    assert text.startswith("The best learned unsupervised parser here is PRPN at 27.5 WSJ40 F1 on dev (WSJ 22), "
                           "below the best trivial baseline, right-branching trees (38.7).")
    assert "palm_rb at 38.7 (a control: its trees do not depend on what it learns)" in text
    assert "palm_s at 30.0 (trained with gold trees)" in text
    only_controls = results(palm_rb=_model({"1": 38.7}))
    only_controls["models"]["palm_rb"]["traits"] = {"control": True}
    assert findings.headline(only_controls)[0].startswith("No learned unsupervised parser has WSJ40 figures")


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
    assert "peaked at 35.2 in epoch 2 and fell to 28.0 by the last evaluation, epoch 4 (partial)" in sentences[0]
    assert "from epoch 3, dev F1 30.0" in sentences[0]
    assert "dev F1 on the monitor set (dev)" in sentences[0]
    data["monitor"] = {"models": {"palm": {"dev_f1_sentences": 200, "select_by": "valid_ppl"}}}
    assert "dev F1 on the monitor set (its first 200 dev sentences of 2-40 words)" in findings.falling_curves(data)[0]
    rising = copy.deepcopy(data)
    rising["models"]["palm"]["seeds"]["1"]["history"] = [{"epoch": k, "dev_f1": 10.0 * k} for k in (1, 2, 3)]
    assert not findings.falling_curves(rising)


def test_findings_do_not_import_the_report():
    """The display names live in a small module (induce.report.names) that the report and its findings both
    import: no import circle between the report's markdown and its findings (findings imported the report
    inside a function to get around it); names reads the models' display names from the registry only. The
    whole tree's imports are checked in test_layout."""
    import ast

    import induce.report.findings
    import induce.report.names

    def imported(module) -> set:
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        return found | {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}

    assert {name for name in imported(induce.report.findings) if name.startswith("induce")} == {"induce.report.names"}
    assert {name for name in imported(induce.report.names) if name.startswith("induce")} == {"induce.models.registry"}


def test_a_checkpoint_selected_far_below_the_best_dev_f1_is_said_with_its_criterion():
    """A C-PCFG selected by its validation bound took epoch 1 (monitor F1 20.8) while the monitor F1 rose to 40:
    the report says which checkpoint the tables show, what chose it, and the best and last evaluations."""
    history = [{"epoch": 1, "dev_f1": 20.8, "best": True}, {"epoch": 2, "mid_epoch": True, "steps": 1500,
                                                             "dev_f1": 39.0}, {"epoch": 2, "dev_f1": 40.1}]
    data = results(cpcfg=_model({"1": 20.0}, history=history))
    data["models"]["cpcfg"]["seeds"]["1"]["run"] = {"validation_loss": "validation bound (z sampled)"}
    sentences = findings.selection_gaps(data)
    assert sentences == [
        "**C-PCFG: the checkpoint evaluated in the tables, from epoch 1 (chosen by the lowest validation bound (z "
        "sampled)), parses the monitor set (dev) at 20.8 dev F1, against 40.1 at its best evaluation (epoch 2) and "
        "40.1 at the last (epoch 2).** The selection criterion and parsing disagree here."]
    assert not findings.falling_curves(data)  # the curve did not fall: one sentence, not two
    close = copy.deepcopy(data)
    close["models"]["cpcfg"]["seeds"]["1"]["history"][0]["dev_f1"] = 39.0
    assert not findings.selection_gaps(close)
