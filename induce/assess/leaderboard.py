"""A leaderboard of runs (``induce leaderboard``): every prediction file or run folder under some folders,
scored against one gold under one or more conventions, grouped by model, summarised per model and written
as Markdown, JSON and one figure.

**Which files, which models.** Each folder is searched (recursively, in name order) for run folders (a run is
parsed; its folder is not searched further) and for files whose name matches ``pattern`` (``*.txt`` by
default; the gold file itself is skipped). A file's model and run come from where it lies: in a folder
holding no other matched file, the folder is the run and its parent the model
(``experiments/DIORA/seed35/test.txt``: model ``DIORA``, run ``seed35``); in a folder holding several, the
folder is the model and each file a run (``preds/prpn/seed1.txt``: model ``prpn``, run ``seed1.txt``). A run
folder's model is the model its checkpoint was trained as. A manifest (YAML: ``model: [path or glob, ...]``,
paths relative to the manifest) names the models instead. A file or run folder found twice (given, and found
again in a folder given, or named under two paths or links) is one run, and a note says so; one named as
runs of two models is refused.

**What is reported**, for each convention (its headline figure, the first its script prints, or the figure
``figure`` names: ``corpus_f1``, ``sentence_f1``):

* per run: the figure and its 95% bootstrap interval over sentences, and how its words matched the gold's;
* per model: the mean, sample standard deviation, min and max over its runs, and a 95% interval of the mean
  (:func:`induce.evaluation.bootstrap.mean_interval`: sentences resampled once for all the runs);
* per model with two runs or more: the figure of the ensemble of its runs
  (:func:`induce.assess.hub.ensemble_report`), and, with two models or more, of one ensemble across models in
  which each model's runs share one vote (each run weighted ``1 / runs of its model``);
* a **flag** wherever two conventions' headline figures differ by more than ``flag_above`` points (default 1)
  for the same file: which convention one cites changes the number.
"""
from __future__ import annotations

import fnmatch
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from induce.errors import InduceError, InputError

from .hub import DEFAULT_CONVENTION, ensemble_report
from .sources import EVERY_TOKEN, Source, file_source, run_source

#: Conventions scored when none is named: induce's default and Kim et al.'s script (they differ on trees
#: whose root has a single child, such as S-DIORA's).
DEFAULT_CONVENTIONS = (DEFAULT_CONVENTION, "kim2019")
DEFAULT_PATTERN = "*.txt"
FLAG_ABOVE = 1.0
#: Figures ``--figure`` may name (every convention computes them; :func:`induce.evaluation.engine.figures_of`).
FIGURES = ("corpus_f1", "sentence_f1", "corpus_precision", "corpus_recall", "sentence_precision", "sentence_recall")
OUTPUT_FILES = ("leaderboard.md", "leaderboard.json", "leaderboard.png")


@dataclass
class Entry:
    """One run of the leaderboard: a prediction file or a run folder, the model it belongs to, its label."""

    model: str
    run: str
    path: Path
    is_run: bool = False
    scores: dict = field(default_factory=dict)  # convention -> induce.evaluation.engine.Result
    source: Source | None = None


def _is_run_folder(path: Path) -> bool:
    from induce.training.run_folder import is_run_folder

    return path.is_dir() and is_run_folder(path)


def _run_model(path: Path) -> str:
    """The model a run folder was trained as (its sidecar), else the name of its parent folder."""
    try:
        from induce.inference.runs import read_run_sidecar

        model = read_run_sidecar(path).get("model_name")
    except (InduceError, OSError, ValueError):
        model = None
    return str(model) if model else path.resolve().parent.name


