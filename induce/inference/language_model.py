"""A trained run as a language model: perplexity of a prepared corpus split or of any sentences
(:func:`lm_perplexity`, :func:`sentences_perplexity`, the run's eval batching), and text generation
(:func:`generate`: sampling with a temperature, or beam search).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence, Union

import torch

from induce.errors import InduceError
from induce.inference.loading import LoadedRun, as_loaded
from induce.inference.predict import normalize
from induce.models.base import STREAM_LM
from induce.training.trainer import map_state


def lm_perplexity(run: Union[str, Path, LoadedRun], corpus_dir: Union[str, Path], split: str = "valid",
                  device: Union[str, torch.device] = "auto") -> float:
    """Perplexity of the run's model on ``split`` of a prepared corpus (see :func:`sentences_perplexity`)."""
    from induce.data.corpus import PreparedCorpus

    return sentences_perplexity(run, PreparedCorpus(corpus_dir).lm_sentences(split), device)


def sentences_perplexity(run: Union[str, Path, LoadedRun], sentences: Sequence[Sequence[str]],
                         device: Union[str, torch.device] = "auto") -> float:
    """Perplexity of the run's model on ``sentences`` (token lists; words outside its vocabulary count as
    ``<unk>``), read as one stream with the run's eval batching: ``data.eval_batch_size`` streams (fewer
    for a short text), ``data.bptt`` segments, state carried (as ``induce eval --lm``). A model with a
    sentence-level objective reads whole sentences (``data.eval_batch_size`` at a time): the exponential of its
    loss per token, e.g. a PCFG's bound (:meth:`induce.training.objectives.SentenceLevel.loss_per_token`)."""
    from induce.training.batching import batchify, stream_ids
    from induce.training.trainer import evaluate_lm

    loaded = as_loaded(run, device)
    data_cfg = loaded.config["data"]
    model = loaded.model
    if model.objective is not STREAM_LM:
        # A sentence-level model (e.g. a PCFG): its loss per token over whole sentences, as its validation.
        from induce.training.objectives import build

        objective = build(model.objective)
        ids = [loaded.vocab.encode(list(sentence)) for sentence in sentences if sentence]
        return math.exp(objective.loss_per_token(model, ids, data_cfg["eval_batch_size"],
                                                 next(model.parameters()).device))
    stream = stream_ids(sentences, loaded.vocab)
    batch = max(1, min(data_cfg["eval_batch_size"], stream.numel() // 2))
    loss = evaluate_lm(loaded.model, batchify(stream, batch), data_cfg["bptt"], next(loaded.model.parameters()).device)
    return math.exp(loss)


@torch.no_grad()
def generate(
    run: Union[str, Path, LoadedRun],
    n_words: int = 50,
    temperature: float = 1.0,
    beam: Optional[int] = None,
    prompt: Optional[Sequence[str]] = None,
    seed: Optional[int] = None,
    device: Union[str, torch.device] = "auto",
) -> list[str]:
    """Generated tokens (``<eos>`` marks sentence ends).

    Sampling (``beam=None``): ``n_words`` tokens drawn from ``softmax(logits / temperature)``.
    Beam search (``beam=K``): the most probable continuation up to the first ``<eos>`` or
    ``n_words`` tokens, finished hypotheses ranked by mean log-probability per token (raw sums
    would favour the shortest sentence). The context is ``<eos>`` followed by the normalised prompt.
    """
    if math.isnan(temperature):
        raise InduceError(f"--temperature {temperature}: not a number; give a positive number (1 samples the "
                          "model's own distribution)")
    if not 0 < temperature < math.inf:
        raise InduceError(f"--temperature {temperature}: must be positive and finite")
    if beam is not None and beam < 1:
        raise InduceError("--beam must be at least 1")
    loaded = as_loaded(run, device)
    model, vocab = loaded.model, loaded.vocab
    dev = next(model.parameters()).device
    context = [vocab.eos_id] + vocab.encode(normalize(prompt or []))
    state = model.init_state(1, dev)
    out = model(torch.tensor([context], device=dev), state)
    log_probs = torch.log_softmax(model.logits(out.hidden[:, -1]).float(), -1)  # [1, V]
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed if seed is not None else torch.seed() % 2**63)
    if beam is None:
        tokens = []
        state = out.state
        for _ in range(n_words):
            probs = torch.softmax(log_probs.cpu() / temperature, -1)
            token = int(torch.multinomial(probs[0], 1, generator=generator))
            tokens.append(token)
            out = model(torch.tensor([[token]], device=dev), state)
            state = out.state
            log_probs = torch.log_softmax(model.logits(out.hidden[:, -1]).float(), -1)
        return vocab.decode(tokens)
    return vocab.decode(_beam_search(model, out.state, log_probs, beam, n_words, vocab.eos_id, dev))


def _beam_search(model, state, log_probs, beam: int, max_words: int, eos_id: int, device) -> list[int]:
    """Beam search from one context; ``log_probs [1, V]`` of the first token; ``state`` batch 1."""
    state = map_state(state, lambda t: t.expand(beam, *t.shape[1:]).contiguous())
    scores = torch.full((beam,), float("-inf"), device=device)
    scores[0] = 0.0  # all beams start identical: expand only the first
    log_probs = log_probs.expand(beam, -1)
    sequences: list[list[int]] = [[] for _ in range(beam)]
    finished: list[tuple[float, list[int]]] = []
    for step in range(max_words):
        vocab_size = log_probs.size(-1)
        candidates = (scores[:, None] + log_probs).reshape(-1)
        top_scores, top_index = candidates.topk(min(2 * beam, candidates.numel()))
        next_beams, next_scores, next_tokens = [], [], []
        for score, index in zip(top_scores.tolist(), top_index.tolist()):
            origin, token = divmod(index, vocab_size)
            if math.isinf(score):
                continue
            sequence = sequences[origin] + [token]
            if token == eos_id or step == max_words - 1:
                finished.append((score / len(sequence), sequence))
            else:
                next_beams.append(origin)
                next_scores.append(score)
                next_tokens.append(token)
            if len(next_beams) == beam:
                break
        if not next_beams or len(finished) >= beam:
            break
        index = torch.tensor(next_beams, device=device)
        sequences = [sequences[o] + [t] for o, t in zip(next_beams, next_tokens)]
        state = map_state(state, lambda t, index=index: t.index_select(0, index))
        scores = torch.tensor(next_scores, device=device)
        out = model(torch.tensor(next_tokens, device=device)[:, None], state)
        state = out.state
        log_probs = torch.log_softmax(model.logits(out.hidden[:, -1]).float(), -1)
    if not finished:
        return sequences[0]
    return max(finished, key=lambda f: f[0])[1]
