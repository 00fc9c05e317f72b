"""What ``induce train`` does with its options: a new run from a config (model, YAML, ``key=value``
overrides, the flags that set ``train.*`` keys) or the resumption of a run, in one call
(:func:`train_or_resume`). The command only parses the options and prints the result."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console

from induce.errors import InduceError

#: The flags that may change when a run is resumed (the rest of its config is kept).
RESUMABLE_FLAGS = ("--max-epochs", "--max-steps", "--max-tokens", "--time-budget", "--device", "--kernels",
                   "--threads", "--tensorboard")


@dataclass(frozen=True)
class TrainFlags:
    """The command-line flags that set ``train.*`` keys; ``None`` (``False``): not given.

    ``time_budget`` is as typed (seconds, or ``90s``, ``10m``, ``2h``)."""

    seed: Optional[int] = None
    device: Optional[str] = None
    kernels: Optional[str] = None
    epochs: Optional[int] = None
    time_budget: Optional[str] = None
    tensorboard: bool = False
    max_steps: Optional[int] = None
    max_tokens: Optional[int] = None
    threads: Optional[int] = None

    def train_keys(self) -> dict:
        """``{key under train.: value}`` of the flags given, the time budget in seconds."""
        from induce.config import parse_duration

        keys = {name: getattr(self, name) for name in ("seed", "device", "kernels", "epochs", "max_steps",
                                                        "max_tokens", "threads")
                if getattr(self, name) is not None}
        if self.time_budget is not None:
            keys["time_budget"] = parse_duration(self.time_budget)
        if self.tensorboard:
            keys["tensorboard"] = True
        return keys


def default_run_dir(model_name: str) -> Path:
    """``runs/<model>-<YYYYmmdd-HHMMSS>``: where a run goes without ``--out``."""
    return Path("runs") / f"{model_name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def train_or_resume(
    flags: TrainFlags,
    model: Optional[str] = None,
    config: Optional[Path] = None,
    overrides: Sequence[str] = (),
    out: Optional[Path] = None,
    corpus: Optional[str] = None,
    resume: Optional[Path] = None,
    force: bool = False,
    console: Optional[Console] = None,
    progress: bool = True,
):
    """Train a new run, or continue the run in ``resume`` (whose config is kept: only the flags of
    :data:`RESUMABLE_FLAGS` may change). A new run's config is
    :func:`induce.config.load_config` of ``model``, ``config`` and ``overrides``, the flags and ``corpus``
    (``data.corpus``) applied as flags (errors name the flag); it goes to ``out``, else
    :func:`default_run_dir`. Returns :class:`induce.training.TrainResult`."""
    from induce.config import load_config
    from induce.training import resume as resume_run
    from induce.training import train

    if resume is not None:
        if model or config or overrides or corpus or flags.seed is not None or force:
            raise InduceError(f"--resume keeps the run's config: only {', '.join(RESUMABLE_FLAGS)} may change (and "
                              "--force does not apply)")
        return resume_run(resume, flags.train_keys(), console=console, progress=progress)
    extra = {f"train.{key}": value for key, value in flags.train_keys().items()}
    if corpus is not None:
        extra["data.corpus"] = corpus
    run_config = load_config(model, config, list(overrides), flags=extra)
    run_dir = out or default_run_dir(run_config.model_name)
    return train(run_config, run_dir, console=console, progress=progress, force=force, allow_foreign=False)