def _files_as_runs(files: Sequence[Path]) -> list[Entry]:
    """Entries of prediction files by where they lie (module docstring); one folder under two spellings
    (``a/b``, ``a/../a/b``) is one folder."""
    from induce.files import file_key

    by_folder: dict = {}
    for path in files:
        by_folder.setdefault(file_key(path.parent) or path.parent.resolve(), []).append(path)
    entries = []
    for paths in by_folder.values():
        folder = paths[0].parent
        resolved = folder.resolve()
        if len(paths) == 1:
            entries.append(Entry(resolved.parent.name or str(resolved.parent), resolved.name or str(folder), paths[0]))
        else:
            entries.extend(Entry(resolved.name or str(folder), path.name, path) for path in sorted(paths))
    return entries


def discover(sources: Sequence[Path], pattern: str = DEFAULT_PATTERN, skip: Sequence[Path] = (),
             notes: list | None = None) -> list[Entry]:
    """The entries under ``sources`` (folders searched, files and run folders taken as given), without the
    files in ``skip`` (the gold). A file or run folder found twice (given and found in a folder given, or
    under two paths or links) is one run: a line for ``notes`` says so. A source that does not exist is an
    :class:`InputError`."""
    from induce.files import distinct_paths, file_key, repeat_note

    skipped = {file_key(p) for p in skip} - {None}
    files, runs, walked = [], [], {}
    for source in map(Path, sources):
        if not source.exists():
            raise InputError("no such file or folder", source)
        if source.is_file():
            files.append(source)
        elif _is_run_folder(source):
            runs.append(source)
        else:
            _walk(source, pattern, files, runs, walked)
    (files, repeated_files), (runs, repeated_runs) = distinct_paths(files), distinct_paths(runs)
    if notes is not None:  # (one path found twice, a folder given inside one given: plainly one, not said)
        notes.extend(repeat_note(repeat, first, "searched once") for repeat, first in walked.pop(None, [])
                     if repeat != first)
        notes.extend(repeat_note(repeat, first) for repeat, first in repeated_runs + repeated_files if repeat != first)
    files = [f for f in files if file_key(f) not in skipped]
    entries = [Entry(_run_model(run), run.name, run, is_run=True) for run in runs]
    return entries + _files_as_runs(files)


def _walk(folder: Path, pattern: str, files: list, runs: list, walked: dict) -> None:
    """The run folders and matching files under ``folder``, into ``runs`` and ``files``; a folder reached
    again (through a link: ``walked`` maps each folder's identity to its path) is searched once, the pair
    recorded under ``walked[None]``."""
    from induce.files import file_key

    identity = file_key(folder)
    if identity in walked:
        walked.setdefault(None, []).append((folder, walked[identity]))
        return
    walked[identity] = folder
    for child in sorted(folder.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_dir():
            if _is_run_folder(child):
                runs.append(child)
            else:
                _walk(child, pattern, files, runs, walked)
        elif child.is_file() and fnmatch.fnmatch(child.name, pattern):
            files.append(child)


def read_manifest(path: Path, notes: list | None = None) -> list[Entry]:
    """Entries named by a manifest: YAML ``{model: [path or glob, ...]}`` (paths relative to the manifest's
    folder; a run folder is parsed). A file a model names twice is one run (a line for ``notes`` says so).
    Each error names the manifest and the model."""
    import yaml

    from induce.files import distinct_paths, repeat_note

    path = Path(path)
    try:
        # every scalar as the text written (names and paths only): a model `on` or `no` stays a name and a path
        # `010` a path, where YAML 1.1 reads True, False and 8
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)  # noqa: S506 -- strings only
    except OSError as err:
        raise InputError(f"cannot read the manifest: {err.strerror or err}", path) from None
    except yaml.YAMLError as err:
        raise InputError(f"not YAML: {str(err).splitlines()[0]}", path) from None
    if not isinstance(data, dict) or not data:
        raise InputError("a manifest maps each model name to a list of prediction files or run folders "
                         "(e.g. `prpn: [runs/prpn-1, runs/prpn-2]`)", path)
    entries = []
    for model, items in data.items():
        items = [items] if isinstance(items, str) else items
        if not isinstance(items, list) or not items or not all(isinstance(item, str) for item in items):
            raise InputError(f"model {model!r}: give a list of paths (files, run folders or globs)", path)
        found = []
        for item in items:
            matched = sorted(path.parent.glob(item)) if any(ch in item for ch in "*?[") else [path.parent / item]
            matched = [m for m in matched if m.exists()]
            if not matched:
                raise InputError(f"model {model!r}: {item} matches no file or run folder", path)
            found.extend(matched)
        found, repeated = distinct_paths(found)
        if notes is not None:
            notes.extend(f"{path}: model {model!r}: {repeat_note(repeat, first)}" for repeat, first in repeated
                         if repeat != first)
        # files of one name (seed1/test.txt, seed2/test.txt) are told apart by their folders
        by_folder = len({f.name for f in found if f.is_file()}) == 1
        for item in found:
            label = item.parent.name if item.is_file() and by_folder else item.name
            entries.append(Entry(str(model), label, item, is_run=_is_run_folder(item)))
    return entries


