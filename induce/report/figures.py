"""PNG figures of the reproduction report and of ``induce show`` (matplotlib, Agg backend).

* :func:`plot_training_curves` — validation / training perplexity and dev F1 per epoch of each run
  (from its ``metrics.jsonl``);
* :func:`plot_learning_curves` — dev F1 against optimiser steps and against training CPU-minutes;
* :func:`plot_branching` — shares of left / right / other binary / n-ary splits per model and gold;
* :func:`plot_trees` — one sentence's gold tree and induced trees side by side, induced constituents
  coloured by whether the gold tree has them;
* :func:`plot_span_attention` — PaLM's span attention (span end x span start) for some sentences;
* :func:`plot_distances` — ON-LSTM / PRPN syntactic distances per word for some sentences.
* :func:`plot_span_marginals` — a grammar's span marginals (span start x span end) with the decoded tree's spans;
* :func:`plot_structure` — one sentence's numbers as its parser kind draws them (``induce show attention``).

The three sentence plots are registered as the built-in parser kinds' ``plot``
(:meth:`induce.trees.kinds.ParserKind.set_drawing`) when this module is imported.

Every function writes the file (creating its folder), closes the figure and returns the path.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence, Union

import nltk
import numpy as np

from induce.trees.kinds import DISTANCE, GRAMMAR, SPAN
from induce.trees.nodes import tree_spans

PathLike = Union[str, Path]
#: Colours of induced constituents that the gold tree has / lacks, and of uncounted nodes.
MATCH, MISS, NEUTRAL = "#1a9850", "#d73027", "#555555"


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def image_formats() -> list[str]:
    """File name suffixes (without the dot) matplotlib can write a figure as: png, svg, pdf, ..."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return sorted(FigureCanvasAgg.get_supported_filetypes())


def check_image_path(path: PathLike, option: str) -> None:
    """Refuse, before any work, an output path that is not an image file name matplotlib can write
    or that cannot be written (:func:`induce.files.check_output_file`); ``option`` names the flag."""
    from induce.errors import InputError
    from induce.files import check_output_file

    suffix = Path(path).suffix.lower().lstrip(".")
    formats = image_formats()
    if suffix not in formats:
        what = f"'.{suffix}' is not an image format" if suffix else "no file name suffix to tell the image format"
        others = ", .".join(f for f in formats if f != "png")
        raise InputError(f"{option}: {what}; give a name ending in .png (or .{others})", path)
    check_output_file(path, option)


def save_figure(fig, path: PathLike, dpi: int = 100) -> Path:
    """Write ``fig`` to ``path`` in the format its suffix names (parent folders created, with
    :func:`induce.files.open_output`), close it, return the path."""
    from induce.files import open_output

    plt = pyplot()
    path = Path(path)
    try:
        with open_output(path, binary=True) as handle:
            fig.savefig(handle, dpi=dpi, format=path.suffix.lstrip(".").lower() or None)
    finally:
        plt.close(fig)
    return path


def _finish_grid(fig, axes, n_used: int, title: str, path: PathLike) -> Path:
    """Remove the unused panels of a subplot grid (no empty panel is left), add the title, lay out
    and save."""
    for ax in list(axes.flat)[n_used:]:
        fig.delaxes(ax)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(max_cols, max(1, n))
    return math.ceil(max(1, n) / cols), cols


# ------------------------------------------------------------------------------------------ curves


