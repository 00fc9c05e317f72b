"""Overhead of the training loop: tokens/s of the full :class:`~induce.training.trainer.Trainer` vs
the bare model step (the trainer's :func:`~induce.training.optim.optimiser_step`: forward, tied output,
loss with AR/TAR, backward, clipping, optimiser step).

    python -m induce.training.benchmark --model onlstm --corpus corpora/ptb-lm --seconds 60 \\
        model.hidden_size=400 data.variable_bptt=false

prints one JSON line. Both measurements use the same config (model, batch, bptt, optimiser); the
bare step reads random tokens and keeps the state across steps; the loop figure is
``train_tokens / train_seconds`` of a run stopped by ``train.time_budget`` (evaluation excluded).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
from rich.console import Console

from induce.config import RunConfig, load_config

from .lm import LMLoss
from .optim import Optimisation
from .state import detach_state
from .trainer import train


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def raw_step_tokens_per_s(config: RunConfig, vocab_size: int, seconds: float = 10.0, warmup: int = 3) -> float:
    """Tokens/s of the bare training step of ``config``'s model on random ``[B, bptt]`` batches."""
    from induce.kernels import set_backend
    from induce.models.configs import model_config
    from induce.models.registry import get_model_class
    from induce.training.ddp import resolve_device

    set_backend(config.train.kernels)
    device = resolve_device(config.train.device)
    torch.manual_seed(config.train.seed)
    model = get_model_class(config.model_name)(vocab_size, model_config(config)).to(device).train()
    loss_module = LMLoss(model, config.train.alpha, config.train.beta)
    optimisation = Optimisation(model, config.optim, device, config.train.amp)
    batch, steps = config.data.batch_size, config.data.bptt
    gold = None
    if model.supervised:
        gold = torch.zeros(batch, steps, config.model["max_span_length"], device=device)
        gold[:, :, 1] = 1.0
    state = model.init_state(batch, device)
    tokens_done, started, step = 0, None, 0
    while True:
        if step == warmup:
            _sync(device)
            started, tokens_done = time.perf_counter(), 0
        tokens = torch.randint(0, vocab_size, (batch, steps + 1), device=device)
        state = detach_state(state)
        _, _, state = optimisation.step(partial(loss_module, tokens[:, :-1], tokens[:, 1:], state, gold))
        tokens_done += batch * steps
        step += 1
        if started is not None and step % 5 == 0:
            _sync(device)
            if time.perf_counter() - started >= seconds:
                return tokens_done / (time.perf_counter() - started)


def loop_tokens_per_s(config: RunConfig, seconds: float = 10.0, run_dir: Path | None = None) -> dict:
    """Run the real trainer for ``seconds`` (one partial epoch) and return its first metrics line."""
    overrides = {"time_budget": seconds, "epochs": 1, "log_interval": 10, "dev_f1": False}
    config = config.model_copy(update={"train": config.train.model_copy(update=overrides)})
    with tempfile.TemporaryDirectory() as tmp:
        result = train(config, run_dir or Path(tmp) / "run", console=Console(quiet=True), progress=False)
    return result.history[0]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--corpus", required=True, help="prepared corpus folder")
    parser.add_argument("--seconds", type=float, default=30.0, help="time for each of the two measurements")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from induce.data.corpus import PreparedCorpus

    config = load_config(args.model, overrides=[f"data.corpus={args.corpus}", *args.overrides])
    vocab_size = len(PreparedCorpus(args.corpus).vocab)
    raw = raw_step_tokens_per_s(config, vocab_size, args.seconds)
    metrics = loop_tokens_per_s(config, args.seconds)
    print(json.dumps({
        "model": args.model,
        "device": config.train.device,
        "batch_size": config.data.batch_size,
        "bptt": config.data.bptt,
        "raw_step_tokens_per_s": round(raw, 1),
        "loop_tokens_per_s": metrics["tokens_per_s"],
        "loop_overhead_percent": round(100.0 * (1.0 - metrics["tokens_per_s"] / raw), 1),
        "loop_train_ppl": round(metrics["train_ppl"], 2),
        "valid_ppl_after": round(metrics["valid_ppl"], 2),
        "overrides": args.overrides,
    }))


if __name__ == "__main__":
    main()