def _distinct_entries(entries: list[Entry], notes: list) -> list[Entry]:
    """``entries`` with each file or run folder once (the manifest's and the folders' entries may name the
    same file): a repeat under the same model is dropped with a line for ``notes``; under another model it is
    an :class:`InputError` (a run belongs to one model, and would weigh in the ensemble across models twice)."""
    from induce.files import file_key, repeat_note

    kept, first_of = [], {}
    for entry in entries:
        identity = file_key(entry.path)
        first = first_of.get(identity) if identity is not None else None
        if first is None:
            first_of.setdefault(identity, entry)
            kept.append(entry)
        elif first.model == entry.model:
            if entry.path != first.path:
                notes.append(repeat_note(entry.path, first.path))
        else:
            kind = "run folder" if entry.is_run else "file"
            raise InputError(f"this is the same {kind} as {first.path}, a run of model {first.model!r}: a run "
                             f"belongs to one model (here {entry.model!r}); name it once", entry.path)
    return kept


def _unique_labels(entries: list[Entry]) -> None:
    """Make the run labels of each model distinct (``seed1``, ``seed1 (2)``)."""
    seen: dict = {}
    for entry in entries:
        key = (entry.model, entry.run)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            entry.run = f"{entry.run} ({seen[key]})"


def _summary(values: list) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None,
            "min": min(values), "max": max(values), "runs": len(values)}