def _epoch_positions(history: list, epoch_tokens: Optional[int]) -> list[float]:
    """x of each record: its epoch number; a partial epoch (time budget) sits at ``epoch - 1 + share``,
    the share of an epoch's tokens it trained (``epoch_tokens``, else the largest complete epoch's); an
    evaluation inside an epoch (``mid_epoch``) at the share of its epoch's optimiser steps done (its ``steps``
    against those of the epoch's end, or of the longest complete epoch when its end is not recorded)."""
    full = max((int(r.get("train_tokens", 0)) for r in history if not r.get("partial") and not r.get("mid_epoch")),
               default=0) or epoch_tokens
    ends = {r["epoch"]: r["steps"] for r in history
            if not r.get("mid_epoch") and not r.get("partial") and isinstance(r.get("steps"), (int, float))}
    lengths = [ends[e] - ends.get(e - 1, 0) for e in ends if e == 1 or e - 1 in ends]
    xs = []
    for record in history:
        x = float(record["epoch"])
        if record.get("mid_epoch"):
            start = ends.get(record["epoch"] - 1, 0)
            length = ends[record["epoch"]] - start if record["epoch"] in ends else max(lengths, default=0)
            steps = record.get("steps")
            if isinstance(steps, (int, float)) and length > 0:
                x = record["epoch"] - 1 + min(1.0, max(0.0, (steps - start) / length))
        elif record.get("partial") and full:
            x = record["epoch"] - 1 + min(1.0, int(record.get("train_tokens", 0)) / full)
        xs.append(x)
    return xs


#: Per run: line style and marker (with the colour), so that runs whose curves coincide stay visible.
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def run_styles(n: int) -> list[dict]:
    """``n`` distinct (colour, line style, marker) combinations for :func:`plot_training_curves`."""
    plt = pyplot()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [{"color": colours[k % len(colours)], "linestyle": LINESTYLES[k % len(LINESTYLES)],
             "marker": MARKERS[k % len(MARKERS)]} for k in range(n)]


