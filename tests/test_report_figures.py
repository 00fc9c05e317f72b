"""The report's plots: data choices that keep them honest (distance bars from 0, every layer drawn,
one colour scale and bar for all attention panels, no empty panel, distinct styles per run)."""
from __future__ import annotations

import numpy as np
import pytest

from induce.inference.show import SentenceStructure
from induce.report import figures

pytest.importorskip("matplotlib")


def _distance_structure(n=6, layers=3):
    rng = np.random.default_rng(0)
    layer_d = 0.40 + 0.15 * rng.random((layers, n))
    return SentenceStructure("onlstm", "distance", [f"w{i}" for i in range(n)], [f"w{i}" for i in range(n)], None,
                             distances=layer_d[1], layer_distances=layer_d, distance_layer=1)


def _span_structure(n, scale):
    rng = np.random.default_rng(n)
    scores = np.full((n, n), -np.inf)
    for j in range(n):
        scores[j, : j + 1] = scale * rng.normal(size=j + 1)
    return SentenceStructure("palm", "span", [f"w{i}" for i in range(n)], [f"w{i}" for i in range(n)], None,
                             span_scores=scores)


def _capture(monkeypatch):
    saved = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, dpi=100: saved.append(fig) or path)
    return saved


def test_distance_bars_start_at_zero_and_every_other_layer_is_a_line(monkeypatch, tmp_path):
    saved = _capture(monkeypatch)
    figures.plot_distances([("a", _distance_structure()), ("b", _distance_structure(n=4))], tmp_path / "d.png")
    fig = saved[0]
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert ax.get_ylim()[0] == 0.0
        assert all(bar.get_y() == 0.0 for bar in ax.patches)  # bars drawn from 0
        assert sorted(line.get_label() for line in ax.lines) == ["layer 0", "layer 2"]
    assert figures.distance_ylim([np.array([-1.0, 2.0])])[0] < -1.0  # negative distances stay visible


def test_attention_panels_share_one_scale_and_one_colour_bar_with_no_empty_panel(monkeypatch, tmp_path):
    saved = _capture(monkeypatch)
    items = [("s1", _span_structure(5, 1.0)), ("s2", _span_structure(8, 4.0)), ("s3", _span_structure(6, 0.2))]
    figures.plot_span_attention(items, tmp_path / "a.png", title="t")
    fig = saved[0]
    images = [image for ax in fig.axes for image in ax.images]
    assert len(images) == 3
    assert len({(im.norm.vmin, im.norm.vmax) for im in images}) == 1  # one colour scale
    expected = figures.attention_scale([s.attention() for _, s in items])
    assert (images[0].norm.vmin, images[0].norm.vmax) == pytest.approx(expected)
    heat_axes = [ax for ax in fig.axes if ax.images]
    colour_bars = [ax for ax in fig.axes if not ax.images]
    assert len(heat_axes) == 3 and len(colour_bars) == 1  # no empty panel, one colour bar
    assert any("white dot" in text.get_text() for legend in fig.legends for text in legend.get_texts())


def test_training_curves_give_each_run_its_own_style(monkeypatch, tmp_path):
    saved = _capture(monkeypatch)
    same = [{"epoch": 1, "valid_ppl": 100.0, "train_ppl": 120.0, "dev_f1": 20.0},
            {"epoch": 2, "valid_ppl": 90.0, "train_ppl": 100.0, "dev_f1": 22.0}]
    figures.plot_training_curves({"PaLM-U": same, "PaLM-S": same, "PaLM-RB": same}, tmp_path / "c.png")
    fig = saved[0]
    lines = fig.axes[0].lines
    assert len(lines) == 3
    assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == 3
    assert len({style["marker"] for style in figures.run_styles(5)}) == 5
    assert [len(ax.lines) for ax in fig.axes] == [3, 3, 3]  # validation ppl, training ppl, dev F1


