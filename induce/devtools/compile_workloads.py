"""What the H100 compile check drives: the models of every shipped config, the parse lengths, cumax.

:func:`record` returns a :class:`~induce.devtools.launch_recorder.Recorder` holding every distinct
kernel variant these launch (see :mod:`induce.devtools.launch_recorder` for how launches are
recorded without a GPU):

1. **Models.** Every shipped config: the families' ``models/<family>/*.yaml`` (each file also with every
   sibling model that takes the same ``Config`` class, e.g. ``palm-paper.yaml`` as palm-s and palm-rb) and every
   profile of ``configs/<profile>/``, distinct ones once. Per config: training steps in fp32 and
   under bf16 autocast (CPU autocast standing in for CUDA's: the models choose the dtypes the kernels
   see) at the longest segment length and then the shortest (1: an epoch's clipped last segment),
   carrying the state as the trainer does (the kernels take the length unspecialised); a validation
   forward; parses of 1, 2, 42 and 302 tokens (:data:`MODEL_PARSE_LENGTHS`, at batch 1, and at the
   validation batch up to 42 tokens). Batch sizes are reduced to the residue of the configured
   one modulo 16 (kept >= 2 unless it is 1, :func:`drive_batch`): every byte offset and every
   multiple of the batch stays in its class of divisibility by 16, the only batch property Triton
   specialises on, at a fraction of the CPU time. The vocabulary is tiny (it reaches no kernel).
   Sentence-level models (the neural PCFGs: no stream, no state) take their own path instead
   (:func:`drive_sentence_model`: their sentence loss in training and validation, then parses). Every
   config driven is listed in the recorder's ``driven`` (the test checks that none is left out).
2. **Span counts.** A parse scores every span of a sentence, so PaLM's span count ``m`` grows with
   it: ``<eos> words <eos>`` of at most ``--max-length`` words (default 300; the option has no upper
   bound). Every launcher with a ``max_len`` argument is called again, with the dtypes and feature
   sizes the models gave it, at every ``m`` of :data:`SPAN_COUNT_SWEEP`: ``1 .. 320`` (past the
   default's 302 and over a whole period of 16) and the powers of two up to 4096 with their
   neighbours (tile choices change at powers of two, Triton's integer specialisation at multiples of 16).
3. **cumax**, public but called by no model, on the ON-LSTM master-gate shapes (:func:`drive_cumax`).
4. **inside_lowrank** (TN-PCFG) beyond the shipped config's rank: forward and backward at the ranks of
   :data:`LOWRANK_RANKS` (:func:`drive_inside_lowrank`).
5. **The dense-PCFG inside algorithm** (:func:`drive_inside`) at the grammar sizes of
   :data:`PCFG_GRAMMARS`, both semirings, forward and backward. Its kernels specialise on the number
   of nonterminals only (sentence length, width and span count are runtime arguments; the inputs are
   converted to float32 first), so one short batch per grammar covers every length.
6. **inside_simple** (the simple PCFGs) at the parent counts of :data:`SIMPLE_PARENTS`: both semirings,
   forward and backward (:func:`drive_inside_simple`).

Models run in ``jobs`` processes; the CPU time is the models' own arithmetic at the configs' sizes.
"""
from __future__ import annotations

import functools
import json
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Optional, Sequence

from induce.devtools.launch_recorder import Recorder, TensorArg, intercept

