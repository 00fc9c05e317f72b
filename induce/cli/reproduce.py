"""`induce reproduce`: the whole pipeline, corpus to report (logic: :mod:`induce.reproduce`, :mod:`induce.report`)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from induce.cli import comma_ints

#: Exit status while a chunked reproduction is not finished (EX_TEMPFAIL: "try again").
INCOMPLETE_EXIT = 75
#: The default output folder; its runs (results/runs) and corpora (./corpora) are where the other commands look.
DEFAULT_OUT = Path("results")


def default_corpora_dir(out: Path) -> Path:
    """Where a reproduction into ``out`` keeps its prepared corpora: ``corpora/`` for the default output
    (the other commands find them there), else ``OUT/corpora`` (the whole reproduction in one folder)."""
    return Path("corpora") if Path(out) == DEFAULT_OUT else Path(out) / "corpora"


def reproduce_command(
    profile: str = typer.Option(
        "auto", "--profile", "-p", help="auto (default: gpu when torch sees a CUDA device, else cpu), gpu (paper-size "
        "models, about 25 minutes of one H100), cpu (small models and paper-size grammars, 75-90 minutes on 2 idle "
        "CPU cores), cpu-long (cpu over four seeds, PRPN and the PaLM models trained longer: about 12-13 hours), "
        "paper (the papers' recipes, days of GPU time, in resumable chunks), toy (seconds per model), or a folder "
        "with a profile.yaml."
    ),
    seeds: Optional[str] = typer.Option(None, "--seeds",
                                        help="Comma-separated training seeds (default: the profile's)."),
    models: Optional[str] = typer.Option(None, "--models", help="Comma-separated subset of the profile's models."),
    data: Optional[Path] = typer.Option(None, "--data", help="Data root for the default corpus (else $INDUCE_DATA, "
                                                             "corpora/, NLTK)."),
    corpus: Optional[Path] = typer.Option(None, "--corpus",
                                          help="Use this prepared corpus instead of the default one."),
    corpora_dir: Optional[Path] = typer.Option(
        None, "--corpora-dir", help="Where prepared corpora are (and go). Default: corpora/ with the default --out "
        "(where the other commands look), else OUT/corpora, so that a reproduction elsewhere is all in its folder."
    ),
    out: Path = typer.Option(DEFAULT_OUT, "--out", "-o", help="Output folder: REPORT.md, results.json, figures/, "
                                                              "runs/, "
                             "eval/ (and corpora/ unless it is the default, results). An existing folder is "
                             "continued when it holds a reproduction, refused when it holds other files or another "
                             "reproduction is writing into it (OUT/reproduce.lock)."),
    split: str = typer.Option("auto", "--split", help="Split of the final figures: auto (test, WSJ 23, when the "
                              "corpus has it, else valid), valid (dev, WSJ 22) or test. Models are selected on dev."),
    steps_per_model: Optional[int] = typer.Option(
        None, "--steps-per-model", min=1, help="Optimiser steps per model and seed (train.max_steps), instead of the "
        "profile's budgets: the same training on every machine (default: the profile's)."
    ),
    time_per_model: Optional[str] = typer.Option(
        None, "--time-per-model", help="Training time per model and seed, e.g. 20s, 6m (train.time_budget), instead "
        "of the profile's budgets: the clock, so the figures then depend on the machine's speed and load (the report "
        "says so)."
    ),
    chunk: Optional[str] = typer.Option(
        None, "--chunk", help="Stop training after this much time (e.g. 3h), every run at a resumable checkpoint; the "
                              "same "
        "command continues (exit status 75 until done). Default: the profile's (paper: 3h)."
    ),
    lm_text: Optional[Path] = typer.Option(
        None, "--lm-text", help="Folder with Mikolov's ptb.valid.txt (ptb.test.txt): perplexity on the text the "
                                "published "
        "figures use (default: ptb_lm/ under the data root, when there)."
    ),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu, cuda, cuda:N (default: the profile's)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch CPU threads of each run and "
                                          "evaluation (default: the profile's, else 1)."),
    jobs: Optional[int] = typer.Option(
        None, "--jobs", "-j", min=1, help="Train and evaluate this many (model, seed) runs at once, each in its own "
        "process with --threads threads; each job's output goes to OUT/logs/. The figures are those of --jobs 1 "
        "(default: the profile's; cpu: 2)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show training progress bars."),
    executor: str = typer.Option(
        "local", "--executor", help="Where the units (each run with its evaluation, the untrained models, the "
        "baselines) run: local (processes of this machine, --jobs at a time) or slurm (each one a job of a SLURM "
        "cluster, through submitit: run it on a machine of the cluster; a job that reaches its time limit is "
        "checkpointed and requeued). The figures are the same."),
    detach: bool = typer.Option(False, "--detach", help="With --executor slurm: submit the jobs and return (exit "
                                "status 75); the same command later collects them (a job is never submitted "
                                "twice) and writes the report."),
    slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="Each job's partition (default: "
                                                  "the profile's slurm.partition, else the cluster's)."),
    slurm_account: Optional[str] = typer.Option(None, "--slurm-account", help="Each job's account (default: the "
                                                "profile's slurm.account, else yours)."),
    slurm_time: Optional[str] = typer.Option(None, "--slurm-time", help="Each job's time limit, e.g. 4h (default: "
                                             "the profile's slurm.time, 4h): at its end the job is requeued."),
    slurm_cpus: Optional[int] = typer.Option(None, "--slurm-cpus", min=1, help="CPUs per job (default: the "
                                             "profile's slurm.cpus, else --threads)."),
    slurm_mem: Optional[str] = typer.Option(None, "--slurm-mem", help="Memory per job, e.g. 16G (default: the "
                                            "profile's slurm.mem, else the cluster's)."),
    slurm_gpus: Optional[int] = typer.Option(None, "--slurm-gpus", min=0, help="GPUs per job (default: the "
                                             "profile's slurm.gpus, 0)."),
    sbatch: Optional[list[str]] = typer.Option(None, "--sbatch", help="Another sbatch option of every job, e.g. "
                                               "--sbatch=--qos=high (repeatable; added to the profile's "
                                               "slurm.sbatch)."),
) -> None:
    """Prepare the corpus, train every model, evaluate models and baselines, write the report.

    Every step is skipped when its outputs are up to date, so running the same command again after an interruption continues where it stopped. Writes OUT/REPORT.md (with figures) and OUT/results.json.
    \f
    Long because Typer reads the command's options from its signature (the body is 35 lines).
    """  # noqa: E501 (one line: Typer keeps the line breaks of a help paragraph)
    from induce.config import parse_duration
    from induce.reproduce import ReproduceOptions, check_out_folder, reproduce

    console = Console(stderr=True)
    corpora_dir = corpora_dir if corpora_dir is not None else default_corpora_dir(out)
    check_out_folder(out, corpus=corpus, data=data, lm_text=lm_text, corpora_dir=corpora_dir)
    options = ReproduceOptions(
        profile=profile, out=out, data=data, corpus=corpus, corpora_dir=corpora_dir,
        seeds=comma_ints(seeds, "--seeds"),
                               models=[m.strip() for m in models.split(",") if m.strip()] if models else None,
        split=split, time_per_model=parse_duration(time_per_model) if time_per_model else None,
        steps_per_model=steps_per_model, jobs=jobs,
        chunk=parse_duration(chunk) if chunk else None, lm_text=lm_text,
        device=device, threads=threads, progress=progress, executor=executor, detach=detach,
        slurm={key: value for key, value in (("partition", slurm_partition), ("account", slurm_account),
                                             ("time", slurm_time), ("cpus", slurm_cpus), ("mem", slurm_mem),
                                             ("gpus", slurm_gpus), ("sbatch", sbatch or None)) if value is not None},
        command="induce " + " ".join(shlex.quote(arg) for arg in sys.argv[1:]) if sys.argv[1:2] == ["reproduce"]
        else "induce reproduce",
    )
    try:
        results = reproduce(options, console=console)
    except KeyboardInterrupt:
        console.print("\n[bold yellow]interrupted.[/] Run the same command again to continue where it stopped "
                      "(finished steps are skipped, a training run continues from its last checkpoint).",
                      highlight=False)
        raise
    _print_summary(results, Console())
    failed = [step for step in results["steps"] if step["status"] == "failed"]
    console.print(f"report: {out / 'REPORT.md'}  results: {out / 'results.json'}  "
                  f"({results['wall_seconds'] / 60:.1f} min)", highlight=False)
    if failed:
        console.print(f"[bold red]{len(failed)} step(s) failed:[/] " + "; ".join(s["name"] for s in failed),
                      highlight=False)
        raise typer.Exit(code=1)
    if results.get("waiting_jobs"):
        waiting = results["waiting_jobs"]
        console.print(f"[bold yellow]not finished:[/] {len(waiting)} SLURM job(s) queued or running ("
                      + ", ".join(f"{unit}: {job}" for unit, job in waiting.items())
                      + "). Run the same command again to collect them.", highlight=False)
        raise typer.Exit(code=INCOMPLETE_EXIT)
    if results.get("incomplete"):
        why = "the chunk's training time is used up" if results.get("chunk_s") else "stopped before the end"
        console.print(f"[bold yellow]not finished:[/] {why} ({', '.join(results['incomplete'])} "
                      "to go). Run the same command again to continue.", highlight=False)
        raise typer.Exit(code=INCOMPLETE_EXIT)


def _print_summary(results: dict, console: Console) -> None:
    from induce.report.markdown import perplexity_bounds
    from induce.report.names import display, split_label
    from induce.report.text import fmt

    source = results["corpus"]["eval"]
    where = split_label(results["split"], source.get("source_kind") or source.get("kind"))
    # Short headers, explained in the caption, and no wrapping: the table fits an 80-column terminal
    # (or log file) with every cell on one line.
    bounds = perplexity_bounds(results["models"], results["models_order"])
    whole = [display(m) for m in results["models_order"] if (results["models"][m].get("traits") or {}).get(
        "sentence_level")]
    table = Table(title=f"induce reproduce ({results['profile']['name']} profile), {where}",
                  caption="ppl: perplexity" + (f" ({', '.join(whole)}: each sentence alone, see REPORT.md)"
                                               if whole else "")
                          + ("; ≤: an upper bound" if bounds else "")
                          + "; WSJ10 / WSJ40 / all: sentence F1 by length; % L / R: left / right splits on WSJ40")
    for column in ("model", "ppl", "WSJ10", "WSJ40", "all", "% L / R"):
        table.add_column(column, justify="left" if column == "model" else "right", no_wrap=True)
    for name in results["models_order"]:
        s = results["models"][name]["summary"]
        table.add_row(display(name), ("≤ " if name in bounds else "") + fmt(s["perplexity"]),
                      fmt(s["sentence_f1_wsj10"]), fmt(s["sentence_f1_wsj40"]),
                      fmt(s["sentence_f1_all"]),
                      f"{fmt(s['left_split_pct_wsj40'])} / {fmt(s['right_split_pct_wsj40'])}")
    for kind, data in results["baselines"].items():
        sc = data["scores"]
        table.add_row(f"{display(kind)} (baseline)", "—", fmt(sc["wsj10"]["sentence_f1"]),
                      fmt(sc["wsj40"]["sentence_f1"]),
                      fmt(sc["all"]["sentence_f1"]),
                      f"{fmt(sc['wsj40']['left_split_pct'])} / {fmt(sc['wsj40']['right_split_pct'])}")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``induce reproduce`` to the app."""
    app.command("reproduce")(reproduce_command)
