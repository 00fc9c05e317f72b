"""bench/pcfg_models.py: one training step of our neural PCFGs against the released code (tiny sizes here),
interleaved, with the faster original as the anchor; peak memory per step; the profile's breakdown of our
step by part. The prepared originals (bench/originals/prepare.py) are used where they are present."""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest
import torch

from helpers import script_module

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench" / "pcfg_models.py"
#: where bench/ORIGINALS.md prepares the originals (INDUCE_ORIGINALS overrides)
ORIGINALS = Path(os.environ.get("INDUCE_ORIGINALS", REPO / ".originals"))


@pytest.fixture(scope="module")
def bench():
    with script_module(BENCH, "bench_pcfg_models") as module:
        yield module


def stand_in(folder: Path, name: str, seconds: float, models: tuple = ("npcfg", "cpcfg", "tnpcfg")) -> Path:
    """A stand-in for an original's bench_entry.py: each step sleeps ``seconds`` and logs its name in the sibling
    module ``steps_log`` (the originals import their siblings too); ``MODELS`` as given."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder.parent / "steps_log.py").write_text("STEPS = []\n")
    entry = folder / "bench_entry.py"
    entry.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(folder.parent)!r})\n"
        "import steps_log\n"
        f"MODELS = {models!r}\n"
        "class T:\n"
        "    def __init__(self, batch, length):\n"
        "        self.batch, self.length = batch, length\n"
        "    def step(self):\n"
        f"        steps_log.STEPS.append({name!r})\n"
        f"        time.sleep({seconds})\n"
        "def make_trainer(device='cpu', model='npcfg', batch=4, length=20, tiny=False):\n"
        "    assert device == 'cpu' and tiny and model in MODELS\n"
        "    return T(batch, length)\n"
    )
    return entry


@pytest.mark.slow  # ~3 s of CPU: three models built, stepped and their peaks measured
def test_tiny_run_of_our_models(bench, tmp_path, one_thread):
    out = tmp_path / "steps.json"
    assert bench.main(["--tiny", "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    rows = payload["rows"]
    assert [row["model"] for row in rows] == ["npcfg", "cpcfg", "tnpcfg"]
    for row in rows:
        assert (row["batch"], row["length"], row["threads"]) == (2, 4, 1)
        assert row["ours"]["ms"] > 0 and len(row["ours"]["steps_ms"]) == 1 and row["ours"]["peak_mib"] >= 0
        assert row["ours"]["cpu_ms"] > 0
        assert row["originals"] == {} and row["anchor"] is None
    assert payload["started"]["tiny"] is True


def test_sizes_put_our_model_at_another_configs_sizes(bench, tmp_path):
    """``--sizes DIR``: DIR/<model>.yaml over the shipped config (the CPU profile's sizes), the rest kept."""
    (tmp_path / "npcfg.yaml").write_text("model:\n  nt_states: 3\n  t_states: 4\n  state_dim: 8\n")
    small = bench.OurStep("npcfg", 2, 4, sizes=tmp_path)
    assert (small.model.config.nt_states, small.model.config.t_states, small.model.config.state_dim) == (3, 4, 8)
    assert small.clip == 3.0 and small.optimizer.defaults["betas"] == (0.75, 0.999)


def test_the_faster_original_is_the_anchor_and_each_is_timed_in_every_round(bench, tmp_path, one_thread):
    fast = stand_in(tmp_path / "fast", "fast", 0.001)
    slow = stand_in(tmp_path / "slow", "slow", 0.05, models=("npcfg",))  # no cpcfg, no tnpcfg
    out = tmp_path / "steps.json"
    bench.main(["--tiny", "--models", "npcfg", "cpcfg", "--steps", "3", "--no-memory", "--json", str(out),
                "--external", f"slow={slow}", "--external", f"fast={fast}"])
    npcfg, cpcfg = json.loads(out.read_text())["rows"]
    assert npcfg["anchor"] == "fast"
    for name in ("slow", "fast"):
        figure = npcfg["originals"][name]
        assert len(figure["steps_ms"]) == 3 and figure["peak_mib"] is None
        assert figure["ratio"] == pytest.approx(figure["ms"] / npcfg["ours"]["ms"])
    assert npcfg["originals"]["slow"]["ms"] >= 50 > npcfg["originals"]["fast"]["ms"]
    assert npcfg["anchor_ratio"] == npcfg["originals"]["fast"]["ratio"]
    assert cpcfg["originals"]["slow"] == {"skipped": "slow has no cpcfg"} and cpcfg["anchor"] == "fast"
    table = bench.markdown_table([npcfg, cpcfg]).splitlines()
    assert table[0].startswith("| model | B x N | threads | ours ms | slow ms (ratio) | fast ms (ratio) | x anchor |")
    assert f"**{npcfg['anchor_ratio']:.1f}x** (fast)" in table[2] and "| slow has no cpcfg |" in table[3]
    import steps_log

    # one warm-up step and three rounds per cell
    assert steps_log.STEPS.count("slow") == 4 and steps_log.STEPS.count("fast") == 8
    sys.modules.pop("steps_log")


def test_skip_leaves_an_original_out_of_the_matching_cells(bench, tmp_path, one_thread):
    fast = stand_in(tmp_path / "fast", "fast", 0.0)
    out = tmp_path / "steps.json"
    bench.main(["--tiny", "--models", "npcfg", "tnpcfg", "--no-memory", "--json", str(out),
                "--external", f"fast={fast}", "--skip", "fast:tn*:2x4"])
    npcfg, tnpcfg = json.loads(out.read_text())["rows"]
    assert "ms" in npcfg["originals"]["fast"] and tnpcfg["originals"]["fast"] == {"skipped": "--skip"}
    assert tnpcfg["anchor"] is None
    sys.modules.pop("steps_log", None)


def test_a_long_step_runs_in_the_first_rounds_only(bench, monkeypatch):
    """The warm-up times come from a stand-in clock that only the steps advance (a loaded machine can stall
    any real step past the threshold)."""
    clock = [0.0]
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=lambda: clock[0],
                                                             process_time=lambda: clock[0]))

    class Sleeper:
        def __init__(self, seconds):
            self.seconds, self.calls = seconds, 0

        def step(self):
            self.calls += 1
            clock[0] += self.seconds

    quick, long = bench.Entry("quick", Sleeper(0.01)), bench.Entry("long", Sleeper(0.03))
    bench.interleave([quick, long], steps=4, long_step=0.02, long_steps=2)
    assert (quick.trainer.calls, len(quick.times)) == (5, 4)
    assert (long.trainer.calls, len(long.times)) == (3, 2)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak memory reads Linux's /proc")