#: Parse lengths run through every model: one and two tokens, the dev-F1 sentences (<= 40 words
#: between two ``<eos>``) and the parse CLI's default ``--max-length 300`` plus its two ``<eos>``.
MODEL_PARSE_LENGTHS = (1, 2, 42, 302)
#: Span counts swept at the launchers (see the module docstring).
SPAN_COUNT_SWEEP = tuple(range(1, 321)) + tuple(
    n for p in (9, 10, 11, 12) for n in (2**p - 1, 2**p, 2**p + 1)
)
#: Ranks driven through inside_lowrank: TN-PCFG's released configs (r = 500 in tnpcfg_r500_nt250_t500,
#: 1000 in fast_tnpcfg_r1000_nt9000_t4500, 300 in nblpcfg_r300_nt15_t30) and the small, odd and
#: block-boundary ranks (its kernels specialise on the rank's divisibility by 16 and tile it by <= 128).
LOWRANK_RANKS = (1, 7, 16, 100, 128, 129, 300, 500, 1000)
#: Parent counts driven through inside_simple, whose split sums are inside_lowrank's kernels with the
#: parents as the rank: SC-PCFG's 512, the CPU profile's curve (64, 256, 1,024) and small, odd and
#: block-boundary counts. The released SN-PCFGs' 4,096 and 8,192 and SC-PCFG's 2,048 parents add no variant:
#: the rank is a runtime argument (specialised only on its divisibility by 16 and on 1) and its tile is
#: capped at 128 (``lowrank_triton._MAX_BLOCK_R``), so every count from 128 on compiles as 256 (or 129)
#: does; driving them cost 78 of the check's CPU seconds. The shipped snpcfg.yaml (4,096) still runs through
#: its model.
SIMPLE_PARENTS = (1, 7, 16, 64, 129, 256, 512, 1024)
#: The longest sentence a sentence-level model is driven with (or its ``data.max_length`` if shorter): the
#: inside kernels take lengths, widths and span counts unspecialised, and every one of them launches by
#: width 5, so longer sentences only cost CPU time (at a paper-size simple PCFG, minutes).
DRIVEN_SENTENCE_LENGTH = 8
#: The most sentences a sentence-level model's step is driven with (the shipped dense and low-rank PCFGs train on 4).
SENTENCE_DRIVE_BATCH = 4
#: ``(nonterminals, preterminals)`` of the dense PCFGs: Kim et al.'s N-PCFG and C-PCFG (30, 60),
#: a small grammar for CPU runs, and the largest the Triton tier takes (64 nonterminals).
PCFG_GRAMMARS = ((30, 60), (10, 20), (64, 32))
#: Vocabulary of the driven models: the vocabulary reaches no kernel (the embedding and the tied
#: output layer are plain torch), and a small one keeps the CPU time down.
VOCAB_SIZE = 32


def drive_batch(batch_size: int) -> int:
    """The batch size driven for ``batch_size``: its residue modulo 16 (2..17 unless it is 1)."""
    if batch_size <= 17:
        return batch_size
    residue = batch_size % 16
    return residue + 16 if residue < 2 else residue


def shipped_configs(config_dir: Optional[Path] = None) -> list:
    """``(label, RunConfig)`` of every shipped config, distinct ones only (see the module docstring)."""
    from induce.config import CONFIG_DIR, family_roots, read_yaml, validate_config
    from induce.models.configs import resolve_config
    from induce.models.registry import get_model_class, list_models
    from induce.reproduce.profiles import build_run_config, list_profiles, load_profile

    config_dir = Path(config_dir or CONFIG_DIR)
    found: list = []
    models = list(list_models())
    # the families' base configs (induce/models/<family>/*.yaml), in the order of their names
    family_files = [path for root in family_roots() for family in root.iterdir() if (family / "__init__.py").is_file()
                    for path in family.glob("*.yaml")]
    for path in sorted(family_files, key=lambda path: path.name):
        raw = read_yaml(path)
        config_cls = get_model_class(raw["model_name"]).Config
        siblings = [raw["model_name"]] + [m for m in models if m != raw["model_name"]
                                           and get_model_class(m).Config is config_cls]
        for model in siblings:
            label = path.name if model == raw["model_name"] else f"{path.name} as {model}"
            found.append((label, resolve_config(validate_config({**raw, "model_name": model}, source=str(path)))))
    for name in list_profiles(config_dir):
        profile = load_profile(name, config_dir)
        for model in profile.models:
            found.append((f"{name}/{model}", build_run_config(profile, model, [])))
    distinct, seen = [], set()
    for label, cfg in found:
        ident = json.dumps([cfg.model_name, cfg.model, cfg.data.model_dump(mode="json")], sort_keys=True)
        if ident not in seen:
            seen.add(ident)
            distinct.append((label, cfg))
    return distinct


def _segment_lengths(cfg) -> list:
    """The longest segment (``bptt + max_bptt_extra``, or ``bptt`` without variable BPTT) from a fresh
    state, then the shortest (1: the clipped last segment of an epoch) with the state carried."""
    data = cfg.data
    return [data.bptt + data.max_bptt_extra if data.variable_bptt else data.bptt, 1]


