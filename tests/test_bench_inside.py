"""bench/inside.py: the interleaved rounds vary each call's predecessor, and the eager Viterbi column runs
on the eager loops."""
from __future__ import annotations

from pathlib import Path

import pytest

from induce.kernels.pcfg import native as inside_native

from helpers import script_module

BENCH = Path(__file__).resolve().parents[1] / "bench" / "inside.py"


@pytest.fixture(scope="module")
def bench_inside():
    with script_module(BENCH, "bench_inside") as module:
        yield module


def test_no_call_follows_the_same_call_in_every_round(bench_inside):
    """A fixed order rotated by one per round kept every predecessor: inside + backward always ran right
    after torch-struct's ~4 GB stream."""
    ran = []
    names = ["inside+backward", "inside forward", "viterbi", "viterbi, eager", "marginals", "torch-struct"]
    times = bench_inside.time_interleaved({name: (lambda name=name: ran.append(name)) for name in names}, repeats=7)
    assert set(times) == set(names)
    rounds = [ran[i:i + len(names)] for i in range(0, len(ran), len(names))]
    assert len(rounds) == 8 and all(sorted(r) == sorted(names) for r in rounds)
    for name in names:
        before = {r[r.index(name) - 1] if r.index(name) else None for r in rounds}
        assert len(before) > 2, (name, before)


def test_the_eager_viterbi_column_runs_without_the_compiled_loops(bench_inside, monkeypatch):
    seen = []
    monkeypatch.setattr(bench_inside.K, "viterbi",
                        lambda *args, **kwargs: seen.append(inside_native.usable(args[0])))
    fns = bench_inside.calls(bench_inside.make_inputs(2, 4, 3, 5), "torch")
    fns["viterbi, eager"]()
    fns["viterbi"]()
    assert seen == [False, inside_native.library() is not None]