def test_peak_memory_is_what_a_step_holds_at_once(bench):
    def holds_64_mib():
        block = torch.ones(16 * 2**20)  # 64 MiB, written: resident
        del block

    def holds_little():
        torch.ones(16).sum()

    assert 60 < bench.peak_step_mib(holds_64_mib) < 80
    assert bench.peak_step_mib(holds_little) < 8


def test_the_profile_charges_our_step_to_its_parts(bench, one_thread):
    """The compound PCFG's step has an inference network, emissions, rules, roots, the inside pass and the
    optimiser, each forward and backward; the N-PCFG's has no inference network."""
    compound = bench.profile_model("cpcfg", 2, 4, 1, steps=1, tiny=True)
    for part in ("inference network", "emissions", "rules", "roots", "inside"):
        assert compound["parts"][part]["forward"] > 0 and compound["parts"][part]["backward"] > 0, part
    assert compound["parts"]["optimiser"]["optimiser"] > 0
    # what the parts leave of a phase is "other": never negative (no time counted twice)
    assert compound["parts"]["other"]["forward"] >= 0 and compound["parts"]["other"]["backward"] >= 0
    lines = list(compound["lines"])
    assert any("inside(" in line for line in lines) and any("self.rnn" in line for line in lines)
    neural = bench.profile_model("npcfg", 2, 4, 1, steps=1, tiny=True)
    assert "inference network" not in neural["parts"] and neural["parts"]["inside"]["backward"] > 0


def test_the_profile_attributes_a_line_to_the_first_part_it_names(bench):
    """From the innermost model line outwards, the first line that names a part decides (a residual layer's
    line names none: the emission network's line that called it does)."""
    part, where = bench.model_line(_frames_calling_from("pcfg.py", [
        "return F.relu(self.lin2(F.relu(self.lin1(x)))) + x",
        "emissions = self.vocab_mlp(self.t_emb).log_softmax(-1)",
    ])).split("|", 1)
    assert part == "emissions" and where.endswith("emissions = self.vocab_mlp(self.t_emb).log_softmax(-1)")
    assert bench.model_line(_frames_calling_from("other.py", ["x = y"])) == "other|(outside the model)"


def _frames_calling_from(file_name: str, lines: list[str]):
    """A stand-in frame chain, innermost first, whose frames sit on ``lines`` of a fake ``induce/models/`` file."""
    import linecache

    path = f"{os.sep}repo{os.sep}induce{os.sep}models{os.sep}{file_name}" if file_name != "other.py" else "/x/other.py"
    linecache.cache[path] = (0, None, [f"{line}\n" for line in lines], path)
    frame = None
    for number in range(len(lines), 0, -1):
        frame = types.SimpleNamespace(f_code=types.SimpleNamespace(co_filename=path), f_lineno=number, f_back=frame)
    return frame


def _prepared() -> str | None:
    missing = [name for name in ("compound-pcfg", "tn-pcfg") if not (ORIGINALS / name / "bench_entry.py").is_file()]
    if missing:
        return (f"the originals are not prepared in {ORIGINALS} ({', '.join(missing)}; bench/ORIGINALS.md says how: "
                f"bench/originals/prepare.py)")
    return None


@pytest.mark.slow  # ~3.5 s of CPU
@pytest.mark.skipif(_prepared() is not None, reason=str(_prepared()))
def test_tiny_run_of_the_originals(bench, tmp_path, one_thread):
    """The prepared originals' entries run at tiny sizes beside ours: compound-pcfg's N-PCFG and C-PCFG,
    TN-PCFG's three models."""
    out = tmp_path / "steps.json"
    bench.main(["--tiny", "--json", str(out),
                "--external", f"compound-pcfg={ORIGINALS / 'compound-pcfg' / 'bench_entry.py'}",
                "--external", f"tn-pcfg={ORIGINALS / 'tn-pcfg' / 'bench_entry.py'}"])
    rows = {row["model"]: row for row in json.loads(out.read_text())["rows"]}
    for model in ("npcfg", "cpcfg"):
        assert {name: "ms" in figure for name, figure in rows[model]["originals"].items()} == {
            "compound-pcfg": True, "tn-pcfg": True}
    assert rows["tnpcfg"]["originals"]["compound-pcfg"] == {"skipped": "compound-pcfg has no tnpcfg"}
    assert rows["tnpcfg"]["originals"]["tn-pcfg"]["peak_mib"] >= 0