def build_leaderboard(sources: Sequence[Path] = (), gold=None, corpus=None, split: str = "valid",
                      conventions: Sequence[str] = DEFAULT_CONVENTIONS, manifest: Path | None = None,
                      pattern: str = DEFAULT_PATTERN, pred_format: str = "auto", word_match: str = "normalized",
                      resamples: int = 1000, seed: int = 0, flag_above: float = FLAG_ABOVE,
                      ensembles: bool = True, batch_size: int = 64, device: str = "auto", steps=None,
                      figure: str | None = None, treebank: str | None = None) -> dict:
    """The leaderboard (module docstring) as a JSON-ready dict: ``models`` (per model and convention: the
    summary over runs, its interval, the ensemble), ``runs`` (per run and convention: figure, interval,
    words), ``across_models`` (per convention), ``flags``, and what was scored how. ``treebank``: whose tags the
    gold carries (default: what the prepared corpus recorded, else ptb)."""
    from induce.assess.run_eval import NoProgress
    from induce.evaluation import bootstrap
    from induce.evaluation.conventions import get_convention
    from induce.evaluation.engine import score
    from induce.evaluation.gold import load_gold
    from induce.evaluation.words import check_mode

    steps = steps or NoProgress()
    check_mode(word_match)
    names = list(dict.fromkeys(conventions)) or list(DEFAULT_CONVENTIONS)
    chosen = [get_convention(name) for name in names]
    if figure is not None and figure not in FIGURES:
        raise InduceError(f"--figure {figure}: choose one of {', '.join(FIGURES)} (default: each convention's "
                          "headline figure)")
    keys = {c.name: figure or c.figures[0].key for c in chosen}
    if flag_above < 0 or math.isnan(flag_above):
        raise InduceError(f"--flag-above {flag_above}: give a number of points >= 0")
    repeats: list = []  # what was found twice, said with the notes
    entries = _distinct_entries((read_manifest(manifest, repeats) if manifest is not None else []) + discover(
        sources, pattern, [gold] if gold is not None and Path(gold).is_file() else [], repeats), repeats)
    if not entries:
        where = ", ".join(map(str, sources)) or str(manifest)
        raise InduceError(f"no prediction file ({pattern}) or run folder found in {where}")
    _unique_labels(entries)
    gold_set = load_gold(gold, corpus, split, reading=steps.bar("reading gold trees"), treebank=treebank)
    golds = gold_set.sentences
    for entry in entries:
        entry.source = (run_source(entry.path, golds, EVERY_TOKEN, batch_size, None, device,
                                   steps.bar(f"parsing with {entry.path}"))
                        if entry.is_run else file_source(entry.path, golds, pred_format, steps.bar(f"reading "
                                                                                                  f"{entry.path}")))
    scoring = steps.bar("scoring")
    for done, entry in enumerate(entries):
        for convention in chosen:
            entry.scores[convention.name] = score(golds, entry.source.items or [], convention,
                                                  locations=entry.source.locations, word_match=word_match)
        scoring(done + 1, len(entries))
    models = list(dict.fromkeys(entry.model for entry in entries))
    board = {"gold": gold_set.label, "conventions": [_convention_info(c, keys[c.name]) for c in chosen],
             "word_match": word_match,
             "bootstrap": {"resamples": resamples, "seed": seed, "interval": bootstrap.INTERVAL},
             "flag_above": flag_above, "runs": [], "models": [], "across_models": None, "flags": [],
             "notes": repeats + [note for entry in entries for note in entry.source.notes]}
    for entry in entries:
        board["runs"].append(_run_row(entry, chosen, keys, resamples, seed))
    ensembling = steps.bar("ensembles")
    for done, model in enumerate(models):
        runs = [entry for entry in entries if entry.model == model]
        row = {"model": model, "runs": [entry.run for entry in runs], "by_convention": {}}
        for convention in chosen:
            key = keys[convention.name]
            values = [entry.scores[convention.name].figures[key] for entry in runs]
            stats = _summary(values)
            stats["ci_mean"] = bootstrap.mean_interval([entry.scores[convention.name].sentences for entry in runs],
                                                       key, convention.corpus_f1, resamples, seed)
            stats["ensemble"] = (_ensemble([entry.source for entry in runs], golds, None, convention, key, word_match)
                                 if ensembles and len(runs) > 1 else None)
            row["by_convention"][convention.name] = stats
        board["models"].append(row)
        ensembling(done + 1, len(models))
    board["models"].sort(key=lambda row: -row["by_convention"][names[0]]["mean"])
    if ensembles and len(models) > 1:
        counts = {model: sum(entry.model == model for entry in entries) for model in models}
        weights = [1.0 / counts[entry.model] for entry in entries]
        board["across_models"] = {
            "members": len(entries), "weights": "each run 1 / (runs of its model): one vote per model",
            "by_convention": {c.name: _ensemble([e.source for e in entries], golds, weights, c, keys[c.name],
                                                word_match) for c in chosen}}
    board["flags"] = flags_of(board["runs"], names, flag_above)
    return board


def _ensemble(members: list, golds, weights, convention, key: str, word_match: str) -> float:
    """Figure ``key`` of the ensemble of ``members`` under ``convention`` (:func:`ensemble_report`)."""
    from induce.evaluation.engine import score
    from induce.trees.nodes import from_index_tree

    trees, _ = ensemble_report(members, golds, weights, convention.name, word_match)
    items = [None if tree is None else (from_index_tree(tree), None) for tree in trees]
    return score(golds, items, convention).figures[key]


