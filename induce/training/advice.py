"""What a user is told when a run is far too long for its machine (a paper-size model on a CPU).

Every CPU run times its batches 2-4 (the first one pays for warm-up) and extrapolates them to an epoch and
to the run's end: the end its budgets set (``train.epochs``, and ``train.max_steps`` / ``train.max_tokens``
where they come first). A run whose estimate exceeds :data:`LARGE_RUN_SECONDS` is told so, with the exact
command of a CPU-sized run: the model sizes of ``configs/cpu/<model>.yaml`` (the configs that ``induce
reproduce --profile cpu`` layers over ``configs/<model>.yaml``) as ``key=value`` overrides, and that
profile's step budget. The estimate depends on the machine and its load; it is advice, and nothing in the
run's results depends on it.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Optional

#: A CPU run is "large" when its measured estimate to the end of the run exceeds this many seconds (the cpu
#: profile's longest run takes ~45 minutes; a paper-size PaLM or ON-LSTM run on a CPU, days). Tests change it.
LARGE_RUN_SECONDS = 2 * 3600
#: A CPU run whose estimate exceeds this many seconds prints the estimate (shorter runs have their bar's ETA).
SHOW_ESTIMATE_SECONDS = 10 * 60


def batches_to_end(epochs_left: int, batches_per_epoch: int, batch: int, steps_left: Optional[int] = None,
                   tokens_left: Optional[int] = None, tokens_per_batch: float = 0.0) -> tuple[int, str]:
    """``(batches, what ends the run)`` from the current position: ``batch`` batches done of the current
    epoch's ``batches_per_epoch``, ``epochs_left`` epochs to run counting the current one (every later epoch
    taken to have as many batches as this one), and the step / token budgets' remainders where set (``None``:
    no such budget). ``what`` names the budget that comes first: ``"train.epochs"``, ``"train.max_steps"``
    or ``"train.max_tokens"``."""
    ends = [(max(0, epochs_left * batches_per_epoch - batch), "train.epochs")]
    if steps_left is not None:
        ends.append((max(0, steps_left), "train.max_steps"))
    if tokens_left is not None and tokens_per_batch > 0:
        ends.append((max(0, -(-tokens_left // max(1, round(tokens_per_batch)))), "train.max_tokens"))
    return min(ends, key=lambda end: end[0])


def format_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


#: The clock budget of a CPU-sized command for a model that the CPU profile gives no step budget.
FALLBACK_TIME_BUDGET = "6m"


def cpu_sized_command(model_name: str, config_dir: Optional[Path] = None) -> Optional[str]:
    """``induce train --model NAME key=value ... --max-steps N``: every key that ``configs/cpu/<model>.yaml`` sets
    over the model's shipped config (:func:`induce.config.layer_config`), with the value a run gets from it, in
    the file's order; then the profile's step budget for the model (where it has none, its clock budget or
    :data:`FALLBACK_TIME_BUDGET` as ``--time-budget T``). None when the CPU profile has no config for this model."""
    from induce.config import CONFIG_DIR, Layer, layer_config, leaf_sources, read_yaml, shipped_layers

    folder = Path(config_dir or CONFIG_DIR) / "cpu"
    path = folder / f"{model_name}.yaml"
    if not path.is_file():
        return None
    source = str(path)
    config = layer_config([*shipped_layers(model_name), Layer("file", source, read_yaml(path)),
                           Layer("model", f"--model {model_name}", model_name)])
    values = {key: value for key, value, _ in leaf_sources(config)}
    overrides = [shlex.quote(f"{key}={_text(values[key])}") for key in config.origins.keys_from(source)
                 if key in values]
    command = f"induce train --model {model_name} " + " ".join(overrides)
    profile = folder / "profile.yaml"
    settings = read_yaml(profile) if profile.is_file() else {}
    steps, clock = settings.get("steps_per_model"), settings.get("time_per_model")
    steps, clock = (value.get(model_name) if isinstance(value, dict) else value for value in (steps, clock))
    if steps:
        return command + f" --max-steps {steps}"
    # no step budget for this model in the profile: a clock budget (the run then says it was stopped by the clock)
    return command + f" --time-budget {clock or FALLBACK_TIME_BUDGET}"


def _text(value) -> str:
    """A value as ``key=value`` text that ``induce train`` reads back as it (None as null)."""
    return value if isinstance(value, str) else json.dumps(value)


def size_message(model_name: str, n_params: int, tokens_per_epoch: int, device: str) -> str:
    """The note printed with the estimate of a large run on ``device`` (:data:`LARGE_RUN_SECONDS`)."""
    lines = [
        f"[yellow]note:[/] this is a large run for this {device}: {n_params / 1e6:.1f}M parameters, "
        f"{tokens_per_epoch:,} training tokens per epoch."
    ]
    if device == "cpu":
        command = cpu_sized_command(model_name)
        if command:
            lines.append(f"  A CPU-sized run of {model_name} (the sizes of `induce reproduce --profile cpu`):")
            lines.append(f"    {command}")
        lines.append("  Stop with Ctrl-C: a checkpoint is written and the run can be resumed.")
    return "\n".join(lines)


def estimate_message(seconds_per_batch: float, batches_per_epoch: int, batches_left: int, ends: str,
                     batches: str) -> str:
    """``~T per epoch, ~T to the end of the run`` from the mean time of the named ``batches`` (e.g. ``"2-4"``);
    ``batches_left`` and ``ends`` from :func:`batches_to_end`."""
    epoch = seconds_per_batch * batches_per_epoch
    return (f"estimate (measured on batches {batches}: {seconds_per_batch:.2g} s each): "
            f"~{format_duration(epoch)} per epoch, ~{format_duration(seconds_per_batch * batches_left)} for the "
            f"{batches_left:,} batch{'es' if batches_left != 1 else ''} to the end of the run ({ends}; validation "
            f"not included; this machine's speed and load decide it)")
