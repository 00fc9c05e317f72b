"""Patched copies of the authors' original implementations, for ``bench/models.py --external`` and
``bench/pcfg_models.py --external``.

The original code is not part of this project and is not redistributed: clone it yourself, then

    python bench/originals/prepare.py --onlstm CHECKOUT --prpn CHECKOUT --palm CHECKOUT --out .originals
    python bench/originals/prepare.py --compound-pcfg CHECKOUT --tn-pcfg CHECKOUT --out .originals

(any of them alone is fine). Each CHECKOUT is a folder holding that repository's files (a ``git clone``,
or a ``git archive`` of it): yikangshen/Ordered-Neurons, yikangshen/PRPN, Noahs-ARK/PaLM,
harvardnlp/compound-pcfg, sustcsonglin/TN-PCFG. ``--awd CHECKOUT`` (salesforce/awd-lstm-lm) is asked for
only when an AWD-LSTM helper (``splitcross.py``, ``locked_dropout.py``, ``embed_regularize.py``,
``weight_drop.py``) is missing from a checkout; the ON-LSTM and PaLM repositories carry their own copies.

For each original this writes ``OUT/<name>/``: the modules its training step imports (in their own
folders), edited by the patches listed in :data:`ORIGINALS` (our own edit instructions: each names the
file, the text it expects and why the edit is needed on current PyTorch or on a CPU; a patch whose text is
not found stops the script, so a different version of the code is never half-patched), our
``bench_entry.py`` (from ``bench/originals/<name>/``) with ``entry_common.py``, and ``PROVENANCE.json``
(the checkout's git commit when it has one, the sha256 of every source file, the patches applied). Where
an original pins files (:attr:`Original.pinned`: the modules whose code the timed step runs), a checkout
whose copy has another sha256 is refused too. No patch changes what a training step computes;
``bench/ORIGINALS.md`` says why each is there. Then, for example:

    python bench/models.py --models onlstm --external onlstm-original=.originals/onlstm/bench_entry.py
    python bench/pcfg_models.py --external compound-pcfg=.originals/compound-pcfg/bench_entry.py \\
        --external tn-pcfg=.originals/tn-pcfg/bench_entry.py

Standard library only (it runs before anything is installed).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
AWD_HELPERS = ("splitcross.py", "locked_dropout.py", "embed_regularize.py", "weight_drop.py")


@dataclass(frozen=True)
class Patch:
    """Replace ``old`` by ``new`` in ``file``, which must hold it exactly ``count`` times."""

    file: str
    why: str
    old: str
    new: str
    count: int = 1


@dataclass(frozen=True)
class Original:
    repo: str
    tested_commit: str  # the commit these patches and the entry were written against
    files: tuple[str, ...]  # the modules the training step imports (directly or through each other)
    patches: tuple[Patch, ...] = field(default=())
    #: sha256 of files at ``tested_commit`` (before any patch): a checkout whose copy differs is refused
    pinned: dict[str, str] = field(default_factory=dict)


ORIGINALS = {
    "onlstm": Original(
        repo="yikangshen/Ordered-Neurons",
        tested_commit="46d63cde024802eaf1eb7cc896431329014dd869",
        files=("model.py", "ON_LSTM.py", "utils.py", *AWD_HELPERS),
        patches=(
            Patch("ON_LSTM.py", "the DropConnect mask is drawn as uint8, which masked_fill no longer accepts: bool",
                  "dtype=torch.uint8", "dtype=torch.bool"),
        ),
    ),
    "prpn": Original(
        repo="yikangshen/PRPN",
        tested_commit="42212fb5ed4234f507137eb05af26a810c1cd33a",
        files=("model_PRPN.py", "ParsingNetwork.py", "ReadingNetwork.py", "PredictNetwork.py", "LSTMCell.py",
               "blocks.py"),
        patches=(
            Patch("LSTMCell.py", "it uses torch.* but imports only torch.nn names (the star import no longer "
                  "brings `torch`)", "import torch.nn as nn\n", "import torch\nimport torch.nn as nn\n"),
            Patch("LSTMCell.py", "RNNCellBase.__init__ now requires its sizes; the cell builds its own layers, "
                  "so it initialises as a plain Module", "super(LSTMCell, self).__init__()",
                  "nn.Module.__init__(self)"),
        ),
    ),
    "palm": Original(
        repo="Noahs-ARK/PaLM",
        tested_commit="fe943bb0516d80b09f2b56de60dac9c54dc196e6",
        files=("model.py", "span_parser.py", "rrnn.py", "utils.py", *AWD_HELPERS),
        # No edit: the training step runs as released. (Its weight_drop.py fails when a training step
        # follows an evaluation-mode forward -- dropout then returns the raw parameter, which cannot be
        # set as a plain attribute -- but the benchmark never evaluates.)
    ),
    "compound-pcfg": Original(
        repo="harvardnlp/compound-pcfg",
        tested_commit="4af1eb0e055234780d154a52173d79d7845b66ae",
        files=("models.py", "PCFG.py"),
        patches=(
            Patch("models.py", "the N-PCFG (z_dim 0) puts its unused z on the GPU with .cuda(), which fails on a "
                  "CPU-only machine: made on the words' device (a [batch, 1] tensor of zeros either way)",
                  "self.z = torch.zeros(batch_size, 1).cuda()",
                  "self.z = torch.zeros(batch_size, 1, device=x.device)"),
        ),
        pinned={
            "models.py": "72b47e56a58297344b3fe88c2f1bdfc44d74216c55b7af62029ee0e9643c3b8e",
            "PCFG.py": "a7b04a0a54db7b30d6e0ddae6bcc7e97599a1fd7b1f7bb55efeb18f08a9ba7ea",
        },
    ),
    "tn-pcfg": Original(
        repo="sustcsonglin/TN-PCFG",
        tested_commit="fa519b5bb729febd12235958964e1b35e7721540",
        # what `import parser.model` loads: every model of the repository and its inside passes (the package
        # __init__ files import them all); the step runs N_PCFG / C_PCFG / TN_PCFG, res, pcfgs, pcfg, tdpcfg, fn
        files=("parser/__init__.py", "parser/model/__init__.py", "parser/model/C_PCFG.py", "parser/model/N_PCFG.py",
               "parser/model/TN_PCFG.py", "parser/model/NBL_PCFG.py", "parser/model/NL_PCFG.py",
               "parser/model/SN_PCFG.py", "parser/model/SC_PCFG.py", "parser/modules/res.py",
               "parser/pcfgs/__init__.py", "parser/pcfgs/pcfgs.py", "parser/pcfgs/fn.py", "parser/pcfgs/pcfg.py",
               "parser/pcfgs/tdpcfg.py", "parser/pcfgs/blpcfg.py", "parser/pcfgs/eisner_satta.py",
               "parser/pcfgs/lpcfg.py", "parser/pcfgs/simple_pcfg.py", "parser/triton/fn.py"),
        # No edit: the three models' training steps run as released on torch 2.13 (CPU).
        pinned={
            "parser/model/N_PCFG.py": "1e72f38361dde9b39fe1c8012db29909462709ed98a714aa6e0b64cb2fc7c4db",
            "parser/model/C_PCFG.py": "50e4f18ff57a1cef94183d8e581868685c49ee2dc552a38313b6d0577169fd62",
            "parser/model/TN_PCFG.py": "78ec93fce73076511013a74a80af01a6839422081b622f51e5e1c17bd5692cf8",
            "parser/modules/res.py": "7d52103078fda11be3c5a99d874a6c8b3c2edf973255beb85f6af0259343ec2d",
            "parser/pcfgs/pcfgs.py": "316fcfd23fd89c67d2fd16ddf448f78e6fd45c75e5d0582859724a5aafd8f090",
            "parser/pcfgs/fn.py": "864ac5f100892e3497cc1bb14379507c64b7f79d74ab4d28e59104daad581836",
            "parser/pcfgs/pcfg.py": "11871317e49ec0fe5147ea24538e7cb4cebb1e9a5422aa43eba66e7c1cab69fb",
            "parser/pcfgs/tdpcfg.py": "f1999dc2d44e2e3a7dd3fe828150ea30176fd15197a0353bdd99fb3a5e89206c",
        },
    ),
}


class PrepareError(Exception):
    """A checkout lacks a file, or a patch's text is not where it should be (message names both)."""


