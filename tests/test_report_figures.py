"""The report's plots: data choices that keep them honest (distance bars from 0, every layer drawn,
one colour scale and bar for all attention panels, no empty panel, distinct styles per run)."""
from __future__ import annotations

import numpy as np
import pytest

from induce import figures
from induce.show import SentenceStructure

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