@pytest.mark.parametrize("valid", [
    [5874.94, 1342.86, 1342.92, 1342.92, 1342.94],  # the toy report: one epoch, PRPN far above the others
    [1342.86, 1342.92, 1342.94],  # (nearly) one value
    [1005.7, 1003.7, 1250.0],  # within a decade, crossing 1000
    [55.0, 61.0, 58.5],
    [80.0, 900.0, 12000.0],  # several decades
])
def test_perplexity_axes_have_labelled_ticks_among_the_data(monkeypatch, tmp_path, valid):
    """The validation-perplexity axis of the toy report had no labelled tick near most of its points
    (matplotlib's log axis labels decades and a few multiples): each curve must lie between labelled
    ticks, with at least two of them in view."""
    saved = _capture(monkeypatch)
    histories = {f"run{k}": [{"epoch": 1, "valid_ppl": v, "train_ppl": 2 * v}] for k, v in enumerate(valid)}
    figures.plot_training_curves(histories, tmp_path / "c.png")
    fig = saved[0]
    fig.canvas.draw()
    for ax, values in ((fig.axes[0], valid), (fig.axes[1], [2 * v for v in valid])):
        bottom, top = ax.get_ylim()
        labelled = sorted(tick.get_loc() for tick in ax.yaxis.get_major_ticks() + ax.yaxis.get_minor_ticks()
                          if tick.label1.get_visible() and tick.label1.get_text()
                          and bottom * (1 - 1e-9) <= tick.get_loc() <= top * (1 + 1e-9))
        assert len(labelled) >= 2, (values, labelled, (bottom, top))
        for value in values:  # a labelled tick at or below it and one at or above it
            assert labelled[0] <= value * (1 + 1e-9) and labelled[-1] >= value * (1 - 1e-9), (value, labelled)


def test_learning_curves_read_steps_and_cpu_minutes_and_fall_back_to_the_clock(monkeypatch, tmp_path):
    """Dev F1 against optimiser steps and training CPU-minutes, from every metrics.jsonl line with dev F1 (epoch
    ends and evaluations inside epochs); a run without CPU seconds is drawn against its wall-clock training
    minutes, and says so."""
    with_cpu = [{"epoch": 1, "mid_epoch": True, "steps": 100, "train_cpu_seconds": 30.0, "dev_f1": 20.0},
                {"epoch": 1, "steps": 160, "train_cpu_seconds": 48.0, "dev_f1": 25.0, "train_seconds": 50.0},
                {"epoch": 2, "steps": 320, "train_cpu_seconds": 96.0, "dev_f1": 31.0, "train_seconds": 49.0}]
    points = figures.learning_curve_points(with_cpu)
    assert points == {"f1": [20.0, 25.0, 31.0], "steps": [100, 160, 320], "minutes": [0.5, 0.8, 1.6], "clock": "cpu"}
    without = [{"epoch": 1, "steps": 160, "dev_f1": 25.0, "train_seconds": 60.0},
               {"epoch": 2, "steps": 320, "dev_f1": 30.0, "train_seconds": 60.0},
               {"epoch": 3, "steps": 480, "valid_ppl": 90.0, "train_seconds": 60.0}]  # no dev F1: no point
    assert figures.learning_curve_points(without) == {"f1": [25.0, 30.0], "steps": [160, 320], "minutes": [1.0, 2.0],
                                                      "clock": "wall"}
    saved = _capture(monkeypatch)
    figures.plot_learning_curves({"C-PCFG": with_cpu, "N-PCFG": without, "none": [{"epoch": 1}]}, tmp_path / "l.png")
    fig = saved[0]
    steps_ax, time_ax = fig.axes
    assert [list(line.get_xdata()) for line in steps_ax.lines] == [[100, 160, 320], [160, 320]]
    assert [list(line.get_xdata()) for line in time_ax.lines] == [[0.5, 0.8, 1.6], [1.0, 2.0]]
    assert [line.get_label() for line in steps_ax.lines] == ["C-PCFG", "N-PCFG (wall clock)"]
    assert "wall clock where marked" in time_ax.get_xlabel()


def test_an_evaluation_inside_an_epoch_sits_at_its_share_of_the_epochs_steps(monkeypatch, tmp_path):
    history = [{"epoch": 1, "mid_epoch": True, "steps": 50, "valid_ppl": 120.0},
               {"epoch": 1, "steps": 200, "valid_ppl": 110.0, "train_ppl": 130.0, "train_tokens": 1000},
               {"epoch": 2, "mid_epoch": True, "steps": 300, "valid_ppl": 100.0},
               {"epoch": 2, "steps": 400, "valid_ppl": 95.0, "train_ppl": 100.0, "train_tokens": 1000},
               {"epoch": 3, "mid_epoch": True, "steps": 500, "valid_ppl": 94.0}]  # its epoch's end not recorded
    assert figures._epoch_positions(history, None) == [0.25, 1.0, 1.5, 2.0, 2.5]
    saved = _capture(monkeypatch)
    figures.plot_training_curves({"run": history}, tmp_path / "c.png")
    valid_ax, train_ax, _ = saved[0].axes
    assert list(valid_ax.lines[0].get_xdata()) == [0.25, 1.0, 1.5, 2.0, 2.5]
    assert list(train_ax.lines[0].get_xdata()) == [1.0, 2.0]  # the training perplexity of the epoch ends only
