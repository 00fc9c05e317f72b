"""The small tasks ``bench/gpu_check.py`` runs in child processes, with the environment every step gets
(the carried wheels on PYTHONPATH, the repository importable):

    python bench/gpu_check_tasks.py preflight '{"modules": [...], "cuda": true, "data": "DIR", "site": "DIR"}'
    python bench/gpu_check_tasks.py cudnn-weights DEVICE N_IN N_HIDDEN BATCH STEPS
    python bench/gpu_check_tasks.py dry-data DATA_ROOT OUT_ROOT N_TRAIN N_VALID
    python bench/gpu_check_tasks.py subsets CORPUS CORPORA_DIR N1,N2,.. N_VALID
    python bench/gpu_check_tasks.py run-figures OUT_JSON RUN_DIR [RUN_DIR ...]

``preflight`` prints ``GPU_CHECK_PROBE {"problems": [...], "info": {...}}`` as its last line: imports, the
carried wheels' requirements, CUDA, versions, the data. Standard library at the top: every other import is
tried inside a task, so that a missing package becomes a problem line, not a traceback.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def probe(spec: dict) -> dict:
    """Child side of the preflight: imports, the carried wheels' requirements, CUDA, versions, the data."""
    problems, info = [], {"python": sys.version.split()[0]}
    for name in spec["modules"]:
        try:
            __import__(name)
        except Exception as err:  # noqa: BLE001 -- any import failure is reported, whatever it is
            hint = " (carry its wheel: WHEELS=DIR)" if isinstance(err, ModuleNotFoundError) else ""
            problems.append(f"import {name}: {type(err).__name__}: {err}{hint}")
    if spec.get("site"):
        problems += wheel_requirement_problems(spec["site"])
    try:
        import torch

        info["torch"], info["cuda"] = torch.__version__, torch.version.cuda
        info["cuda_available"] = torch.cuda.is_available()
        if info["cuda_available"]:
            info["device"] = torch.cuda.get_device_name(0)
            info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        elif spec["cuda"]:
            problems.append(f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False): "
                            "`make gpu-check` measures a GPU; here, `make gpu-check DRY=1` checks that every "
                            "step starts")
    except ImportError:
        pass  # already reported with the imports
    except Exception as err:  # noqa: BLE001 -- e.g. a driver that does not answer
        problems.append(f"CUDA check: {type(err).__name__}: {err}")
    for name in ("triton", "nltk", "pydantic", "numpy"):
        module = sys.modules.get(name)
        info[name] = getattr(module, "__version__", None)
    try:
        from induce.data.locate import find_treebank

        source = find_treebank(Path(spec["data"])) if spec.get("data") else None
        if source is None:
            problems.append(f"no treebank in DATA={spec.get('data')} (a data root with wsj/02-21.mrg and "
                            "wsj/22.mrg, the LDC layout or the NLTK sample; bench/results/gpu.md says how to carry it)")
        else:
            info["data"] = f"{source.kind} in {source.folder}"
    except Exception as err:  # noqa: BLE001
        problems.append(f"data check: {type(err).__name__}: {err}")
    return {"problems": problems, "info": info}


def wheel_requirement_problems(site: str) -> list[str]:
    """Requirements of the distributions installed in ``site`` that nothing on the path satisfies."""
    from importlib import metadata

    try:
        from packaging.requirements import Requirement
    except ImportError:
        return []  # cannot check; the imports above still do
    problems = []
    for dist in metadata.distributions(path=[site]):
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            who = f"{dist.metadata['Name']} {dist.version} (from WHEELS) needs {requirement}"
            try:
                found = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                problems.append(f"{who}, which is not installed: add its wheel to WHEELS")
                continue
            if not requirement.specifier.contains(found, prereleases=True):
                problems.append(f"{who}; found {found}: add a wheel of a matching version to WHEELS")
    return problems


def cudnn_weights(device: str, n_in: int, n_hidden: int, batch: int, steps: int) -> None:
    """One training step of a WeightDropLSTM. Run under ``-W error:RNN module weights:UserWarning``: on CUDA
    its single-buffer weights must not make cuDNN copy them at every call (the warning becomes an error)."""
    import torch

    from induce.models.common.awd import WeightDropLSTM

    lstm = WeightDropLSTM(n_in, n_hidden, 0.5).to(device).train()
    zeros = torch.zeros(batch, n_hidden, device=device)
    out, _ = lstm(torch.randn(batch, steps, n_in, device=device), (zeros, zeros))
    out.sum().backward()
    print(f"WeightDropLSTM({n_in}, {n_hidden}) step on {device}: no RNN-weights warning")


def dry_data(root: str, target: str, n_train: int, n_valid: int) -> None:
    """A data root of a few trees for the dry run, from the first file of ``root``'s dev split (reading all of
    WSJ 02-21 would take most of a minute on a small CPU)."""
    from induce.data.locate import find_treebank
    from induce.trees.brackets import read_trees, write_trees

    trees = [located.tree for located in read_trees(find_treebank(Path(root)).split_files["valid"][0])]
    folder = Path(target) / "wsj"
    folder.mkdir(parents=True, exist_ok=True)
    write_trees(folder / "02-21.mrg", trees[:n_train])
    write_trees(folder / "22.mrg", trees[-n_valid:])
    print(f"dry-run data root {folder.parent}: {min(n_train, len(trees))} + {min(n_valid, len(trees))} trees")


def subsets(corpus: str, corpora: str, sizes: str, n_valid: int) -> None:
    """The epoch-timing corpora: the first N training sentences of ``corpus`` for each N of ``sizes``."""
    from induce.reproduce.subset import subset_corpus

    for n_train in sizes.split(","):
        print("subset:", subset_corpus(corpus, corpora, int(n_train), n_valid))


def run_figures(out: str, runs: list) -> None:
    """One row per run folder (named after its model): steps, tokens, training seconds, tokens/s and seconds per
    step (from the last row of its ``metrics.jsonl``, kept whole: the dev evaluation too); printed and written
    to ``out``."""
    from induce.reproduce.results import read_history

    rows = []
    for run in map(Path, runs):
        last = read_history(run)[-1]
        steps = last.get("steps")
        row = {"model": run.name, "run": run.name, "steps": steps, "tokens": last.get("tokens"),
               "train_seconds": last.get("train_seconds"), "tokens_per_s": last.get("tokens_per_s"),
               "last_row": last}
        if steps and last.get("train_seconds"):
            row["s_per_step"] = round(last["train_seconds"] / steps, 4)
        rows.append(row)
        print("pcfg run:", json.dumps(row))
    Path(out).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    task, args = sys.argv[1], sys.argv[2:]
    if task == "preflight":
        print("GPU_CHECK_PROBE " + json.dumps(probe(json.loads(args[0]))), flush=True)
    elif task == "cudnn-weights":
        cudnn_weights(args[0], *map(int, args[1:5]))
    elif task == "dry-data":
        dry_data(args[0], args[1], int(args[2]), int(args[3]))
    elif task == "subsets":
        subsets(args[0], args[1], args[2], int(args[3]))
    elif task == "run-figures":
        run_figures(args[0], args[1:])
    else:
        sys.exit(f"unknown task {task!r}")