def drive_config(label: str, cfg, recorder: Recorder, number: int = 0) -> None:
    """Run ``cfg``'s model through training (fp32, bf16 autocast), validation and parsing; see the module docstring."""
    import torch

    from induce.models.base import STREAM_LM
    from induce.models.configs import model_config
    from induce.models.registry import get_model_class
    from induce.training.lm import LMLoss
    from induce.training.state import detach_state

    cls = get_model_class(cfg.model_name)
    torch.manual_seed(0)
    model = cls(VOCAB_SIZE, model_config(cfg))
    recorder.driven.append(label)
    if cls.objective is not STREAM_LM:
        drive_sentence_model(label, cfg, model, recorder, number)
        return
    loss_module = LMLoss(model, cfg.train.alpha, cfg.train.beta)
    batch = drive_batch(cfg.data.batch_size)
    span_count = cfg.model.get("max_span_length")
    recorder.label = label
    for phase, amp in enumerate((False, True)):
        recorder.kind, recorder.order = f"train {'bf16' if amp else 'fp32'}", (number, phase)
        model.train()
        state = model.init_state(batch)
        for steps in _segment_lengths(cfg):
            tokens = torch.randint(VOCAB_SIZE, (batch, steps))
            gold = None
            if cls.supervised and span_count:
                gold = torch.zeros(batch, steps, span_count)
                gold[..., 0] = 1.0
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                loss, _, state = loss_module(tokens, tokens, state, gold)
            loss.backward()
            model.zero_grad(set_to_none=True)
            state = detach_state(state)
    model.eval()
    with torch.no_grad():
        recorder.kind, recorder.order = "validation", (number, 2)
        eval_batch = drive_batch(cfg.data.eval_batch_size)
        model(torch.randint(VOCAB_SIZE, (eval_batch, cfg.data.bptt)), model.init_state(eval_batch))
        if cls.parser_kind.parses:
            recorder.kind, recorder.order = "parse", (number, 3)
            for steps in MODEL_PARSE_LENGTHS:
                # full batches only up to the dev-F1 lengths: the parser's batches shrink with the
                # length (inference.SPAN_BUDGET / TOKEN_BUDGET), and long ones cost CPU time here
                for rows in sorted({1, eval_batch}) if steps <= 42 else (1,):
                    tokens = torch.randint(VOCAB_SIZE, (rows, steps))
                    model.parse_structure(tokens, torch.full((rows,), steps))
            if model.parse_state_carry:
                model.parse_stream([[1, 2, 3], [4] * 40], eos_id=0)


def drive_sentence_model(label: str, cfg, model, recorder: Recorder, number: int = 0) -> None:
    """A sentence-level model (e.g. the neural PCFGs): :meth:`sentence_loss` in training (fp32, bf16 autocast)
    and validation, then :meth:`parse_structure`, on a padded batch of one sentence of the longest training
    length (``data.max_length``, 40 when unset, at most :data:`DRIVEN_SENTENCE_LENGTH`) and the rest of the
    shortest the model trains on. Their kernels (the inside algorithms) specialise on the grammar's size, not
    on the sentence length (a runtime argument), so these lengths cover every length the model meets. (A
    second training batch of only the shortest sentences added no variant for any shipped grammar and cost
    37 CPU seconds at the paper-size simple PCFGs.)"""
    import torch

    longest = min(cfg.data.max_length or 40, DRIVEN_SENTENCE_LENGTH)
    shortest = max(2, model.shortest_sentence)
    # at most SENTENCE_DRIVE_BATCH sentences: a paper-size simple PCFG's CPU step at 16 sentences held 20 GB (its
    # per-sentence rule tensors), and its inside kernels are driven at every parent count by drive_inside_simple
    batch = min(drive_batch(cfg.data.batch_size), SENTENCE_DRIVE_BATCH)

    def sentences(rows: int, width: int) -> tuple:
        lengths = torch.tensor([width] + [shortest] * (rows - 1))
        tokens = torch.randint(1, VOCAB_SIZE, (rows, width))
        return tokens, lengths

    recorder.label = label
    for phase, amp in enumerate((False, True)):
        recorder.kind, recorder.order = f"train {'bf16' if amp else 'fp32'}", (number, phase)
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = model.sentence_loss(*sentences(batch, longest)).sum()
        loss.backward()
        model.zero_grad(set_to_none=True)
    model.eval()
    recorder.kind, recorder.order = "validation", (number, 2)
    with torch.no_grad():
        model.sentence_loss(*sentences(drive_batch(cfg.data.eval_batch_size), longest))
    if model.parser_kind.parses:
        recorder.kind, recorder.order = "parse", (number, 3)
        for width in (shortest, 5):
            model.parse_structure(*sentences(2, width))


