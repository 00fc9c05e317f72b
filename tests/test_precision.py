"""``train.amp`` on a CPU: bf16 autocast where the processor has a bf16 matrix unit, float32 with a one-line reason
elsewhere (the detection can be forced either way), the precision recorded in the run's status; what must stay
float32 (the PCFGs' charts) stays so under autocast."""
from __future__ import annotations

import json
import os

import pytest
import torch
from typer.testing import CliRunner

import induce.kernels as K
from induce.cli.main import app
from induce.errors import InduceError
from induce.training.precision import FORCE_ENV, cpu_bf16_unit, resolve_precision

from helpers import make_corpus

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()

ZEN4 = {"avx512_bf16": True, "amx_bf16": False, "avx2": True}
SAPPHIRE_RAPIDS = {"avx512_bf16": True, "amx_bf16": True, "amx_tile": True}
AVX2_ONLY = {"avx2": True, "avx512_bf16": False, "amx_bf16": False}
NEOVERSE_V1 = {"neon": True, "bf16": True, "sve_bf16": True}


@pytest.mark.parametrize("capabilities, unit", [
    (ZEN4, "AVX512-BF16"), (SAPPHIRE_RAPIDS, "AMX"), (AVX2_ONLY, None), (NEOVERSE_V1, "Arm SVE-BF16"),
    ({"bf16": True}, "Arm BF16"), ({}, None)])
def test_the_unit_is_read_from_the_capabilities(capabilities, unit):
    assert cpu_bf16_unit(capabilities) == unit


def test_amp_is_bf16_where_the_cpu_has_the_unit_and_float32_with_a_reason_elsewhere():
    on = resolve_precision(True, "cpu", SAPPHIRE_RAPIDS, environ={})
    assert (on.dtype, on.unit, on.bf16) == ("bf16", "AMX", True) and "AMX" in on.reason
    off = resolve_precision(True, "cpu", AVX2_ONLY, environ={})
    assert (off.dtype, off.unit, off.bf16) == ("float32", None, False)
    assert "no bf16 matrix unit" in off.reason and "\n" not in off.reason
    assert resolve_precision(False, "cpu", SAPPHIRE_RAPIDS, environ={}).dtype == "float32"
    assert resolve_precision(True, "cuda", AVX2_ONLY, environ={}).dtype == "bf16"
    assert resolve_precision(False, "cuda", AVX2_ONLY, environ={}).dtype == "float32"


def test_the_detection_can_be_forced_either_way():
    forced_off = resolve_precision(True, "cpu", SAPPHIRE_RAPIDS, environ={FORCE_ENV: "0"})
    assert forced_off.dtype == "float32" and FORCE_ENV in forced_off.reason
    forced_on = resolve_precision(True, "cpu", AVX2_ONLY, environ={FORCE_ENV: "1"})
    assert forced_on.dtype == "bf16" and forced_on.unit == "emulated" and "slower" in forced_on.reason
    # forcing on where the unit exists names the unit, not emulation
    assert resolve_precision(True, "cpu", ZEN4, environ={FORCE_ENV: "1"}).unit == "AVX512-BF16"
    with pytest.raises(InduceError, match=f"{FORCE_ENV}='yes'"):
        resolve_precision(True, "cpu", ZEN4, environ={FORCE_ENV: "yes"})


def _train(root, name, amp, env, monkeypatch):
    corpus = root / "corpora" / "tiny"
    if not corpus.is_dir():
        make_corpus(root / "corpora", train=40, valid=6, test=2)
        corpus = next(p for p in (root / "corpora").iterdir() if p.is_dir())
    if env is None:
        monkeypatch.delenv(FORCE_ENV, raising=False)
    else:
        monkeypatch.setenv(FORCE_ENV, env)
    out = root / name
    result = runner.invoke(app, ["train", "--model", "prpn", "--corpus", str(corpus), "--out", str(out), "--device",
                                 "cpu", "--seed", "3", "--no-progress", "--max-steps", "4", "model.emb_size=8",
                                 "model.hidden_size=12", "data.batch_size=4", "data.bptt=8", "train.dev_f1=false",
                                 f"train.amp={'true' if amp else 'false'}"])
    assert result.exit_code == 0, result.output
    status = json.loads((out / "status.json").read_text())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return result.output, status, metrics[-1]["train_loss"]


def test_a_run_trains_in_bf16_when_forced_and_in_float32_when_forced_off(tmp_path, monkeypatch):
    """The bf16 path runs (emulated where the machine lacks the unit) and moves the figures; forced off, a run
    asking for amp trains exactly as one that does not."""
    fp32_out, fp32_status, fp32_loss = _train(tmp_path, "fp32", False, None, monkeypatch)
    assert "precision:" not in fp32_out and fp32_status["precision"]["dtype"] == "float32"
    off_out, off_status, off_loss = _train(tmp_path, "off", True, "0", monkeypatch)
    assert f"precision: float32: the bf16 matrix unit is switched off ({FORCE_ENV}=0)" in off_out
    assert off_status["precision"]["dtype"] == "float32" and off_loss == fp32_loss
    on_out, on_status, on_loss = _train(tmp_path, "on", True, "1", monkeypatch)
    assert "precision: bf16 autocast" in on_out and on_status["precision"]["dtype"] == "bf16"
    assert on_loss != fp32_loss and abs(on_loss - fp32_loss) < 0.05 * abs(fp32_loss)
    # config.yaml says which precision ran (a comment: the file still reads back as the run's config)
    from induce.config import load_config_file

    on_config = (tmp_path / "on" / "config.yaml").read_text()
    assert on_config.startswith("# precision: bf16") and "train.amp=true" in on_config.splitlines()[0]
    assert (tmp_path / "off" / "config.yaml").read_text().startswith("# precision: float32 (")
    assert load_config_file(tmp_path / "on" / "config.yaml").train.amp is True



