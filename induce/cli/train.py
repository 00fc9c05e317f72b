"""`induce train`: train a language model into a run folder (logic: :mod:`induce.training.launch`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from induce.cli import THREADS_HELP


def train_command(
    overrides: Optional[list[str]] = typer.Argument(
        None, metavar="[KEY=VALUE]...",
        help="Config overrides with dotted keys, e.g. model.hidden_size=200 optim.lr=0.003 data.batch_size=32.",
    ),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name (see `induce models`)."),
    config: Optional[Path] = typer.Option(
        None, "--config", help="A YAML config of your own, layered over the model's shipped config: the keys it sets "
        "change, the others keep the model's values (typed defaults < shipped <model>.yaml < this file < KEY=VALUE; "
        "`induce config` shows each key's layer)."
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Run folder (default: runs/<model>-<timestamp>)."),
    corpus: Optional[str] = typer.Option(
        None, "--corpus", help="Prepared corpus folder or name under corpora/ (= data.corpus; default: the default "
                               "corpus)."
    ),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (= train.seed)."),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu, cuda or cuda:N (= train.device)."),
    kernels: Optional[str] = typer.Option(None, "--kernels", help="Kernel backend: auto, reference, torch, triton."),
    max_epochs: Optional[int] = typer.Option(None, "--max-epochs", help="Number of epochs (= train.epochs)."),
    max_steps: Optional[int] = typer.Option(
        None, "--max-steps", min=1, help="Stop after this many optimiser steps of the whole run, across epochs "
        "(= train.max_steps). Does not depend on the machine's speed."),
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", min=1, help="Stop after the step that reaches this many training tokens of the whole "
        "run (= train.max_tokens). Does not depend on the machine's speed."),
    time_budget: Optional[str] = typer.Option(
        None, "--time-budget", help="Stop after this much time: seconds or 90s, 10m, 2h (= train.time_budget), "
        "evaluations included, checked between steps; what the run learns then depends on the machine's speed "
        "and load (its status says so). --max-steps gives the same run on every machine."
    ),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help=THREADS_HELP + " = train.threads."),
    resume: Optional[Path] = typer.Option(
        None, "--resume", help="Continue the run in this folder exactly where it stopped (its config is kept)."
    ),
    force: bool = typer.Option(
        False, "--force",
        help="Train into --out even if it holds a run (its run files are removed first) or other files.",
    ),
    tensorboard: bool = typer.Option(
        False, "--tensorboard", help="Write TensorBoard event files (loss, perplexity, dev F1, branching, learning "
        "rate) into RUN/tensorboard/ (= train.tensorboard; needs pip install 'induce[tensorboard]'). Allowed with "
        "--resume.",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """Train a language model; writes config.yaml, metrics.jsonl, best/last checkpoints into the run folder.

    Under `torchrun --nproc_per_node N` the same command trains with DistributedDataParallel.
    Ctrl-C stops after the current batch, writes a checkpoint and prints the `--resume` command
    (exit code 130). A folder that holds a run, or another training's lock, is refused.

    On a CUDA device (one process) the training step is captured in CUDA graphs by default
    (train.cuda_graphs=auto), one per segment length, with the random BPTT lengths rounded to a few
    values (data.bptt_bucket, chosen and printed at the start); train.cuda_graphs=false turns it
    off. On a CPU nothing changes.
    """
    from induce.training.ddp import env_is_main
    from induce.training.launch import TrainFlags, train_or_resume
    from induce.training.trainer import clock_note

    console = Console(stderr=True)
    flags = TrainFlags(seed=seed, device=device, kernels=kernels, epochs=max_epochs, time_budget=time_budget,
                       tensorboard=tensorboard, max_steps=max_steps, max_tokens=max_tokens, threads=threads)
    result = train_or_resume(flags, model=model, config=config, overrides=overrides or (), out=out, corpus=corpus,
                             resume=resume, force=force, console=console, progress=progress)
    if not env_is_main():  # under torchrun the summary is rank 0's (every process returns the same run)
        return
    console.print(
        f"{result.run_dir}: {result.epochs_done} epochs, {result.steps:,} steps ({result.stop_reason}), "
        + result.best_valid_text() + (f"; {clock_note(result.steps)}" if result.stop_reason == "time_budget" else ""),
        highlight=False,
    )
    typer.echo(str(result.run_dir))


def register(app: typer.Typer) -> None:
    """Add ``induce train`` to the app."""
    app.command("train")(train_command)