def _sweep_templates(recorder: Recorder) -> list:
    """The recorded no-grad calls of launchers with a ``max_len``, one per dtype and feature sizes."""
    distinct: dict = {}
    for call in list(recorder.calls.values()):
        if call.grad or "max_len" not in call.arguments:
            continue
        features = sorted((k, (v.dtype, v.shape[2:], len(v.shape)) if isinstance(v, TensorArg) else v)
                          for k, v in call.arguments.items() if k != "max_len")
        distinct.setdefault(repr((call.name, features)), call)
    return list(distinct.values())


def sweep_span_counts(recorder: Recorder, counts: Sequence[int] = SPAN_COUNT_SWEEP, number: int = 0) -> None:
    """Call every recorded no-grad launch of a launcher with ``max_len`` again at each span count ``m``.

    The tensors keep the recorded dtypes and feature sizes, with batch 1 and ``T = m - 1`` or ``T = m``
    positions (``[B, T, ...]`` arguments; a parse of ``T + 1`` tokens scores ``m = T + 1`` spans per
    position in both PaLM variants); a 1-d tensor of the recorded ``max_len`` entries (PaLM-RB's
    fixed scores) gets ``m``.
    """
    import torch

    from induce.kernels import _dispatch

    def resized(arg: TensorArg, recorded_m: int, m: int, steps: int):
        if len(arg.shape) >= 2:
            return arg.make((1, steps) + arg.shape[2:])
        if len(arg.shape) == 1 and arg.shape[0] == recorded_m:
            return arg.make((m,))
        return arg.make()

    recorder.label, recorder.kind, recorder.order = "span-count sweep", "parse", (number, 0)
    with torch.no_grad():
        for call in _sweep_templates(recorder):
            launcher = _dispatch.implementation(call.name, "triton")
            recorded_m = call.arguments["max_len"]
            for m in counts:
                for steps in sorted({max(m - 1, 1), m}):
                    arguments = {k: resized(v, recorded_m, m, steps) if isinstance(v, TensorArg) else v
                                 for k, v in call.arguments.items()}
                    arguments["max_len"] = m
                    launcher(**arguments)


def drive_cumax(recorder: Recorder, number: int = 0) -> None:
    """``cumax`` is public but no model calls it (the ON-LSTM cell fuses its own): it is driven on the
    master-gate logits of every recorded ON-LSTM cell call (``[B, n_chunks]``), in fp32 and bf16, both
    directions, forward and backward."""
    import torch

    from induce.kernels import _dispatch

    cumax = _dispatch.implementation("cumax", "triton")
    shapes = sorted({(c.arguments["c"].shape[0], c.arguments["n_chunks"]) for c in list(recorder.calls.values())
                     if c.name == "onlstm_cell"})
    recorder.label, recorder.kind, recorder.order = "cumax", "on ON-LSTM gate shapes", (number, 0)
    for shape in shapes:
        for dtype in (torch.float32, torch.bfloat16):
            for reverse in (False, True):
                x = torch.zeros(shape, dtype=dtype, requires_grad=True)
                cumax(x, reverse=reverse).sum().backward()


