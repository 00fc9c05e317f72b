"""``make gpu-check`` (bench/gpu_check.py) without a GPU: the CPU dry run starts every step and leaves a
results folder that fits a remote machine's transfer limits; the preflight refuses in seconds (no CUDA,
a missing import, a carried wheel whose requirement is not met) before any step runs."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from helpers import script_module

REPO = Path(__file__).resolve().parents[1]
STEPS = ["preflight", "prepare-corpus", "bench-onlstm", "bench-prpn", "bench-palm", "kernel-tests", "capture-tests",
         "cudnn-weights", "pcfg-train", "compile-test"]
TREE = "( (S (NP-SBJ (DT The) (NN {noun}) ) (VP (VBD {verb}) (PP (IN on) (NP (DT the) (NN {place}) ))) (. .) ))\n"
NOUNS, VERBS, PLACES = ("cat", "dog", "man", "bird", "child"), ("sat", "slept", "ran"), ("mat", "hill", "roof", "road")


@pytest.fixture(scope="module")
def gpu_check():
    with script_module(REPO / "bench" / "gpu_check.py", "gpu_check") as module:
        yield module


def make_data_root(root: Path) -> Path:
    """wsj/02-21.mrg and wsj/22.mrg with a few dozen small trees."""
    (root / "wsj").mkdir(parents=True)
    trees = [TREE.format(noun=n, verb=v, place=p) for n in NOUNS for v in VERBS for p in PLACES]
    (root / "wsj" / "02-21.mrg").write_text("".join(trees[:40]))
    (root / "wsj" / "22.mrg").write_text("".join(trees[40:]))
    return root


def make_wheel(folder: Path, module: str, requires: tuple = ()) -> Path:
    """A minimal pure-Python wheel holding ``module`` (``VALUE = 1``) that declares ``requires``."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{module}-1.0.dist-info"
    path = folder / f"{module}-1.0-py3-none-any.whl"
    files = {
        f"{module}/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: " + module.replace("_", "-") + "\nVersion: 1.0\n"
                            + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def make_originals(root: Path) -> Path:
    """Stand-ins for bench/originals/prepare.py's folders: each entry imports a sibling module, as the
    original code bases do, and takes the device argument."""
    for name in ("onlstm", "prpn", "palm"):
        folder = root / name
        folder.mkdir(parents=True)
        (folder / f"{name}_helper.py").write_text("WORK = 2000\n")
        (folder / "bench_entry.py").write_text(
            f"import {name}_helper\n"
            "class Step:\n"
            "    batch, bptt = 2, 3\n"
            "    def step(self):\n"
            f"        sum(range({name}_helper.WORK))\n"
            "def make_trainer(device='cpu'):\n"
            "    assert device == 'cpu'\n"
            "    return Step()\n")
    return root


def outputs(out: Path) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    steps = {step["name"]: step for step in summary["steps"]}
    return {"summary": summary, "steps": steps, "log": (out / "gpu-check.log").read_text()}


@pytest.mark.slow
def test_dry_run_starts_every_step(gpu_check, tmp_path, monkeypatch):
    """Every step runs in its CPU form; the wheel folder is installed and put on the children's path (a module
    only it holds is imported by the preflight); the stand-in originals are timed beside our models."""
    monkeypatch.setattr(gpu_check, "REQUIRED_MODULES", gpu_check.REQUIRED_MODULES + ("gc_probe_mod",))
    out = tmp_path / "out"
    code = gpu_check.main(["--dry-run", "--data", str(make_data_root(tmp_path / "data")),
                           "--wheels", str(make_wheel(tmp_path / "wheels", "gc_probe_mod").parent),
                           "--originals", str(make_originals(tmp_path / "originals")), "--out", str(out),
                           "--work", str(tmp_path / "work")])
    result = outputs(out)
    steps = result["steps"]
    assert list(steps) == STEPS
    compile_test_there = (REPO / gpu_check.COMPILE_TEST).is_file()
    for name, step in steps.items():
        if name == "compile-test" and not compile_test_there:  # not merged yet: a failed step, not a crash
            assert step["status"] == "failed" and "missing" in step["note"]
        else:
            assert step["status"] == "ok", (name, step.get("note"), step.get("output_tail"))
        if name != "preflight":
            assert f"END {name}" in result["log"] or step["status"] == "failed"
    assert code == (0 if compile_test_there else 1)
    assert result["summary"]["status"] == ("done" if compile_test_there else "failed")
    assert "tests collected" in steps["kernel-tests"]["note"] and "tests collected" in steps["capture-tests"]["note"]

    # the benchmark rows: ours, graphed, the original (the stand-in), and one `induce train` epoch per model
    bench_rows = {row["model"]: row for row in json.loads((out / "bench_models.json").read_text())}
    for entry in ("onlstm", "prpn", "palm-h1120-m10"):
        for name in (entry, f"{entry}+graphs", f"{entry}-original"):
            assert bench_rows[name]["train_tokens_per_s"] > 0, name
        ops = bench_rows[entry]["top_ops"]  # where our eager step spends its time (--profile-ops)
        assert ops and all(op["self_ms_per_step"] >= 0 and op["op"] for op in ops), entry
    rows = json.loads((out / "gpu_training.json").read_text())
    assert [row["model"] for row in rows] == ["onlstm", "prpn", "palm-h1120-m10"]
    for row in rows:
        assert row["original_tok_s"] > 0 and row["induce_train_epoch1_tok_s"] > 0 and row["device"].startswith("cpu")

    # the PCFG runs (toy sizes on the dry run): one row per model, with its steps and seconds per step
    pcfg = json.loads((out / "pcfg_gpu.json").read_text())
    assert [row["model"] for row in pcfg] == list(gpu_check.PCFG_MODELS)
    for row in pcfg:
        assert row["steps"] == 1 and row["s_per_step"] > 0 and "dev_f1" in row["last_row"]

    # what comes back from a remote machine: at most 8 plain files, no folders, each < 16 MiB
    entries = list(out.iterdir())
    assert len(entries) <= 8 and all(p.is_file() and p.stat().st_size < 16 * 2**20 for p in entries)
    assert {p.name for p in entries} == {"summary.json", "gpu-check.log", "gpu_training.json", "bench_models.json",
                                         "pcfg_gpu.json"}


def test_without_originals_the_original_step_is_skipped_with_the_reason(gpu_check, tmp_path):
    paths = gpu_check.Paths(out=tmp_path / "out", work=tmp_path / "work", data=tmp_path / "data", originals=None)
    steps = gpu_check.plan(paths, dry=False)
    assert [step.name for step in steps] == list(gpu_check.STEP_NAMES) == STEPS[1:]
    benches = [step for step in steps if step.bench is not None]
    assert [step.name for step in benches] == ["bench-onlstm", "bench-prpn", "bench-palm"]
    for step in benches:
        command = step.commands[0]
        assert "--external" not in command and "cuda" in command and "--epochs" in command
        assert "ORIGINALS=DIR" in step.result["original"]
    originals = make_originals(tmp_path / "originals")
    shutil.rmtree(originals / "palm")
    paths.originals = originals
    by_name = {step.name: step for step in gpu_check.plan(paths, dry=False)}
    assert f"onlstm-original={originals / 'onlstm' / 'bench_entry.py'}" in by_name["bench-onlstm"].commands[0]
    assert "bench_entry.py is missing" in by_name["bench-palm"].result["original"]
    assert "--external" not in by_name["bench-palm"].commands[0]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is there: the real run would start")
def test_bare_make_gpu_check_refuses_without_cuda(tmp_path):
    """Without DRY=1 on a CPU machine: the preflight refuses (exit 2) and names the way out; no step runs."""
    out = tmp_path / "out"
    data = make_data_root(tmp_path / "data")
    if shutil.which("make"):
        command = ["make", "-s", "gpu-check", f"OUT={out}", f"DATA={data}", f"PYTHON={sys.executable}"]
    else:
        command = [sys.executable, "-u", "bench/gpu_check.py", "--out", str(out), "--data", str(data)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA device" in done.stdout and "DRY=1" in done.stdout
    result = outputs(out)
    assert list(result["steps"]) == ["preflight"] and result["summary"]["status"] == "refused"


@pytest.mark.slow
def test_preflight_names_a_missing_module_and_an_unmet_wheel_requirement(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "REQUIRED_MODULES", gpu_check.REQUIRED_MODULES + ("no_such_module_for_gpu_check",))
    wheels = make_wheel(tmp_path / "wheels", "gc_needy_mod", requires=("no-such-dist-for-gpu-check>=1",)).parent
    out = tmp_path / "out"
    code = gpu_check.main(["--dry-run", "--data", str(make_data_root(tmp_path / "data")), "--wheels", str(wheels),
                           "--out", str(out), "--work", str(tmp_path / "work")])
    assert code == 2
    result = outputs(out)
    assert list(result["steps"]) == ["preflight"]
    note = result["steps"]["preflight"]["note"]
    assert "import no_such_module_for_gpu_check: ModuleNotFoundError" in note and "WHEELS" in note
    assert "gc-needy-mod 1.0 (from WHEELS) needs no-such-dist-for-gpu-check>=1, which is not installed" in note
    assert (tmp_path / "work" / "site" / "gc_needy_mod" / "__init__.py").is_file()  # installed with --target


def test_preflight_refuses_a_missing_wheel_folder_and_data(gpu_check, tmp_path, monkeypatch):
    monkeypatch.delenv("INDUCE_DATA", raising=False)
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path / "a")]) == 2
    assert "no data root" in outputs(tmp_path / "a")["steps"]["preflight"]["note"]
    assert gpu_check.main(["--dry-run", "--data", str(tmp_path), "--wheels", str(tmp_path / "nowhere"),
                           "--out", str(tmp_path / "b")]) == 2
    assert f"WHEELS={tmp_path / 'nowhere'}: no such folder" in outputs(tmp_path / "b")["steps"]["preflight"]["note"]
