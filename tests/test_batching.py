"""BPTT length bucketing (:func:`induce.training.batching.bucket_length`): few static shapes, the
same random draws, and the same loss as the unbucketed, eager steps on the same data."""
from __future__ import annotations

import os

import numpy as np
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import pytest  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import induce.kernels as K  # noqa: E402
from induce.models.registry import get_model_class  # noqa: E402
from induce.training import batching  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _lengths(seed: int, n: int, **kwargs) -> list[int]:
    rng = np.random.default_rng(seed)
    return [batching.next_segment_length(rng, 70, 5.0, 5, 20, **kwargs) for _ in range(n)]


def test_bucketed_lengths_are_few_multiples_within_bounds():
    plain, bucketed = _lengths(0, 3000), _lengths(0, 3000, bucket=8)
    assert all(length % 8 == 0 and 8 <= length <= 88 for length in bucketed)
    assert len(set(bucketed)) <= 10 < len(set(plain))
    # rounding to the nearest multiple: every length moves by at most bucket / 2 ...
    assert all(abs(b - p) <= 4 for b, p in zip(bucketed, plain) if 8 <= p <= 88)
    # ... so the mean segment length (and the lr rescaling's mean) stays put
    assert abs(np.mean(bucketed) - np.mean(plain)) < 1.0


def test_bucketing_consumes_the_generator_like_the_plain_draw():
    """Resume restores the generator state; bucketing must not change how many draws a step takes."""
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(100):
        batching.next_segment_length(a, 70, bucket=8)
        batching.next_segment_length(b, 70)
    assert a.bit_generator.state == b.bit_generator.state


def test_bucket_length_edge_cases():
    assert batching.bucket_length(3, 8, 5, 90) == 8  # below the first multiple inside the bounds
    assert batching.bucket_length(89, 8, 5, 90) == 88  # above the last one
    assert batching.bucket_length(68, 8, 5, 90) == 72  # tie rounds up
    assert batching.bucket_length(67, 8, 5, 90) == 64
    assert batching.bucket_length(6, 8, 5, 7) == 6  # no multiple of 8 in [5, 7]: unchanged
    assert batching.next_segment_length(None, 70, bucket=8) == 72


def _stream_loss(model, data: torch.Tensor, lengths: list[int], backend: str) -> float:
    """Mean cross-entropy over the whole stream read in consecutive segments of ``lengths``."""
    state = model.init_state(data.size(0), data.device)
    total, count, position = 0.0, 0, 0
    lengths = iter(lengths)
    with torch.no_grad(), K.use_backend(backend):
        while position < data.size(1) - 1:
            inputs, targets = batching.segment(data, position, next(lengths))
            out = model(inputs, state)
            logits = model.logits(out.hidden)
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum").item()
            count += targets.numel()
            state, position = out.state, position + inputs.size(1)
    assert position == data.size(1) - 1  # every token read once, none padded or skipped
    return total / count


def _tiny_onlstm():
    cls = get_model_class("onlstm")
    torch.manual_seed(0)
    config = cls.Config(emb_size=12, hidden_size=20, chunk_size=4, n_layers=2, distance_layer=0)
    return cls(31, config).eval().to(DEVICE)


def test_bucketed_segments_give_the_loss_of_the_plain_segments():
    """The forward pass carries the state across segments, so where segments end does not change
    the stream's loss: bucketed and plain segmentations agree (eager steps)."""
    model = _tiny_onlstm()
    data = batching.batchify(torch.randint(0, 31, (2 * 301,), generator=torch.Generator().manual_seed(1)), 2)
    data = data.to(DEVICE)
    plain = _stream_loss(model, data, _lengths(2, 100), "torch")
    bucketed = _stream_loss(model, data, _lengths(2, 100, bucket=8), "torch")
    assert plain == pytest.approx(bucketed, rel=1e-5)


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.skipif(K.triton_unavailable_reason() is not None, reason="triton cannot be imported")
def test_bucketed_fused_steps_give_the_eager_loss():
    """Bucketed segments through the fused ON-LSTM cell (Triton) give the eager steps' loss."""
    model = _tiny_onlstm()
    data = batching.batchify(torch.randint(0, 31, (2 * 45,), generator=torch.Generator().manual_seed(2)), 2)
    data = data.to(DEVICE)
    lengths = _lengths(3, 50, bucket=8)
    assert _stream_loss(model, data, lengths, "triton") == pytest.approx(
        _stream_loss(model, data, lengths, "torch"), rel=1e-5)


