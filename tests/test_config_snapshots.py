"""Every shipped model under every layering path (``load_config`` alone, with a user file, overrides and flags;
each shipped profile's ``build_run_config``; the CPU-sized command of ``induce train``'s advice) gives exactly
the values frozen in ``tests/data/config_snapshots.json``.

The snapshot was written by :func:`snapshot` from the code before the layers were gathered into one function;
a change of a shipped config or of a typed default changes it on purpose. To regenerate it after such a change
(and only then: read the diff before committing it):

    PYTHONPATH=$PWD python3 tests/test_config_snapshots.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

SNAPSHOT = Path(__file__).parent / "data" / "config_snapshots.json"
#: A user layer over every model: ``--config`` (the cpu profile's file of the model, where it has one), overrides
#: and flags, so that the precedence of the user's layers is frozen too.
USER_OVERRIDES = ["optim.lr=0.5", "train.log_interval=7", "data.bptt=35"]
USER_FLAGS = {"train.seed": 5, "train.max_steps": 9, "data.corpus": "2024"}
#: What the reproduction pipeline gives every run (``build_run_config``'s typed values).
PIPELINE_VALUES = {"data.corpus": "runs #1", "train.seed": 3, "train.max_steps": 11, "train.threads": 1}


def snapshot() -> dict:
    """Every model's config by every layering path, as plain JSON values (``{"error": message}`` where a
    combination is refused)."""
    from induce.config import CONFIG_DIR, load_config
    from induce.models.configs import resolve_config
    from induce.models.registry import shipped_models
    from induce.reproduce.profiles import build_run_config, list_profiles, load_profile
    from induce.training.advice import cpu_sized_command

    def attempt(build, *args, **kwargs):
        try:
            return build(*args, **kwargs).to_dict()
        except Exception as err:  # noqa: BLE001 -- a refused combination is frozen with its message
            return {"error": f"{type(err).__name__}: {err}"}

    out: dict = {"load_config": {}, "load_config_resolved": {}, "load_config_user": {}, "profiles": {},
                 "profiles_pipeline": {}, "cpu_sized_command": {}}
    SHIPPED_MODELS = shipped_models()
    for model in sorted(SHIPPED_MODELS):
        out["load_config"][model] = attempt(load_config, model)
        out["load_config_resolved"][model] = attempt(lambda name: resolve_config(load_config(name)), model)
        user_file = CONFIG_DIR / "cpu" / f"{model}.yaml"
        out["load_config_user"][model] = attempt(load_config, model, user_file if user_file.is_file() else None,
                                                 USER_OVERRIDES, flags=USER_FLAGS)
        out["cpu_sized_command"][model] = cpu_sized_command(model)
    for name in list_profiles():
        profile = load_profile(name)
        out["profiles"][name] = {model: attempt(build_run_config, profile, model, [])
                                 for model in sorted(SHIPPED_MODELS)}
        out["profiles_pipeline"][name] = {model: attempt(build_run_config, profile, model, ["optim.lr=0.5"],
                                                         PIPELINE_VALUES) for model in sorted(SHIPPED_MODELS)}
    return out


@pytest.fixture(scope="module")
def frozen() -> dict:
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def current() -> dict:
    return json.loads(json.dumps(snapshot()))  # the same JSON types as the frozen file (tuples as lists)


@pytest.mark.parametrize("path", ["load_config", "load_config_resolved", "load_config_user", "profiles",
                                  "profiles_pipeline", "cpu_sized_command"])
def test_every_model_and_profile_gives_the_frozen_config(frozen, current, path):
    assert set(current[path]) == set(frozen[path])
    for key, want in frozen[path].items():
        assert current[path][key] == want, f"{path}/{key}"


def test_the_snapshot_covers_every_shipped_model_and_profile(frozen):
    from induce.models.registry import shipped_models

    SHIPPED_MODELS = shipped_models()
    from induce.reproduce.profiles import list_profiles

    assert set(frozen["load_config"]) == set(SHIPPED_MODELS)
    assert set(frozen["profiles"]) == set(list_profiles()) == {"cpu", "cpu-long", "gpu", "paper", "toy"}
    assert all(set(models) == set(SHIPPED_MODELS) for models in frozen["profiles"].values())


if __name__ == "__main__":  # regenerate the snapshot (see the module docstring)
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    sys.exit(0)
