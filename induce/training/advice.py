"""What a user is told when a run is far too large for its machine (a paper-size model on a CPU).

The size is known before the first step (parameters, tokens per epoch, epochs); the time is measured
on the first batch and extrapolated to an epoch and to the whole run. On a CPU a large run gets the
exact command of a CPU-sized run: the model sizes of ``configs/cpu/<model>.yaml`` (the configs that
``induce reproduce --profile cpu`` layers over ``configs/<model>.yaml``) as ``key=value`` overrides,
and that profile's step budget.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Optional

#: A run is "large" when parameters x training tokens per epoch exceed this (PaLM at paper size on
#: PTB: 24M x 0.93M = 2.2e13; the CPU configs: ~1e11-1e12). Tests lower it.
LARGE_RUN_WORK = 2e12


def is_large_run(n_params: int, tokens_per_epoch: int) -> bool:
    return n_params * tokens_per_epoch > LARGE_RUN_WORK


def format_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def _flatten(prefix: str, value, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out.append(shlex.quote(f"{prefix}={value if isinstance(value, str) else json.dumps(value)}"))  # None as null


#: The clock budget of a CPU-sized command for a model that the CPU profile gives no step budget.
FALLBACK_TIME_BUDGET = "6m"


def cpu_sized_command(model_name: str, config_dir: Optional[Path] = None) -> Optional[str]:
    """``induce train --model NAME key=value ... --max-steps N`` from ``configs/cpu/`` (the profile's step
    budget for the model; where it has none, its clock budget or :data:`FALLBACK_TIME_BUDGET` as
    ``--time-budget T``; None when the CPU profile has no config for this model)."""
    import yaml

    from induce.config import CONFIG_DIR

    folder = Path(config_dir or CONFIG_DIR) / "cpu"
    path = folder / f"{model_name}.yaml"
    if not path.is_file():
        return None
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    raw.pop("model_name", None)
    overrides: list[str] = []
    _flatten("", raw, overrides)
    command = f"induce train --model {model_name} " + " ".join(overrides)
    profile = folder / "profile.yaml"
    settings = (yaml.safe_load(profile.read_text(encoding="utf-8")) or {}) if profile.is_file() else {}
    steps, clock = settings.get("steps_per_model"), settings.get("time_per_model")
    steps, clock = (value.get(model_name) if isinstance(value, dict) else value for value in (steps, clock))
    if steps:
        return command + f" --max-steps {steps}"
    # no step budget for this model in the profile: a clock budget (the run then says it was stopped by the clock)
    return command + f" --time-budget {clock or FALLBACK_TIME_BUDGET}"


def size_message(model_name: str, n_params: int, tokens_per_epoch: int, epochs: int, device: str) -> str:
    """The warning printed before the first step of a large run on ``device``."""
    lines = [
        f"[yellow]note:[/] this is a large run for {device}: {n_params / 1e6:.1f}M parameters, "
        f"{tokens_per_epoch:,} training tokens per epoch, {epochs} epochs (time estimate after the first batches)."
    ]
    if device == "cpu":
        command = cpu_sized_command(model_name)
        if command:
            lines.append(f"  A CPU-sized run of {model_name} (the sizes of `induce reproduce --profile cpu`):")
            lines.append(f"    {command}")
        lines.append("  Stop with Ctrl-C: a checkpoint is written and the run can be resumed.")
    return "\n".join(lines)


def estimate_message(seconds_per_batch: float, batches_per_epoch: int, epochs_left: int, batches: str) -> str:
    """``~T per epoch, ~T for the N epochs`` from the mean time of the named ``batches`` (e.g. ``"2-4"``)."""
    epoch = seconds_per_batch * batches_per_epoch
    return (f"estimate (measured on batches {batches}: {seconds_per_batch:.2g} s each): "
            f"~{format_duration(epoch)} per epoch, ~{format_duration(epoch * epochs_left)} for "
            f"{epochs_left} epoch{'s' if epochs_left != 1 else ''} (validation not included)")