@pytest.mark.slow
def test_trainer_reads_bucketed_segments(tmp_path):
    """``data.bptt_bucket`` reaches the training loop: every segment but the row's clipped last one
    has a bucketed length, and the epoch still reads every position once."""
    from rich.console import Console

    from induce.config import load_config
    from induce.training import train

    from helpers import STANDIN, make_corpus

    corpus = make_corpus(tmp_path / "corpora", train=40, valid=6, test=4)
    config = load_config(STANDIN, overrides=[
        f"data.corpus={corpus}", "data.batch_size=2", "data.bptt=8", "data.min_bptt=2", "data.bptt_std=3",
        "data.bptt_bucket=4", "train.epochs=1", "train.device=cpu", "train.dev_f1=false", "optim.asgd=never",
    ])
    positions = [0]
    train(config, tmp_path / "run", console=Console(quiet=True), progress=False,
          on_batch=lambda trainer, epoch, batch: positions.append(trainer.parts.loop.position))
    lengths = np.diff(positions)
    assert len(lengths) > 5 and all(length % 4 == 0 for length in lengths[:-1])
    assert len(set(lengths[:-1].tolist())) > 1  # still random lengths, only bucketed


def test_auto_bucket_is_the_largest_divisor_of_bptt_within_one_and_a_half_std():
    assert batching.auto_bucket(70, 5.0) == 7  # the papers' bptt and std: 1, 2, 5, 7 divide 70 and are <= 7.5
    assert batching.auto_bucket(35, 5.0) == 7
    assert batching.auto_bucket(64, 5.0) == 4
    assert batching.auto_bucket(71, 5.0) == 1  # a prime bptt: no rounding
    assert batching.auto_bucket(70, 0.0) == 1
    for bptt in range(2, 120):
        for std in (0.5, 2.0, 5.0, 9.0):
            bucket = batching.auto_bucket(bptt, std)
            assert bptt % bucket == 0 and (bucket == 1 or bucket <= 1.5 * std)
            assert not any(bptt % d == 0 for d in range(bucket + 1, int(1.5 * std) + 1))


@pytest.mark.parametrize("bucket", [0, 7, 8])
def test_segment_length_distribution_matches_the_draws(bucket):
    """The computed distribution of the bucketed lengths (what the trainer states) against 100k draws."""
    expected = batching.segment_length_distribution(70, 5.0, 5, 20, bucket)
    assert sum(expected.values()) == pytest.approx(1.0, abs=1e-9)
    draws = _lengths(11, 100_000, bucket=bucket)
    counts = {length: draws.count(length) / len(draws) for length in set(draws)}
    assert set(counts) <= set(expected)
    for length, p in expected.items():
        assert counts.get(length, 0.0) == pytest.approx(p, abs=0.004), length
    mean = sum(length * p for length, p in expected.items())
    assert np.mean(draws) == pytest.approx(mean, abs=0.15)


def test_the_automatic_bucket_keeps_the_length_distribution_centred():
    """Rounding to a divisor of bptt keeps the mean length (steps per epoch, the lr's mean scale) where
    the unbucketed draws have it; a non-divisor of similar width moves it by ~0.5 (see graphs.py)."""
    def moments(bucket):
        dist = batching.segment_length_distribution(70, 5.0, 5, 20, bucket)
        mean = sum(length * p for length, p in dist.items())
        return mean, sum((length - mean) ** 2 * p for length, p in dist.items()) ** 0.5

    (plain_mean, plain_std), (auto_mean, auto_std) = moments(0), moments(batching.auto_bucket(70, 5.0))
    assert abs(auto_mean - plain_mean) < 0.01 < abs(moments(8)[0] - plain_mean)
    assert plain_std < auto_std < plain_std * 1.03