def test_the_same_bf16_command_gives_the_same_figures_bit_for_bit(tmp_path, monkeypatch):
    """bf16 changes the figures against float32, not between two runs of the same command on one processor:
    the loss and every saved weight of two forced-bf16 runs are equal bit for bit."""
    from safetensors.torch import load_file

    _, _, first_loss = _train(tmp_path, "first", True, "1", monkeypatch)
    _, _, second_loss = _train(tmp_path, "second", True, "1", monkeypatch)
    assert first_loss == second_loss
    first, second = (load_file(str(next((tmp_path / n).glob("last*.safetensors")))) for n in ("first", "second"))
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)

def test_the_report_names_the_precision_and_the_matrix_unit():
    """The report's setup table: the machine line names the bf16 unit; a precision row says what the runs
    trained in, one phrase when they agree, per model otherwise, nothing where no run recorded it."""
    from induce.report.markdown import precision_text

    def runs(*precisions):
        return {"seeds": {str(i): {"run": {"precision": p}} for i, p in enumerate(precisions, 1)}}

    fp32 = {"dtype": "float32", "unit": None, "reason": "train.amp=false"}
    amx = {"dtype": "bf16", "unit": "AMX", "reason": "bf16 autocast on AMX (train.amp=true)"}
    assert precision_text({"prpn": runs(fp32, fp32), "cpcfg": runs(fp32)}, ["prpn", "cpcfg"]).startswith(
        "float32 for every run")
    mixed = precision_text({"prpn": runs(amx), "cpcfg": runs(fp32)}, ["prpn", "cpcfg"])
    assert "bf16 on AMX" in mixed and "float32" in mixed and "PRPN" in mixed
    assert precision_text({"prpn": runs(None)}, ["prpn"]) == ""


def _dense_inputs(batch=3, length=7, nt=5, pt=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = nt + pt
    terms = torch.randn(batch, length, pt, generator=g).log_softmax(-1)
    rules = torch.randn(batch, nt, s * s, generator=g).log_softmax(-1).view(batch, nt, s, s)
    roots = torch.randn(batch, nt, generator=g).log_softmax(-1)
    lengths = torch.tensor([length, length - 2, 2][:batch])
    return terms, rules, roots, lengths


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_the_pcfg_charts_stay_float32_under_cpu_autocast(backend):
    """The inside passes run on float32 inputs in float32 whatever autocast is on: the same log partition and
    the same gradients, bit for bit, inside ``torch.autocast("cpu", torch.bfloat16)`` and outside it."""
    def run(autocast):
        terms, rules, roots, lengths = (t.clone().requires_grad_(t.is_floating_point()) for t in _dense_inputs())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logz = K.inside(terms, rules, roots, lengths, backend=backend)
        assert logz.dtype == torch.float32
        logz.sum().backward()
        return logz.detach(), terms.grad, rules.grad, roots.grad

    for plain, cast in zip(run(False), run(True)):
        assert torch.equal(plain, cast)


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_the_low_rank_and_simple_charts_stay_float32_under_cpu_autocast(backend):
    g = torch.Generator().manual_seed(1)
    batch, length, nt, pt, rank = 2, 6, 4, 3, 5
    s = nt + pt
    terms = torch.randn(batch, length, pt, generator=g).log_softmax(-1)
    roots = torch.randn(batch, nt, generator=g).log_softmax(-1)
    head = torch.randn(batch, nt, rank, generator=g).log_softmax(-1)
    left = torch.randn(batch, s, rank, generator=g).log_softmax(1)
    right = torch.randn(batch, s, rank, generator=g).log_softmax(1)
    sleft = torch.randn(batch, s, nt, generator=g).log_softmax(1)
    sright = torch.randn(batch, s, nt, generator=g).log_softmax(1)
    lengths = torch.tensor([length, 3])
    outs = []
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            lowrank = K.inside_lowrank(terms, roots, head, left, right, lengths, backend=backend)
            simple = K.inside_simple(terms, roots, sleft, sright, lengths, backend=backend)
        assert lowrank.dtype == simple.dtype == torch.float32
        outs.append((lowrank, simple))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_the_unit_of_this_machine_is_what_torch_reports():
    """No assumption about the machine the tests run on: the detection agrees with torch's own cpuinfo."""
    caps = torch.cpu.get_capabilities()
    unit = cpu_bf16_unit()
    assert (unit is not None) == any(caps.get(k) is True for k in ("amx_bf16", "avx512_bf16", "sve_bf16", "bf16"))
    assert resolve_precision(True, "cpu", environ={}).bf16 == (unit is not None) or os.environ.get(FORCE_ENV)