def plot_training_curves(histories: dict, path: PathLike, epoch_tokens: Union[None, int, dict] = None) -> Path:
    """``histories``: label -> list of ``metrics.jsonl`` records. Three panels, per epoch: validation
    perplexity, training perplexity (both log scale) and dev F1 (sentence F1 of the monitored dev
    sentences). Each run has its own colour, line style and marker, so that coinciding curves (PaLM-U /
    -S / -RB early on) stay distinguishable. A partial last epoch (time budget) is a hollow marker at
    the share of the epoch it trained (``epoch_tokens``: the tokens one epoch predicts, metrics.jsonl's
    ``train_tokens`` of a whole epoch; one number, or one per label)."""
    plt = pyplot()
    fig, (ax_valid, ax_train, ax_f1) = plt.subplots(1, 3, figsize=(15, 4.4))
    runs = [(label, history) for label, history in histories.items() if history]
    any_f1 = False
    plotted: dict = {}  # axis -> the values drawn on it
    def tokens_of(label):
        return epoch_tokens.get(label) if isinstance(epoch_tokens, dict) else epoch_tokens

    for (label, history), style in zip(runs, run_styles(len(runs))):
        epochs = _epoch_positions(history, tokens_of(label))
        colour = style["color"]
        hollow = ["none" if record.get("partial") else colour for record in history]
        series = [(ax_valid, [record.get("valid_ppl", math.nan) for record in history]),
                  (ax_train, [record.get("train_ppl", math.nan) for record in history])]
        if any("dev_f1" in record for record in history):
            any_f1 = True
            series.append((ax_f1, [record.get("dev_f1", math.nan) for record in history]))
        for ax, values in series:
            plotted.setdefault(ax, []).extend(values)
            # the records that have this value (an evaluation inside an epoch has no training perplexity)
            kept = [k for k, value in enumerate(values) if isinstance(value, (int, float)) and math.isfinite(value)]
            xs, ys = [epochs[k] for k in kept], [values[k] for k in kept]
            ax.plot(xs, ys, linestyle=style["linestyle"], color=colour, linewidth=1.4, label=label)
            ax.scatter(xs, ys, marker=style["marker"], facecolors=[hollow[k] for k in kept], edgecolors=colour, s=36,
                       zorder=3)
    from matplotlib.ticker import MaxNLocator

    last = max((x for label, h in histories.items() for x in _epoch_positions(h, tokens_of(label))), default=1.0)
    for ax, title, ylabel in ((ax_valid, "Validation perplexity", "perplexity (log scale)"),
                              (ax_train, "Training perplexity", "perplexity (log scale)"),
                              (ax_f1, "Unsupervised parsing during training", "dev sentence F1 (<= 40 words)")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.set_xlim(0, max(1.0, math.ceil(last)) + 0.25)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in (ax_valid, ax_train):
        perplexity_axis(ax, plotted.get(ax, []))
    if not any_f1:
        ax_f1.text(0.5, 0.5, "no dev F1 logged", ha="center", va="center", transform=ax_f1.transAxes)
    handles, labels = ax_valid.get_legend_handles_labels()
    if handles:
        from matplotlib.lines import Line2D

        proxies = [Line2D([], [], color=style["color"], linestyle=style["linestyle"], marker=style["marker"])
                   for style in run_styles(len(runs))]
        fig.legend(proxies, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    rows_of_legend = math.ceil(len(labels) / 6) if handles else 0
    fig.tight_layout(rect=(0, 0.04 + 0.05 * rows_of_legend if handles else 0, 1, 1))
    return save_figure(fig, path)


def learning_curve_points(history: list) -> dict:
    """From one run's ``metrics.jsonl`` records, the points of its learning curve: every record with ``dev_f1``
    (an epoch's end, or an evaluation inside an epoch) gives ``f1``, ``steps`` (optimiser steps of the whole run,
    None when the record lacks them) and ``minutes``: training CPU-minutes (cumulative ``train_cpu_seconds``), or,
    when a record lacks them, the wall-clock training minutes of the epochs so far (``train_seconds`` summed, an
    evaluation inside an epoch placed at its epoch's start) with ``clock = "wall"`` saying so."""
    f1, steps, cpu, wall = [], [], [], []
    done = 0.0
    for record in history:
        if not record.get("mid_epoch"):
            done += float(record.get("train_seconds") or 0.0)
        value = record.get("dev_f1")
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        f1.append(float(value))
        steps.append(record.get("steps") if isinstance(record.get("steps"), (int, float)) else None)
        seconds = record.get("train_cpu_seconds")
        cpu.append(float(seconds) / 60 if isinstance(seconds, (int, float)) else None)
        wall.append(done / 60)
    clock = "cpu" if f1 and all(value is not None for value in cpu) else "wall"
    return {"f1": f1, "steps": steps, "minutes": cpu if clock == "cpu" else wall, "clock": clock}


def plot_learning_curves(histories: dict, path: PathLike, title: str = "") -> Path:
    """``histories``: label -> list of ``metrics.jsonl`` records. Two panels: dev F1 (the monitor set) against
    optimiser steps and against training CPU-minutes (:func:`learning_curve_points`; a run without CPU time is
    drawn against wall-clock minutes, its legend label saying so). Runs without any dev F1 are left out."""
    plt = pyplot()
    fig, (ax_steps, ax_time) = plt.subplots(1, 2, figsize=(11, 4.2))
    runs = [(label, learning_curve_points(history)) for label, history in histories.items()]
    runs = [(label, points) for label, points in runs if points["f1"]]
    clocks = {points["clock"] for _, points in runs}
    for (label, points), style in zip(runs, run_styles(len(runs))):
        shown = label + (" (wall clock)" if points["clock"] == "wall" and len(clocks) > 1 else "")
        pairs = [(x, y) for x, y in zip(points["steps"], points["f1"]) if x is not None]
        for ax, xs_ys in ((ax_steps, pairs), (ax_time, list(zip(points["minutes"], points["f1"])))):
            if not xs_ys:
                continue
            xs, ys = zip(*xs_ys)
            ax.plot(xs, ys, linestyle=style["linestyle"], color=style["color"], marker=style["marker"],
                    markersize=4, linewidth=1.4, label=shown)
    time_label = ("training CPU-minutes" if clocks == {"cpu"} else "training minutes, wall clock (no CPU time recorded)"
                  if clocks == {"wall"} else "training CPU-minutes (wall clock where marked)")
    for ax, xlabel in ((ax_steps, "optimiser steps"), (ax_time, time_label)):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("dev sentence F1 (monitor set)")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
    if not runs:
        ax_steps.text(0.5, 0.5, "no dev F1 logged", ha="center", va="center", transform=ax_steps.transAxes)
    else:
        ax_steps.legend(fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def perplexity_axis(ax, values: Sequence[float]) -> None:
    """Log scale with labelled ticks among the data: over a decade or more, the powers of ten and
    2, 3, 5 times them, the limits on the ones just outside the data; within less than a decade (a
    short or early run: matplotlib's log axis then often has no labelled tick in the data's range at
    all), four to six round values, with the limits put on the round values just outside the data,
    so that every point lies between labelled ticks."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullLocator

    ax.set_yscale("log")
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    label = FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 10 else f"{value:g}")
    if not finite:
        return
    low, high = min(finite), max(finite)
    # 1, 2, 3, 5 times the powers of ten around the data: where a log axis puts its labels
    marks = sorted(m * 10.0**k for k in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 2)
                   for m in (1, 2, 3, 5))
    if high / low >= 10:
        ax.set_ylim(max(t for t in marks if t <= low), min(t for t in marks if t >= high))
        ax.yaxis.set_major_locator(LogLocator(base=10))
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 3.0, 5.0)))
        ax.yaxis.set_major_formatter(label)
        ax.yaxis.set_minor_formatter(label)
        return
    if high / low < 1.02:  # (nearly) one value: a band of +-5% around it
        low, high = low / 1.05, high * 1.05
    ticks = [t for t in MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high) if t > 0]
    # the round value just below the data (a 1-2-3-5 mark when the linear ticks reach down to 0 only)
    bottom = max([t for t in ticks if t <= low] or [t for t in marks if t <= low])
    top = min(t for t in ticks if t >= high)
    ax.set_ylim(bottom, top)
    ax.yaxis.set_major_locator(FixedLocator(sorted({bottom, *(t for t in ticks if bottom <= t <= top)})))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(label)


# --------------------------------------------------------------------------------------- branching


def plot_branching(rows: Sequence[tuple], path: PathLike, title: str = "") -> Path:
    """``rows``: ``(label, % left, % right, % other binary, % n-ary)``; one stacked horizontal bar each."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.6))
    labels = [row[0] for row in rows]
    parts = [("left", "#4575b4"), ("right", "#d73027"), ("other binary", "#fdae61"), ("n-ary (gold only)", "#999999")]
    left = np.zeros(len(rows))
    y = np.arange(len(rows))[::-1]
    for k, (name, colour) in enumerate(parts):
        values = np.array([row[1 + k] if row[1 + k] is not None else 0.0 for row in rows], dtype=float)
        ax.barh(y, values, left=left, color=colour, label=name, edgecolor="white")
        for yi, value, start in zip(y, values, left):
            if value >= 6:
                ax.text(start + value / 2, yi, f"{value:.0f}", ha="center", va="center", fontsize=8, color="white")
        left += values
    ax.set_yticks(y)
    ax.set_yticklabels(labels)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of splits of spans longer than 2 words")
    ax.legend(ncol=4, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.set_title(title or "Branching (PaLM Table 4 statistics)", pad=22)
    fig.tight_layout()
    return save_figure(fig, path)


# ------------------------------------------------------------------------------------------- trees


def _simplify(tree):
    """``(label, [children])`` or a leaf string; unary nodes and pre-terminals collapse into their child
    (a collapsed node keeps the upper label when its child is a constituent)."""
    if not isinstance(tree, nltk.Tree):
        return tree
    children = [_simplify(child) for child in tree]
    if len(children) == 1:
        child = children[0]
        if isinstance(child, tuple):
            return (tree.label(), child[1])
        return child
    return (tree.label(), children)


def _draw_tree(ax, tree: nltk.Tree, gold_spans: Optional[set], show_labels: bool, title: str) -> None:
    root = _simplify(tree)
    n_leaves = len(tree.leaves())
    segments, nodes, words = [], [], []
    counter = [0]

    def rec(node):
        if not isinstance(node, tuple):
            x = counter[0]
            counter[0] += 1
            words.append((x, node))
            return x, 0.0, x, x + 1
        placed = [rec(child) for child in node[1]]
        x = sum(p[0] for p in placed) / len(placed)
        y = max(p[1] for p in placed) + 1.0
        start, end = placed[0][2], placed[-1][3]
        for cx, cy, _, _ in placed:
            segments.append(((x, y), (cx, cy)))
        nodes.append((x, y, node[0], start, end))
        return x, y, start, end

    if isinstance(root, tuple):
        rec(root)
    else:
        words.append((0, root))
    for (x0, y0), (x1, y1) in segments:
        ax.plot([x0, x1], [y0, y1], color="#888888", linewidth=1)
    for x, y, label, start, end in nodes:
        counted = end - start >= 2 and not (start == 0 and end == n_leaves)
        colour = NEUTRAL
        if gold_spans is not None and counted:
            colour = MATCH if (start, end) in gold_spans else MISS
        ax.plot([x], [y], "o", color=colour, markersize=4)
        if show_labels and label:
            ax.text(x, y + 0.15, label, ha="center", va="bottom", fontsize=7, color="#333333")
    for x, word in words:
        ax.text(x, -0.25, word, rotation=55, ha="right", va="top", fontsize=8)
    height = max((node[1] for node in nodes), default=1.0)
    ax.set_xlim(-1, max(n_leaves, 2))
    ax.set_ylim(-0.3, height + 0.8)
    ax.set_title(title, fontsize=9)
    ax.axis("off")


def plot_trees(panels: Sequence[tuple], path: PathLike, title: str = "", gold: Optional[nltk.Tree] = None) -> Path:
    """``panels``: ``(label, tree)`` drawn side by side (gold first, if given as ``gold``, with its
    labels). Induced constituents that count for F1 are green when the gold tree has them, red otherwise."""
    plt = pyplot()
    items = ([("gold", gold)] if gold is not None else []) + list(panels)
    rows, cols = _grid(len(items))
    width = max(4.0, 0.42 * max(len(t.leaves()) for _, t in items))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, 3.4 * rows), squeeze=False)
    gold_spans = tree_spans(gold) if gold is not None else None  # (start, end), end exclusive
    for ax, (label, tree) in zip(axes.flat, items):
        is_gold = gold is not None and tree is gold
        _draw_tree(ax, tree, None if is_gold else gold_spans, show_labels=is_gold, title=label)
    return _finish_grid(fig, axes, len(items), title, path)


# ------------------------------------------------------------------------------- attention, distances


def _row_grid(n: int, max_cols: int = 4) -> tuple[int, int]:
    """Rows and columns for ``n`` panels: one row up to ``max_cols`` panels (so no panel is left empty
    for the usual 1-4 sentences), else rows of ``max_cols``."""
    cols = min(max_cols, max(1, n))
    return math.ceil(max(1, n) / cols), cols


def _heat_map_grid(items: Sequence[tuple]):
    """``(fig, axes [rows, cols])``: one square panel per ``(label, SentenceStructure)``, sized by the longest
    sentence, room on the right for one colour bar."""
    plt = pyplot()
    rows, cols = _row_grid(len(items))
    size = max(3.5, 0.33 * max(len(s.words) for _, s in items) + 1.5)
    return plt.subplots(rows, cols, figsize=(size * cols + 1.2, size * rows + 0.9), squeeze=False)


def _finish_heat_maps(fig, axes, n_used: int, title: str, path: PathLike, image, dot_label: str, bar_label: str,
                      extend: str = "neither") -> Path:
    """Remove the unused panels, add the title, the legend of the white dots and one colour bar (of
    ``image``, the last panel's: every panel shares its scale), lay out and save."""
    from matplotlib.lines import Line2D

    for ax in list(axes.flat)[n_used:]:
        fig.delaxes(ax)
    if title:
        fig.suptitle(title, fontsize=10)
    dot = Line2D([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="black",
                 label=dot_label)
    fig.legend(handles=[dot], loc="lower center", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 0.9, 1))
    if image is not None:
        bar_ax = fig.add_axes((0.92, 0.2, 0.015, 0.6))
        fig.colorbar(image, cax=bar_ax, label=bar_label, extend=extend)
    return save_figure(fig, path)


def attention_scale(matrices: Sequence[np.ndarray]) -> tuple[float, float]:
    """One colour scale for every panel: 0 to the largest weight outside the first row of any
    matrix (the first row's single span always has weight 1 and would wash out the rest)."""
    top = max((float(m[1:].max()) for m in matrices if len(m) > 1), default=1.0)
    return 0.0, max(top, 1e-6)


def plot_span_attention(items: Sequence[tuple], path: PathLike, title: str = "") -> Path:
    """``items``: ``(label, SentenceStructure)`` of a span model; heat map ``A[j, i]`` = attention of
    the span ``[i, j]`` among the spans ending at ``j`` (rows: span end, columns: span start). Every
    panel uses one colour scale (:func:`attention_scale`) with one colour bar; a white dot marks each
    row's most attended span start, as the legend says."""
    from matplotlib.colors import Normalize

    matrices = [structure.attention() for _, structure in items]
    vmin, vmax = attention_scale(matrices)
    norm = Normalize(vmin=vmin, vmax=vmax)
    fig, axes = _heat_map_grid(items)
    image = None
    for ax, (label, structure), matrix in zip(axes.flat, items, matrices):
        n = len(structure.words)
        image = ax.imshow(matrix, cmap="viridis", norm=norm)
        best = matrix.argmax(1)
        ax.scatter(best, np.arange(n), s=14, c="white", edgecolors="black", linewidths=0.4, marker="o")
        ax.set_xticks(range(n))
        ax.set_xticklabels(structure.words, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(n))
        ax.set_yticklabels(structure.words, fontsize=7)
        ax.set_xlabel("span start")
        ax.set_ylabel("span end")
        ax.set_title(label, fontsize=9)
    return _finish_heat_maps(fig, axes, len(items), title, path, image,
                             dot_label="white dot: the span start this row (span end) attends to most",
                             bar_label="attention weight (one scale for all panels; the first row's 1.0 is clipped)",
                             extend="max" if vmax < 1.0 else "neither")


def distance_ylim(arrays: Sequence[np.ndarray]) -> tuple[float, float]:
    """y range of a distance plot: from 0 (or the lowest value, when some are negative) to a little
    above the highest, so bar heights are proportional to the distances."""
    low = min(0.0, min(float(np.min(a)) for a in arrays))
    high = max(0.0, max(float(np.max(a)) for a in arrays))
    span = (high - low) or 1.0
    return (low - 0.05 * span if low < 0 else 0.0), high + 0.08 * span


def plot_distances(items: Sequence[tuple], path: PathLike, title: str = "") -> Path:
    """``items``: ``(label, SentenceStructure)`` of a distance model; bars (from 0): the distance
    before each word that the parser reads (the greedy decoder splits at the largest); lines: every
    other layer's distances when the model has several (ON-LSTM)."""
    plt = pyplot()
    rows, cols = len(items), 1
    width = max(6.0, 0.5 * max(len(s.words) for _, s in items) + 2)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, 2.9 * rows), squeeze=False)
    for ax, (label, structure) in zip(axes.flat, items):
        n = len(structure.words)
        x = np.arange(n)
        values = np.asarray(structure.distances, dtype=float)
        layers = (np.asarray(structure.layer_distances, dtype=float)
                  if structure.layer_distances is not None else np.zeros((0, n)))
        parsed_layer = structure.distance_layer
        layer_note = f" (layer {parsed_layer})" if parsed_layer is not None and len(layers) > 1 else ""
        bar_label = "parsed distances" + layer_note
        ax.bar(x, values, color="#4575b4", alpha=0.85, label=bar_label)
        for layer, row in enumerate(layers):
            if len(layers) > 1 and layer != parsed_layer:
                ax.plot(x, row, marker=".", linewidth=1.2, label=f"layer {layer}")
        ax.set_ylim(*distance_ylim([values, *layers]))
        ax.legend(fontsize=7, loc="upper right")
        ax.set_xticks(x)
        ax.set_xticklabels(structure.words, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("distance")
        ax.set_title(label, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    return _finish_grid(fig, axes, len(items), title, path)


def plot_span_marginals(items: Sequence[tuple], path: PathLike, title: str = "") -> Path:
    """``items``: ``(label, SentenceStructure)`` of a grammar (the neural PCFGs); heat map, upper triangle:
    row ``i`` (span start, the fencepost before word ``i``) x column ``j`` (span end, the fencepost after word
    ``j``) is the posterior probability that words ``i .. j`` form a constituent (``span_marginals[i, j + 1]``;
    the one-word spans on the diagonal and the whole sentence top right are 1 in every tree). A white dot marks
    each constituent of two words or more of the decoded tree. One colour scale, 0 to 1."""
    from matplotlib.colors import Normalize

    norm = Normalize(vmin=0.0, vmax=1.0)
    fig, axes = _heat_map_grid(items)
    image = None
    for ax, (label, structure) in zip(axes.flat, items):
        n = len(structure.words)
        marginals = np.asarray(structure.span_marginals, dtype=float)[:n, 1 : n + 1]  # [start i, last word j]
        upper = np.triu(np.ones((n, n), dtype=bool))
        image = ax.imshow(np.where(upper, marginals, np.nan), cmap="viridis", norm=norm)
        spans = sorted(structure.word_spans())
        ax.scatter([end - 1 for _, end in spans], [start for start, _ in spans], s=22, c="white",
                   edgecolors="black", linewidths=0.5, marker="o")
        ax.set_xticks(range(n))
        ax.set_xticklabels([f"{word} |{j + 1}" for j, word in enumerate(structure.words)], rotation=60, ha="right",
                           fontsize=7)
        ax.set_yticks(range(n))
        ax.set_yticklabels([f"{i}| {word}" for i, word in enumerate(structure.words)], fontsize=7)
        ax.set_xlabel("span end (fencepost after this word)")
        ax.set_ylabel("span start (fencepost before this word)")
        ax.set_title(label, fontsize=9)
    return _finish_heat_maps(fig, axes, len(items), title, path, image,
                             dot_label="white dot: a constituent (2+ words) of the decoded tree",
                             bar_label="span marginal: P(the words form a constituent | sentence)")


def plot_structure(structure, path: PathLike, title: Optional[str] = None) -> Path:
    """PNG of one sentence's numbers (an :class:`induce.inference.show.SentenceStructure`) drawn by its parser
    kind's ``plot``: the span attention (PaLM) or the span marginals (heat maps), or the distances (ON-LSTM,
    PRPN; bars). An :class:`~induce.errors.InduceError` for a kind without a drawing."""
    plot = structure.kind.drawing("plot", structure.model_name)
    return plot([(title or structure.model_name, structure)], path)


DISTANCE.set_drawing(plot=plot_distances)
SPAN.set_drawing(plot=plot_span_attention)
GRAMMAR.set_drawing(plot=plot_span_marginals)
