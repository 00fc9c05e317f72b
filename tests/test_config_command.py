"""`induce config`: the final config as YAML (or JSON) with each key's layer; the same values as the run it
describes (``induce train``'s :func:`load_config`, a profile's :func:`build_run_config`); errors that name the key
and its layer."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from induce.cli.main import app
from induce.config import CONFIG_DIR, load_config, load_yaml
from induce.models.configs import resolve_config

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["config", *args], env={"COLUMNS": "300"}, terminal_width=300)


def origins(*args) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_yaml_is_the_config_with_the_layer_of_each_key(tmp_path):
    result = invoke("--model", "palm", "optim.lr=3")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("model_name: palm ") and lines[0].endswith("# from: --model palm")
    assert any(line.strip().startswith("lr: 3.0 ") and line.endswith("# from: override optim.lr=3") for line in lines)
    assert any(line.strip().startswith("nonmono: 15 ") and line.endswith("# from: induce/models/palm/palm.yaml")
               for line in lines)
    assert any(line.strip().startswith("eval_batch_size: 10 ") and line.endswith("# from: default (DataConfig)")
               for line in lines)
    assert any(line.strip().startswith("tie_weights: true ") and line.endswith("# from: default (PaLMConfig)")
               for line in lines)
    # the comments line up, and the text is the config itself: it reads back as the resolved config
    assert len({line.index("# from:") for line in lines if "# from:" in line}) == 1
    want = resolve_config(load_config("palm", overrides=["optim.lr=3"]))
    assert load_yaml(result.stdout) == want.to_dict()
    # and, given to `induce train --config`, it is that config again
    saved = tmp_path / "palm.yaml"
    saved.write_text(result.stdout, encoding="utf-8")
    assert resolve_config(load_config(config_file=saved)) == want


def test_runtime_fill_ins_are_named():
    by_key = origins("--model", "prpn")
    for key in ("train.threads", "data.corpus", "data.bptt_bucket"):
        assert by_key[key]["value"] is None and by_key[key]["origin"].endswith("null: filled in when the run starts")
    assert not by_key["train.seed"]["origin"].endswith("the run starts")


def test_json_gives_value_and_origin_of_every_key():
    by_key = origins("--model", "onlstm", "model.hidden_size=80", "train.seed=4")
    assert by_key["model.hidden_size"] == {"value": 80, "origin": "override model.hidden_size=80"}
    assert by_key["train.seed"] == {"value": 4, "origin": "override train.seed=4"}
    assert by_key["optim.betas"] == {"value": [0.9, 0.999], "origin": "default (OptimConfig)"}
    assert by_key["model_name"]["origin"] == "--model onlstm"
    config = resolve_config(load_config("onlstm", overrides=["model.hidden_size=80", "train.seed=4"])).to_dict()
    assert {key: entry["value"] for key, entry in by_key.items()} == dict(_leaves(config))


def _leaves(mapping, prefix=""):
    for key, value in mapping.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from _leaves(value, dotted)
        else:
            yield dotted, value


def test_a_profile_puts_its_layers_between_the_model_and_the_users():
    by_key = origins("--model", "palm", "--profile", "cpu")
    assert by_key["model.hidden_size"] == {"value": 256, "origin": "induce/configs/cpu/palm.yaml"}
    assert by_key["train.log_interval"] == {
        "value": 5, "origin": "induce/configs/cpu/profile.yaml overrides: train.log_interval=5"}
    from induce.reproduce.profiles import load_profile

    steps = {name: load_profile(name).steps_per_model["palm"] for name in ("cpu", "cpu-long")}
    assert by_key["train.max_steps"] == {"value": steps["cpu"], "origin": "profile cpu: steps_per_model"}
    assert by_key["train.seed"] == {"value": 1, "origin": "profile cpu: seeds"}
    assert by_key["train.device"] == {"value": "cpu", "origin": "profile cpu: device"}
    # an extending profile: the base's model file, its overrides, its own budget
    long = origins("--model", "palm", "--profile", "cpu-long")
    assert long["model.hidden_size"]["origin"] == "induce/configs/cpu/palm.yaml"
    assert long["train.max_steps"] == {"value": steps["cpu-long"], "origin": "profile cpu-long: steps_per_model"}
    assert steps["cpu-long"] != steps["cpu"]
    # the user's file and overrides win over the profile
    mine = origins("--model", "palm", "--profile", "cpu", "--config", str(CONFIG_DIR / "toy" / "palm.yaml"),
                   "train.max_steps=3")
    assert mine["model.hidden_size"]["origin"] == str(CONFIG_DIR / "toy" / "palm.yaml")
    assert mine["train.max_steps"] == {"value": 3, "origin": "override train.max_steps=3"}


@pytest.mark.parametrize("name", ["cpu", "cpu-long", "toy", "gpu", "paper"])
def test_a_profile_shows_the_config_its_runs_get(name):
    """Every model of every shipped profile: the values of `induce config --profile` are those `induce reproduce`
    trains with (its build_run_config with the profile's seed, device, threads and budget; not its corpus)."""
    from induce.config import DEFAULT_THREADS
    from induce.reproduce.profiles import build_run_config, load_profile

    profile = load_profile(name)
    for model in profile.models:
        values = {"train.seed": profile.seeds[0], "train.device": profile.device,
                  "train.threads": profile.threads or DEFAULT_THREADS}
        if profile.step_budget(model) is not None:
            values["train.max_steps"] = profile.step_budget(model)
        if profile.time_budget(model) is not None:
            values["train.time_budget"] = profile.time_budget(model)
        want = dict(_leaves(build_run_config(profile, model, [], values).to_dict()))
        shown = origins("--model", model, "--profile", name)
        assert {key: entry["value"] for key, entry in shown.items()} == want, f"{name}/{model}"


def test_the_model_may_come_from_the_users_file(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("model_name: prpn\noptim:\n  lr: 0.002\n", encoding="utf-8")
    by_key = origins("--config", str(mine))
    assert by_key["model_name"] == {"value": "prpn", "origin": str(mine)}
    assert by_key["optim.lr"] == {"value": 0.002, "origin": str(mine)}
    assert by_key["model.hidden_size"]["origin"] == "induce/models/prpn/prpn.yaml"


@pytest.mark.parametrize("args,message", [
    (["--model", "palm", "optim.lr=-1"], "override optim.lr=-1: optim.lr: Input should be greater than 0"),
    (["--model", "palm", "--profile", "toy", "model.hidden_size=x"],
     "override model.hidden_size=x: model.hidden_size: 'x' is not a whole number"),
    (["--model", "nosuch"], "--model nosuch: model_name: unknown model 'nosuch'"),
    (["--model", "onlstm", "model_name=prpn"], "--model onlstm and model_name=prpn disagree"),
    (["optim.lr=1"], "no model chosen"),
    (["--model", "palm", "--profile", "nosuch"], "unknown profile 'nosuch'"),
])
def test_errors_name_the_key_and_its_layer(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_a_bad_value_in_a_users_file_names_the_file(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("train:\n  epochs: 0\n", encoding="utf-8")
    result = invoke("--model", "prpn", "--config", str(mine))
    assert result.exit_code == 2
    assert f"{mine}: train.epochs: Input should be greater than or equal to 1" in " ".join(result.output.split())


def test_help_explains_the_layers():
    result = runner.invoke(app, ["config", "--help"], env={"COLUMNS": "300"}, terminal_width=300)
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    for words in ("typed defaults", "induce/models/<family>/<model>.yaml", "--profile", "--config FILE", "KEY=VALUE",
                  "--json", "filled in", "later ones win"):
        assert words in text, words
    listed = runner.invoke(app, ["--help"], env={"COLUMNS": "300"}, terminal_width=300)
    assert " config " in " ".join(listed.output.replace("│", " ").split())
