"""A built wheel, installed in a fresh virtual environment, gives every shipped model and profile the same
run config as this checkout: the shipped configs travel inside the package.

The wheel is built offline (``pip wheel --no-build-isolation``: the setuptools already installed) from a
copy of the sources, so the checkout gains no ``build/`` folder. The venv sees the installed torch, pydantic,
... (``--system-site-packages``) but imports ``induce`` from the wheel: the child runs in an empty folder
without ``PYTHONPATH``, and the test checks where ``induce`` came from.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from induce.config import load_config
from induce.models.registry import get_model_class, list_models
from induce.reproduce.profiles import build_run_config, list_profiles, load_profile

from helpers import REPO

pytestmark = pytest.mark.slow

#: Run in the venv: every shipped model's config and every shipped profile's run configs, as JSON.
CONFIGS_SCRIPT = """
import json, sys
import induce
from induce.config import load_config
from induce.models.registry import list_models
from induce.reproduce.profiles import build_run_config, list_profiles, load_profile
configs = {name: load_config(name).to_dict() for name in list_models()}
for profile in list_profiles():
    loaded = load_profile(profile)
    for name in loaded.models:
        configs[f"{profile}/{name}"] = build_run_config(loaded, name, []).to_dict()
json.dump({"induce": induce.__file__, "configs": configs}, sys.stdout)
"""


def _run(command: list, cwd: Path, env: dict) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _local_configs() -> dict:
    shipped = [name for name in list_models() if get_model_class(name).__module__.startswith("induce.models.")]
    configs = {name: load_config(name).to_dict() for name in shipped}
    for profile in list_profiles():
        loaded = load_profile(profile)
        for name in loaded.models:
            configs[f"{profile}/{name}"] = build_run_config(loaded, name, []).to_dict()
    return configs


def test_a_wheel_installed_in_a_fresh_venv_gives_the_same_configs(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "INDUCE_PLUGINS")}
    source = tmp_path / "source"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "induce", source / "induce", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(wheels), str(source)], tmp_path, env)
    (wheel,) = wheels.glob("induce-*.whl")
    packed = set(zipfile.ZipFile(wheel).namelist())
    assert "induce/configs/toy/profile.yaml" in packed
    assert "induce/models/palm/palm-rb.yaml" in packed and "induce/models/pcfg/cpcfg.yaml" in packed

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path, env)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
         tmp_path, env)
    elsewhere = tmp_path / "elsewhere"  # not the checkout: nothing there to import by accident
    elsewhere.mkdir()
    answer = json.loads(_run([str(python), "-c", CONFIGS_SCRIPT], elsewhere, env))

    installed_at = Path(answer["induce"]).resolve()
    assert venv.resolve() in installed_at.parents, f"the venv imported induce from {installed_at}"
    local = _local_configs()
    assert sorted(answer["configs"]) == sorted(local)
    for name, config in local.items():
        assert answer["configs"][name] == config, name
