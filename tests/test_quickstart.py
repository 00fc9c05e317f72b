"""The README's Quickstart runs as written: its fenced ``bash`` blocks, taken from README.md, run one after another
in a fresh folder with ``INDUCE_DATA`` naming the NLTK Penn Treebank sample (prepare, train, evaluate, parse).

Real data: ``$INDUCE_DATA`` must hold the NLTK sample (``nltk_treebank/``, ``corpora/treebank/combined/``, or the
sample itself); the test is skipped without it. ``induce`` is this checkout's (a shim on ``PATH`` runs
``python -m induce`` with this interpreter, ``PYTHONPATH`` names the checkout).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, child_env

pytestmark = pytest.mark.slow

#: The longest the Quickstart may take here (it takes ~2 minutes on one busy core of a 2-core machine).
LIMIT_S = 900


def quickstart_blocks(readme: str) -> list[str]:
    """The ``bash`` fenced blocks of the README's ``## Quickstart`` section, in order."""
    section = readme.partition("\n## Quickstart\n")[2].split("\n## ")[0]
    return re.findall(r"^```bash\n(.*?)^```$", section, flags=re.M | re.S)


def nltk_sample() -> Path:
    """The folder of the NLTK sample's ``wsj_*.mrg`` files under ``$INDUCE_DATA``, or skip."""
    root = os.environ.get("INDUCE_DATA", "").strip()
    if not root:
        pytest.skip("INDUCE_DATA is not set (the NLTK treebank sample is not available)")
    for folder in (Path(root) / "nltk_treebank", Path(root) / "corpora" / "treebank" / "combined",
                   Path(root) / "treebank" / "combined", Path(root)):
        if (folder / "wsj_0001.mrg").is_file():
            return folder
    pytest.skip(f"no NLTK treebank sample under {root}")


def test_the_quickstart_has_its_steps():
    blocks = quickstart_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    script = "\n".join(blocks)
    assert blocks, "README.md has no ```bash block under ## Quickstart"
    for step in ("induce preprocess", "induce train", "induce eval", "induce parse"):
        assert re.search(rf"^[^#\n]*{step}\b", script, flags=re.M), f"the Quickstart lacks `{step}`"
    # a download is only shown as a comment: the blocks run offline
    assert not re.search(r"^[^#\n]*(nltk\.downloader|curl|wget|pip install)", script, flags=re.M), script


def test_the_quickstart_runs_as_written(tmp_path):
    sample = nltk_sample()
    blocks = quickstart_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "induce"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m induce "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "fresh"
    work.mkdir()
    env = child_env()
    env.update(INDUCE_DATA=str(sample), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
               HOME=str(tmp_path / "home"))
    env.pop("INDUCE_CORPORA", None)
    started = time.monotonic()
    done = subprocess.run([shutil.which("bash") or "/bin/bash", "-euo", "pipefail", "-c", "\n".join(blocks)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=LIMIT_S)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"the Quickstart failed after {seconds:.0f} s:\n{output[-6000:]}"
    print(f"the Quickstart took {seconds:.0f} s")
    assert "corpus F1" in done.stdout, done.stdout[-3000:]
    tree = done.stdout.strip().splitlines()[-1]
    leaves = [token for token in re.findall(r"[^\s()]+", tree) if token != "S"]
    assert tree.startswith("(S ") and leaves == "The cat sat on the mat .".split(), tree