def _convention_info(convention, key: str) -> dict:
    figure = next((f for f in convention.figures if f.key == key), None)
    return {"name": convention.name, "figure": key, "label": figure.label if figure else key.replace("_", " "),
            "digits": figure.digits if figure else 2, "description": convention.describe()}


def _run_row(entry: Entry, chosen, keys: dict, resamples: int, seed: int) -> dict:
    from induce.evaluation import bootstrap

    row = {"model": entry.model, "run": entry.run, "path": str(entry.path), "kind": "run" if entry.is_run else "file",
           "by_convention": {}}
    for convention in chosen:
        result = entry.scores[convention.name]
        key = keys[convention.name]
        row["by_convention"][convention.name] = {
            "figure": result.figures[key], "ci": bootstrap.confidence_interval(result.sentences, key,
                                                                             convention.corpus_f1, resamples, seed),
            "n_sentences": len(result.sentences), "words": result.words}
    return row


def flags_of(runs: Sequence[dict], names: Sequence[str], flag_above: float) -> list:
    """Every (run, pair of conventions) whose headline figures differ by more than ``flag_above`` points."""
    flags = []
    for row in runs:
        for k, first in enumerate(names):
            for second in names[k + 1:]:
                a, b = row["by_convention"][first]["figure"], row["by_convention"][second]["figure"]
                if abs(a - b) > flag_above:
                    flags.append({"model": row["model"], "run": row["run"], "path": row["path"],
                                  "conventions": [first, second], "figures": [a, b], "difference": a - b})
    return flags


# ---- writing ------------------------------------------------------------------------------------------------


