"""`induce diagnose grad|memory` and `induce task train|eval` (Kerg et al. 2020 diagnostics and tasks).

Thin layer: option parsing and printing; the logic is in :mod:`induce.diagnostics.tasks` and
:mod:`induce.diagnostics.measure`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from induce.cli import comma_ints
from induce.errors import InduceError
from induce.files import check_output_file, output_set

console = Console()
diagnose_app = typer.Typer(help="Gradient-norm and memory/time diagnostics of recurrence vs attention.",
                           no_args_is_help=True)
task_app = typer.Typer(help="Synthetic Copy / Denoise tasks: train and evaluate (answer-only loss).",
                       no_args_is_help=True)


def _ints(text: str, option: str) -> list[int]:
    """The positive integers of ``option`` (``10,20``); an empty list is an error too."""
    values = comma_ints(text, option, minimum=1)
    if not values:
        raise InduceError(f"{option}: expected integers >= 1, got {text!r}")
    return values


def _config(hidden_size: Optional[int], attention_size: Optional[int], nu: Optional[int], rho: Optional[int]) -> dict:
    pairs = dict(hidden_size=hidden_size, attention_size=attention_size, nu=nu, rho=rho)
    return {k: v for k, v in pairs.items() if v is not None}


def compact_json(payload) -> str:
    """``payload`` (a mapping of records) as JSON whose two outer levels are indented and whose values are
    written on one line each (lists of numbers included)."""
    if not isinstance(payload, dict):
        return json.dumps(payload) + "\n"

    def record(value) -> str:
        if not isinstance(value, dict) or not value:
            return json.dumps(value)
        return "{\n" + ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()) + "\n  }"

    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {record(v)}" for k, v in payload.items()) + "\n}\n"


def _write_json(path: Path, payload, outputs=None) -> Path:
    """``payload`` as JSON at ``path``, or into ``outputs`` (an :class:`induce.files.OutputSet`) when given: one
    line per measured model (and per key of a model's record), its series on that line, so a file of long series
    stays a few dozen lines to read and diff."""
    from induce.files import write_output

    text = compact_json(payload)
    return write_output(path, text) if outputs is None else outputs.write(path, text)


def _check_outputs(stem: Path) -> None:
    """--out STEM: STEM.png and STEM.json must be writable (checked before the measurements)."""
    for suffix in (".png", ".json"):
        check_output_file(stem.with_suffix(suffix), "--out")


@task_app.command("train")
def task_train(
    model: str = typer.Option("rellstm", help="registered model name (rellstm, relrnn, memlstm)"),
    task: str = typer.Option("copy", help="copy or denoise"),
    T: int = typer.Option(100, "--T", help="delay (copy) / number of noisy steps (denoise)"),
    steps: int = typer.Option(3000, min=1, help="maximal number of updates"),
    batch_size: int = typer.Option(64, min=1, help="examples per update"),
    lr: float = typer.Option(1e-3, help="Adam learning rate"),
    seed: int = typer.Option(0, help="seed of the model init and of the data streams"),
    time_budget: Optional[float] = typer.Option(None, help="stop after this many seconds"),
    eval_every: int = typer.Option(100, min=1, help="evaluate every N updates (stops at 100% symbol accuracy)"),
    hidden_size: Optional[int] = typer.Option(None, help="model hidden size"),
    attention_size: Optional[int] = typer.Option(None, help="additive attention size"),
    nu: Optional[int] = typer.Option(None, help="short-term buffer size"),
    rho: Optional[int] = typer.Option(None, help="relevant-set size"),
    threads: int = typer.Option(1, min=1, help="torch CPU threads"),
    init: Optional[Path] = typer.Option(None, help="start from this checkpoint (model options are then ignored)"),
    out: Path = typer.Option(..., help="checkpoint path (.safetensors; a .json sidecar is written beside it)"),
) -> None:
    """Train a model on Copy / Denoise with the loss on the answer steps only; save a checkpoint."""
    import torch

    from induce.diagnostics import tasks

    torch.set_num_threads(threads)
    for flag, value in (("--lr", lr), ("--time-budget", time_budget)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InduceError(f"{flag} {value}: give a positive (finite) number")
    torch.manual_seed(seed)
    previous = None
    if init is not None:
        net, previous = tasks.load_checkpoint(init)
    else:
        net = tasks.build_model(model, **_config(hidden_size, attention_size, nu, rho))

    def log(record: dict) -> None:
        console.print(f"step {record['step']:5d}  {record['seconds']:7.1f}s  train loss {record['train_loss']:.4f}"
                      f"  test acc {record['symbol_accuracy']:.4f}  seq acc {record['sequence_accuracy']:.3f}")

    history = tasks.train(net, task, T, steps, batch_size=batch_size, lr=lr, seed=seed,
                          eval_every=eval_every, time_budget_s=time_budget, log=log)
    meta = {"task": task, "T": T, "train": {"steps": history["steps"], "seconds": history["seconds"],
            "batch_size": batch_size, "lr": lr, "seed": seed, "final": history["final"],
            "evals": history["evals"], "init": None if init is None else str(init),
            "init_train": None if previous is None else previous.get("train")}}
    weights, sidecar = tasks.save_checkpoint(out, net, meta)
    console.print(f"wrote {weights} and {sidecar}")


@task_app.command("eval")
def task_eval(
    checkpoint: Path = typer.Option(..., help="checkpoint written by `induce task train`"),
    task: Optional[str] = typer.Option(None, help="task (default: the one it was trained on)"),
    T: str = typer.Option("", "--T", help="comma-separated delays (default: the training T); transfer copy: "
                                          "200,400,2000"),
    n: int = typer.Option(200, min=1, help="test examples per T"),
    seed: int = typer.Option(0, help="test stream seed"),
    threads: int = typer.Option(1, min=1, help="torch CPU threads"),
    out: Optional[Path] = typer.Option(None, help="write the results as JSON here"),
) -> None:
    """Accuracy of a checkpoint at one or several T (Transfer Copy: train at 100, test at larger T)."""
    import torch

    from induce.diagnostics import tasks

    torch.set_num_threads(threads)
    check_output_file(out, "--out")
    net, meta = tasks.load_checkpoint(checkpoint)
    lengths = _ints(T, "--T") if T else [meta["T"]]
    name = task or meta["task"]
    results = [tasks.evaluate(net, name, length, n=n, seed=seed) for length in lengths]
    table = Table("task", "T", "n", "symbol acc", "sequence acc", "loss")
    for r in results:
        table.add_row(r["task"], str(r["T"]), str(r["n"]), f"{r['symbol_accuracy']:.4f}",
                      f"{r['sequence_accuracy']:.4f}", f"{r['loss']:.4f}")
    console.print(table)
    if out is not None:
        _write_json(out, {"checkpoint": str(checkpoint), "trained": {k: meta.get(k) for k in ("model", "task", "T")},
                          "results": results})
        console.print(f"wrote {out}")


@diagnose_app.command("grad")
def diagnose_grad(
    checkpoint: list[Path] = typer.Option([], help="checkpoint(s) from `induce task train` (repeatable)"),
    model: list[str] = typer.Option([], help="fresh (untrained) model(s) to measure (repeatable)"),
    task: str = typer.Option("denoise", help="copy or denoise (checkpoints default to their own task)"),
    T: int = typer.Option(100, "--T", help="task T"),
    n: int = typer.Option(32, min=1, help="examples in the batch"),
    seed: int = typer.Option(0, help="data / init seed"),
    hidden_size: Optional[int] = typer.Option(None, help="fresh models: hidden size"),
    threads: int = typer.Option(1, min=1, help="torch CPU threads"),
    out: Path = typer.Option(Path("bench/relevancy_grad"), help="output stem: writes STEM.png and STEM.json"),
) -> None:
    """||dL/dh_t|| as a function of t for trained and/or fresh models (PNG + JSON)."""
    import torch

    from induce.diagnostics import measure as diagnostics
    from induce.diagnostics import tasks

    torch.set_num_threads(threads)
    results = {}
    diagnostics.require_matplotlib()
    _check_outputs(out)
    if not checkpoint and not model:
        raise InduceError("give at least one --checkpoint or --model")
    for path in checkpoint:
        net, meta = tasks.load_checkpoint(path)
        results[f"{meta['model']} ({path.stem}, trained)"] = diagnostics.gradient_norms(net, task, T, n=n, seed=seed)
    for name in model:
        torch.manual_seed(seed)
        cfg = {} if hidden_size is None else {"hidden_size": hidden_size}
        results[f"{name} (fresh)"] = diagnostics.gradient_norms(tasks.build_model(name, **cfg), task, T, n=n, seed=seed)
    png = out.with_suffix(".png")
    with output_set() as outputs:  # STEM.png and STEM.json: both or neither
        diagnostics.plot_gradient_norms(results, outputs.path(png))
        _write_json(out.with_suffix(".json"), results, outputs)
    for label, r in results.items():
        g = r["grad_norm"]
        console.print(f"{label}: ||dL/dh_0|| = {g[0]:.3e}, ||dL/dh_mid|| = {g[len(g) // 2]:.3e}, last = {g[-1]:.3e}")
    console.print(f"wrote {png} and {out.with_suffix('.json')}")


@diagnose_app.command("memory")
def diagnose_memory(
    models: str = typer.Option("rellstm,relrnn,memlstm", help="comma-separated model names"),
    lengths: str = typer.Option("100,200,400,800", help="comma-separated sequence lengths T"),
    batch_size: int = typer.Option(4, min=1, help="batch size"),
    repeats: int = typer.Option(1, min=1, help="timing repeats (median)"),
    hidden_size: Optional[int] = typer.Option(None, help="hidden size of every model"),
    attention_size: Optional[int] = typer.Option(None, help="attention size of every model"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    threads: int = typer.Option(1, min=1, help="torch CPU threads"),
    out: Path = typer.Option(Path("bench/relevancy_memory"), help="output stem: writes STEM.png and STEM.json"),
) -> None:
    """Memory and time per step against T for each model (PNG + JSON)."""
    import torch

    from induce.diagnostics import measure as diagnostics

    torch.set_num_threads(threads)
    diagnostics.require_matplotlib()
    _check_outputs(out)
    names = [m for m in models.split(",") if m]
    ts = _ints(lengths, "--lengths")
    records = diagnostics.memory_profile(
        names, ts, batch_size=batch_size, repeats=repeats, device=device,
        config=_config(hidden_size, attention_size, None, None),
        log=lambda r: console.print(f"{r['model']:8s} T={r['T']:5d}  {r['memory_bytes'] / 2**20:9.2f} MiB"
                                    f"  {1e3 * r['seconds_per_step']:.3f} ms/step"),
    )
    exponents = {}
    for name in names:
        rows = [r for r in records if r["model"] == name]
        exponents[name] = diagnostics.growth_exponent([r["T"] for r in rows], [r["memory_bytes"] for r in rows])
        console.print(f"{name}: memory ~ T^{exponents[name]:.2f} (least-squares log-log slope)")
    png = out.with_suffix(".png")
    with output_set() as outputs:  # STEM.png and STEM.json: both or neither
        diagnostics.plot_memory_profile(records, outputs.path(png))
        _write_json(out.with_suffix(".json"), {"records": records, "memory_growth_exponents": exponents,
                                              "torch_threads": threads, "device": device}, outputs)
    console.print(f"wrote {png} and {out.with_suffix('.json')}")


def register(app: typer.Typer) -> None:
    """Add `induce diagnose ...` and `induce task ...`."""
    app.add_typer(diagnose_app, name="diagnose")
    app.add_typer(task_app, name="task")