def apply_patch(text: str, patch: Patch, where: str) -> tuple[str, int]:
    """``text`` with ``patch`` applied and the number of replacements; PrepareError when the count is off."""
    found = text.count(patch.old)
    if found != patch.count:
        raise PrepareError(f"{where}: expected {patch.count} occurrence(s) of {patch.old!r} ({patch.why}), found "
                           f"{found}: not the version these patches were written for "
                           f"(see bench/ORIGINALS.md)")
    return text.replace(patch.old, patch.new), found


def git_commit(checkout: Path) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=False)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 and (checkout / ".git").exists() else None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_copies(original: Original, name: str, checkout: Path, tmp: Path, awd: Path | None) -> dict:
    """The patched modules, bench_entry.py and PROVENANCE.json in ``tmp``; returns the provenance record."""
    record = {"name": name, "repo": original.repo, "checkout_commit": git_commit(checkout),
              "tested_commit": original.tested_commit, "files": [], "patches": []}
    for file_name in original.files:
        source = checkout / file_name
        if not source.is_file() and file_name in AWD_HELPERS and awd is not None:
            source = awd / file_name
        if not source.is_file():
            hint = " (an AWD-LSTM helper: give --awd CHECKOUT of salesforce/awd-lstm-lm)" \
                if file_name in AWD_HELPERS else ""
            raise PrepareError(f"--{name} {checkout}: {file_name} is missing{hint}")
        data = source.read_bytes()
        pin = original.pinned.get(file_name)
        if pin is not None and sha256(data) != pin:
            raise PrepareError(f"{source}: sha256 {sha256(data)[:12]}..., not that of {original.repo} at "
                               f"{original.tested_commit[:12]} ({pin[:12]}...): not the version this entry and its "
                               f"patches were written for (see bench/ORIGINALS.md)")
        text = data.decode("utf-8")
        for patch in original.patches:
            if patch.file == file_name:
                text, found = apply_patch(text, patch, f"{source}")
                record["patches"].append({"file": file_name, "why": patch.why, "replacements": found})
        written = text.encode("utf-8")
        (tmp / file_name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / file_name).write_bytes(written)
        record["files"].append({"file": file_name, "from": "awd" if source.parent == awd else name,
                                "sha256": sha256(data), "patched": written != data})
    shutil.copyfile(HERE / name / "bench_entry.py", tmp / "bench_entry.py")
    shutil.copyfile(HERE / "entry_common.py", tmp / "entry_common.py")
    (tmp / "PROVENANCE.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def prepare(name: str, checkout: Path, out: Path, awd: Path | None = None) -> Path:
    """Write ``out/name/`` (patched modules, ``bench_entry.py``, ``PROVENANCE.json``); returns that folder."""
    original = ORIGINALS[name]
    if not checkout.is_dir():
        raise PrepareError(f"--{name} {checkout}: no such folder (a checkout of {original.repo})")
    target = out / name
    tmp = out / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _write_copies(original, name, checkout, tmp, awd)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-written is left behind
        raise
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, original in ORIGINALS.items():
        parser.add_argument(f"--{name}", type=Path, metavar="CHECKOUT", help=f"a checkout of {original.repo}")
    parser.add_argument("--awd", type=Path, metavar="CHECKOUT",
                        help="a checkout of salesforce/awd-lstm-lm (only for helpers missing from a checkout)")
    parser.add_argument("--out", type=Path, default=Path(".originals"), help="where to write (default: .originals)")
    args = parser.parse_args(argv)
    chosen = {name: getattr(args, name.replace("-", "_")) for name in ORIGINALS
              if getattr(args, name.replace("-", "_")) is not None}
    if not chosen:
        parser.error(f"give at least one of {', '.join(f'--{name}' for name in ORIGINALS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for name, checkout in chosen.items():
            target = prepare(name, checkout, args.out, args.awd)
            record = json.loads((target / "PROVENANCE.json").read_text(encoding="utf-8"))
            commit = record["checkout_commit"]
            note = "" if commit in (None, ORIGINALS[name].tested_commit) else \
                f" (checkout at {commit[:12]}, patches written for {ORIGINALS[name].tested_commit[:12]})"
            print(f"{name}: {target / 'bench_entry.py'}: {len(record['files'])} modules, "
                  f"{sum(p['replacements'] for p in record['patches'])} edits{note}")
    except PrepareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