def _fmt(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(board: dict) -> str:
    """The leaderboard as Markdown: the models, the ensemble across models, the runs, the flags."""
    conventions = board["conventions"]
    lines = [f"# Leaderboard against {board['gold']}", ""]
    lines += [f"- `{c['name']}` ({c['label']}): {c['description']}" for c in conventions]
    lines += [f"- words compared with `--word-match {board['word_match']}`; intervals: {board['bootstrap']['interval']}"
              f", {board['bootstrap']['resamples']} resamples of the sentences, seed {board['bootstrap']['seed']}", ""]
    header = ["model", "runs"]
    for c in conventions:
        header += [f"{c['name']}: mean ± sd [95% CI of the mean]", "min – max", "ensemble of its runs"]
    lines += ["## Models", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in board["models"]:
        cells = [row["model"], str(len(row["runs"]))]
        for c in conventions:
            stats, digits = row["by_convention"][c["name"]], c["digits"]
            low, high = stats["ci_mean"]
            sd = f" ± {_fmt(stats['sd'], digits)}" if stats["sd"] is not None else ""
            cells += [f"{_fmt(stats['mean'], digits)}{sd} [{_fmt(low, digits)}, {_fmt(high, digits)}]",
                      f"{_fmt(stats['min'], digits)} – {_fmt(stats['max'], digits)}", _fmt(stats["ensemble"], digits)]
        lines.append("| " + " | ".join(cells) + " |")
    if board["across_models"]:
        across = board["across_models"]
        values = ", ".join(f"{c['name']} {_fmt(across['by_convention'][c['name']], c['digits'])}" for c in conventions)
        lines += ["", f"Ensemble across models ({across['members']} runs, {across['weights']}): {values}."]
    flagged = {(f["model"], f["run"]) for f in board["flags"]}
    header = ["model", "run"] + [f"{c['name']} [95% CI]" for c in conventions] + ["words rewritten", "flag"]
    lines += ["", "## Runs", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in board["runs"]:
        cells = [row["model"], row["run"]]
        for c in conventions:
            entry, digits = row["by_convention"][c["name"]], c["digits"]
            cells.append(f"{_fmt(entry['figure'], digits)} [{_fmt(entry['ci'][0], digits)}, "
                         f"{_fmt(entry['ci'][1], digits)}]")
        words = row["by_convention"][conventions[0]["name"]]["words"]
        cells.append(_words_cell(words))
        cells.append("⚑" if (row["model"], row["run"]) in flagged else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"## Flags: conventions more than {board['flag_above']:g} point apart on the same file", ""]
    if not board["flags"]:
        lines.append("None.")
    for flag in board["flags"]:
        (a, b), (x, y) = flag["conventions"], flag["figures"]
        lines.append(f"- {flag['model']} / {flag['run']} (`{flag['path']}`): {a} {x:.2f}, {b} {y:.2f} "
                     f"({flag['difference']:+.2f})")
    if board["notes"]:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in board["notes"]]
    return "\n".join(lines) + "\n"


def _words_cell(words: dict | None) -> str:
    if not words:
        return "-"
    if not words["words_rewritten"]:
        return "none"
    kinds = ", ".join(f"{kind} {entry['count']:,}" for kind, entry in words["rewritings"].items())
    return f"{words['words_rewritten']:,} of {words['words_compared']:,} ({kinds})"


def plot(board: dict, path: Path) -> Path:
    """One figure: per model (rows, best first), each run's figure as a dot, the mean with the 95% interval of
    the mean as a bar, and the ensemble of its runs as a star; one colour per convention."""
    from induce.report.figures import pyplot, save_figure

    plt = pyplot()
    models = [row["model"] for row in board["models"]]
    conventions = board["conventions"]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.55 * len(models) * max(1, len(conventions)) ** 0.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    step = 0.7 / max(1, len(conventions))
    for k, convention in enumerate(conventions):
        name, colour = convention["name"], colours[k % len(colours)]
        offset = (k - (len(conventions) - 1) / 2) * step
        for y, row in enumerate(board["models"]):
            stats = row["by_convention"][name]
            ys = y + offset
            runs = [r["by_convention"][name]["figure"] for r in board["runs"] if r["model"] == row["model"]]
            ax.scatter(runs, [ys] * len(runs), s=14, color=colour, alpha=0.6, zorder=2,
                       label=f"{name}: runs" if y == 0 else None)
            low, high = stats["ci_mean"]
            ax.errorbar([stats["mean"]], [ys], xerr=[[stats["mean"] - low], [high - stats["mean"]]], fmt="D",
                        color=colour, markersize=5, capsize=3, zorder=3,
                        label=f"{name}: mean, 95% CI" if y == 0 else None)
            if stats["ensemble"] is not None:
                ax.scatter([stats["ensemble"]], [ys], marker="*", s=90, color=colour, edgecolor="black",
                           linewidth=0.5, zorder=4, label=f"{name}: ensemble" if y == 0 else None)
    ax.set_yticks(range(len(models)))
    ax.set_yticklabels(models)
    ax.invert_yaxis()
    ax.set_xlabel(" / ".join(dict.fromkeys(f"{c['label']} ({c['name']})" for c in conventions)))
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(f"Leaderboard against {Path(board['gold']).name}", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def write_leaderboard(board: dict, out: Path, inputs: Sequence[Path] = ()) -> list[Path]:
    """Write ``leaderboard.md``, ``leaderboard.json`` and ``leaderboard.png`` into ``out`` (created) as one
    result (:func:`induce.files.output_set`: all three, or on an error none, the old ones left whole); none
    of them may be an input. Returns the paths."""
    from induce.files import check_not_input, check_output_file, output_set, strict_json

    out = Path(out)
    paths = [out / name for name in OUTPUT_FILES]
    for path in paths:
        check_output_file(path, "--out")
        check_not_input(path, {"an input": [p for p in inputs if Path(p).is_file()]}, "--out")
    with output_set() as outputs:
        outputs.write(paths[0], markdown(board))
        outputs.write(paths[1], strict_json(board, indent=1) + "\n")
        plot(board, outputs.path(paths[2]))
    return paths