def drive_inside_lowrank(recorder: Recorder, number: int = 0) -> None:
    """TN-PCFG's inside pass, forward and backward, at every rank of :data:`LOWRANK_RANKS` (two sentences
    of 2 and 5 words: the lengths and widths are runtime arguments, so they add no variant)."""
    import torch

    import induce.kernels as kernels

    recorder.label, recorder.kind, recorder.order = "inside_lowrank", "TN-PCFG ranks", (number, 0)
    NT, T = 3, 4
    for r in LOWRANK_RANKS:
        factors = [torch.zeros(2, n, r, requires_grad=True) for n in (NT, NT + T, NT + T)]
        terms = torch.zeros(2, 5, T, requires_grad=True)
        roots = torch.zeros(2, NT, requires_grad=True)
        kernels.inside_lowrank(terms, roots, *factors, torch.tensor([5, 2])).sum().backward()


def drive_inside_simple(recorder: Recorder, number: int = 0, parents: Sequence[int] = SIMPLE_PARENTS) -> None:
    """The simple PCFG's inside pass at every parent count of :data:`SIMPLE_PARENTS`: sum and max, forward and
    backward, two sentences of 5 and 2 words (lengths and widths are runtime arguments: no variant)."""
    import torch

    import induce.kernels as kernels

    recorder.label, recorder.kind, recorder.order = "inside_simple", "simple PCFG parents", (number, 0)
    T = 3
    for NT in parents:
        for semiring in ("sum", "max"):
            leaves = [torch.zeros(shape, requires_grad=True) for shape in
                      ((2, 5, T), (2, NT), (2, NT + T, NT), (2, NT + T, NT))]
            kernels.inside_simple(*leaves, torch.tensor([5, 2]), semiring=semiring).sum().backward()


def drive_inside(recorder: Recorder, number: int = 0, grammars: Sequence[tuple] = PCFG_GRAMMARS) -> None:
    """:func:`induce.kernels.inside` at each grammar size: sum and max, forward and backward, a padded
    batch of two sentences (5 and 4 words: every kernel launches, widths 3 to 5)."""
    import torch

    import induce.kernels as kernels

    recorder.label, recorder.kind, recorder.order = "inside", "dense PCFG", (number, 0)
    for nonterminals, preterminals in grammars:
        symbols = nonterminals + preterminals
        for semiring in ("sum", "max"):
            for dtype in (torch.float32, torch.bfloat16):
                leaves = [torch.zeros(shape, dtype=dtype, requires_grad=True) for shape in
                          ((2, 5, preterminals), (2, nonterminals, symbols, symbols), (2, nonterminals))]
                log_z = kernels.inside(*leaves, torch.tensor([5, 4]), semiring=semiring)
                log_z.sum().backward()


@functools.lru_cache(maxsize=1)
def _shipped_configs_once() -> list:
    return shipped_configs()


def _drive_part(numbers: Sequence[int]) -> Recorder:
    """Drive the shipped configs with these numbers (a worker process of :func:`record`)."""
    import torch

    configs = _shipped_configs_once()  # loading them costs ~1 s: once per worker process
    recorder = Recorder()
    torch.set_num_threads(1)
    with intercept(recorder), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. CPU autocast notes; nothing here computes real values
        for number in numbers:
            label, cfg = configs[number]
            drive_config(label, cfg, recorder, number)
    return recorder


def record(jobs: int = 1, counts: Sequence[int] = SPAN_COUNT_SWEEP,
           progress: Optional[Callable[[str], None]] = None) -> Recorder:
    """Drive every shipped config (in ``jobs`` processes), sweep the span counts, drive cumax and the three
    inside algorithms (dense, low-rank and simple)."""
    import torch

    configs = shipped_configs()
    recorder = Recorder()
    if jobs <= 1:
        for number, (label, _) in enumerate(configs):
            if progress:
                progress(label)
            recorder.merge(_drive_part([number]))
    else:
        import multiprocessing

        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for number, part in enumerate(pool.map(_drive_part, [[n] for n in range(len(configs))])):
                recorder.merge(part)
                if progress:
                    progress(f"{configs[number][0]} ({number + 1}/{len(configs)} configs, {jobs} processes)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with intercept(recorder), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if progress:
                progress("span-count sweep and cumax")
            sweep_span_counts(recorder, counts, len(configs))
            drive_cumax(recorder, len(configs) + 1)
            drive_inside_lowrank(recorder, len(configs) + 2)
            drive_inside(recorder, len(configs) + 3)
            drive_inside_simple(recorder, len(configs) + 4)
    finally:
        torch.set_num_threads(threads)
    return recorder
