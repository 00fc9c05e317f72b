"""Training and parsing throughput of the models at the papers' sizes (CPU by default).

Training tokens/s: one step = forward + backward + gradient clipping + optimiser step on a random
``[batch, bptt]`` segment (vocabulary 10,000), median over ``--steps`` steps after ``--warmup``.
Parsing sentences/s: :func:`induce.parsing.parse_batch` on the first ``--parse-sentences`` lines of
``ptb.valid.txt`` (``$INDUCE_DATA/ptb_lm``; untrained weights: only the speed is meaningful).

    python bench/models.py --threads 2                       # all models, fp32
    python bench/models.py --threads 2 --bf16 --models palm   # bf16 autocast for the matmuls
    python bench/models.py --threads 2 --models onlstm onlstm-original   # side by side

``onlstm-original`` is a transcription of the per-step loop of Shen et al.'s released ON-LSTM code
(time-major, ``transformed_input[t]`` indexing, slicing of the gate vector, DropConnect mask per
forward), at the same sizes: measured in the same run (steps interleaved with ``onlstm``), the
ratio is meaningful even on a loaded machine where absolute figures are not.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from induce.models.registry import get_model_class
from induce.parsing import parse_batch

VOCAB = 10_000
#: (batch, bptt, optimiser, config overrides) per benchmark entry; sizes from the papers.
SETUPS = {
    "onlstm": (20, 70, "sgd", {}),
    "prpn": (64, 35, "adam", {}),
    "palm": (20, 70, "adam", {}),
    "palm-m10": (20, 70, "adam", {"max_span_length": 10}),
    # the size at which the issue quotes the original PaLM code (3 x 1120, m = 10); the paper's
    # Table 5 says 1020, which is what configs/palm.yaml and the "palm" entries use
    "palm-h1120-m10": (20, 70, "adam", {"hidden_size": 1120, "max_span_length": 10}),
    "onlstm-original": (20, 70, "sgd", {}),
}


class OriginalONLSTM(torch.nn.Module):
    """Shen et al.'s ON-LSTM training loop as released (``ONLSTMCell`` / ``ONLSTMStack``), for timing."""

    def __init__(self, vocab: int, emb: int = 400, hidden: int = 1150, chunk: int = 10, wdrop: float = 0.45):
        super().__init__()
        from torch import nn

        self.encoder = nn.Embedding(vocab, emb)
        self.decoder_bias = nn.Parameter(torch.zeros(vocab))
        sizes = [emb, hidden, hidden, emb]
        self.ih = nn.ModuleList(nn.Linear(sizes[l], sizes[l + 1] * 4 + sizes[l + 1] // chunk * 2) for l in range(3))
        self.hh = nn.ModuleList(nn.Linear(sizes[l + 1], sizes[l + 1] * 4 + sizes[l + 1] // chunk * 2) for l in range(3))
        self.sizes, self.chunk, self.wdrop = sizes, chunk, wdrop

    def init_state(self, batch: int):
        return [(torch.zeros(batch, n), torch.zeros(batch, n // self.chunk, self.chunk)) for n in self.sizes[1:]]

    def forward(self, tokens, state):
        x = self.encoder(tokens.t())  # time-major [T, B, E]
        new_state = []
        for l in range(3):
            n_chunk = self.sizes[l + 1] // self.chunk
            mask = torch.empty_like(self.hh[l].weight, dtype=torch.uint8).bernoulli_(self.wdrop)
            weight = self.hh[l].weight.masked_fill(mask.bool(), 0.0)
            transformed = self.ih[l](x)
            hx, cx = state[l]
            outputs = []
            for t in range(x.size(0)):
                gates = transformed[t] + F.linear(hx, weight, self.hh[l].bias)
                cingate, cforgetgate = gates[:, : n_chunk * 2].chunk(2, 1)
                outgate, cell, ingate, forgetgate = gates[:, n_chunk * 2 :].view(-1, n_chunk * 4, self.chunk).chunk(4, 1)
                cingate = 1.0 - torch.cumsum(F.softmax(cingate, -1), -1)
                cforgetgate = torch.cumsum(F.softmax(cforgetgate, -1), -1)
                cingate, cforgetgate = cingate[:, :, None], cforgetgate[:, :, None]
                ingate, forgetgate = torch.sigmoid(ingate), torch.sigmoid(forgetgate)
                cell, outgate = torch.tanh(cell), torch.sigmoid(outgate)
                overlap = cforgetgate * cingate
                forgetgate = forgetgate * overlap + (cforgetgate - overlap)
                ingate = ingate * overlap + (cingate - overlap)
                cx = forgetgate * cx + ingate * cell
                hx = (outgate * torch.tanh(cx)).view(-1, self.sizes[l + 1])
                outputs.append(hx)
            x = torch.stack(outputs)
            new_state.append((hx, cx))
        return x.transpose(0, 1), new_state

    def logits(self, hidden):
        return F.linear(hidden, self.encoder.weight, self.decoder_bias)


def model_for(entry: str):
    name = "palm" if entry.startswith(("palm-m", "palm-h")) else entry
    batch, bptt, optimiser, overrides = SETUPS[entry]
    if entry == "onlstm-original":
        return OriginalONLSTM(VOCAB), batch, bptt, optimiser
    cls = get_model_class(name)
    return cls(VOCAB, cls.Config(**overrides)), batch, bptt, optimiser


class Trainer:
    """One model, its optimiser and carried state; ``step()`` times one training step."""

    def __init__(self, entry: str):
        torch.manual_seed(0)
        self.model, self.batch, self.bptt, optimiser_name = model_for(entry)
        self.model.train()
        if optimiser_name == "sgd":
            self.optimiser = torch.optim.SGD(self.model.parameters(), lr=1.0)
        else:
            self.optimiser = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.state = self.model.init_state(self.batch)
        self.times: list[float] = []

    def step(self, bf16: bool, record: bool) -> None:
        tokens = torch.randint(0, VOCAB, (self.batch, self.bptt + 1))
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = self.model(tokens[:, :-1], self.state)
            hidden, state = (out.hidden, out.state) if hasattr(out, "hidden") else out
            logits = self.model.logits(hidden)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        self.optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimiser.step()
        self.state = detach(state)
        if record:
            self.times.append(time.perf_counter() - start)

    def tokens_per_second(self) -> float:
        return self.batch * self.bptt / statistics.median(self.times)


def train_speeds(entries: list[str], steps: int, warmup: int, bf16: bool) -> dict[str, float]:
    """Median training tokens/s per entry; the entries' steps are interleaved (round robin)."""
    trainers = {entry: Trainer(entry) for entry in entries}
    for step in range(warmup + steps):
        for trainer in trainers.values():
            trainer.step(bf16, record=step >= warmup)
    return {entry: trainer.tokens_per_second() for entry, trainer in trainers.items()}


def detach(state):
    if isinstance(state, torch.Tensor):
        return state.detach()
    if isinstance(state, dict):
        return {k: detach(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(detach(s) for s in state)
    return state


def parse_speed(entry: str, n_sentences: int, bf16: bool) -> float | None:
    if entry == "onlstm-original" or n_sentences == 0:
        return None
    path = Path(os.environ.get("INDUCE_DATA", "../shared/data")) / "ptb_lm" / "ptb.valid.txt"
    if not path.exists():
        return None
    lines = [line.split() for line in path.read_text().splitlines() if line.strip()][:n_sentences]
    vocab: dict[str, int] = {"<eos>": 0}
    ids = [[vocab.setdefault(w, len(vocab) % VOCAB) for w in line] for line in lines]
    model, *_ = model_for(entry)
    parse_batch(model, ids[:8], lines[:8], eos_id=0)  # warm-up
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        parse_batch(model, ids, lines, eos_id=0)
    return len(ids) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--parse-sentences", type=int, default=200)
    parser.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16) around the forward")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table = Table(title=f"induce models, {args.threads} threads, {'bf16 autocast' if args.bf16 else 'fp32'}")
    for column in ("model", "batch x bptt", "train tokens/s", "parse sentences/s"):
        table.add_column(column)
    console = Console()
    load_before = os.getloadavg()
    speeds = train_speeds(args.models, args.steps, args.warmup, args.bf16)
    for entry in args.models:
        batch, bptt, *_ = SETUPS[entry]
        sentences_per_s = parse_speed(entry, args.parse_sentences, args.bf16)
        table.add_row(entry, f"{batch} x {bptt}", f"{speeds[entry]:.0f}",
                      "n/a" if sentences_per_s is None else f"{sentences_per_s:.1f}")
    console.print(f"load average before/after: {load_before} / {os.getloadavg()}")
    console.print(table)


if __name__ == "__main__":
    main()
