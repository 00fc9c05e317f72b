"""Run config: YAML layers + key=value overrides, errors that name the key, saved config round trip; the
model section checked where the model is chosen (:func:`induce.models.configs.resolve_config`)."""
from __future__ import annotations

import platform
import re
import subprocess
import sys

import pytest
import yaml

from induce.config import (
    CONFIG_DIR,
    MODELS_DIR,
    ConfigError,
    apply_overrides,
    load_config,
    load_config_file,
    model_config_path,
    parse_duration,
    save_config,
)
from induce.errors import InduceError, InputError
from induce.models.configs import resolve_config
from induce.models.registry import list_models


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def load_resolved(*args, **kwargs):
    """:func:`load_config` with the model section checked, as the trainer and ``reproduce`` check it."""
    return resolve_config(load_config(*args, **kwargs))


def test_config_loads_without_the_models():
    """The config layer sits below the models: reading a config imports none of them (nor torch), and
    leaves the model section as given until the model is chosen."""
    code = ("import sys\nfrom induce.config import load_config\n"
            "cfg = load_config('onlstm', overrides=['model.hidden_size=80', 'model.nhid=1'])\n"
            "assert cfg.model['nhid'] == 1 and 'tie_weights' not in cfg.model, cfg.model\n"
            "print(sorted(m for m in sys.modules if m.startswith('induce.models') or m == 'torch'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_resolve_config_keeps_a_resolved_config_and_the_sources():
    cfg = load_config("onlstm", overrides=["model.hidden_size=80"])
    resolved = resolve_config(cfg)
    assert resolved is not cfg and resolve_config(resolved) is resolved  # resolved once
    assert resolved.model["tie_weights"] is True  # a default filled in
    assert resolved.origins.of("model.hidden_size") == "override model.hidden_size=80"
    assert resolved == load_resolved("onlstm", config_file=None, overrides=["model.hidden_size=80"])


def test_yaml_plus_overrides(tmp_path):
    config_file = write(tmp_path / "c.yaml", """
model_name: onlstm
model: {emb_size: 40, hidden_size: 60, chunk_size: 10}
optim: {optimizer: adam, lr: 0.01}
train: {epochs: 7}
""")
    cfg = load_resolved(config_file=config_file, overrides=["model.hidden_size=80", "optim.lr=0.003",
                                                           "train.patience=3", "optim.betas=[0, 0.999]"])
    assert cfg.model_name == "onlstm"
    assert cfg.model["hidden_size"] == 80 and cfg.model["emb_size"] == 40  # override > file
    assert cfg.optim.lr == pytest.approx(0.003) and cfg.optim.optimizer == "adam"
    assert cfg.train.epochs == 7 and cfg.train.patience == 3
    assert cfg.optim.betas == (0.0, 0.999)
    # the model section is resolved: fields not given take the model's defaults
    assert cfg.model["n_layers"] == 3 and "dropouti" in cfg.model


def test_model_option_uses_model_yaml_over_the_typed_defaults():
    from induce.config import DataConfig

    cfg = load_config("prpn")
    shipped = yaml.safe_load(model_config_path("prpn").read_text())
    assert cfg.optim.lr == pytest.approx(shipped["optim"]["lr"])
    assert cfg.model["hidden_size"] == shipped["model"]["hidden_size"]
    # a key prpn.yaml does not set is the typed default, which no shipped file restates
    assert cfg.data.eval_batch_size == DataConfig().eval_batch_size
    assert cfg.origins.exact("data.eval_batch_size") is None
    assert not (CONFIG_DIR / "default.yaml").exists()


@pytest.mark.parametrize("name", sorted(list_models()))
def test_every_shipped_model_config_validates(name):
    cfg = load_resolved(name)
    assert cfg.model_name == name


@pytest.mark.parametrize(
    "override,key",
    [
        ("model.nhid=200", "model.nhid"),
        ("optim.lrr=1", "optim.lrr"),
        ("train.epochs=abc", "train.epochs"),
        ("data.batch_size=-4", "data.batch_size"),
        ("model.chunk_size=7", "model"),  # the model's own cross-field check
        ("bogus.x=1", "bogus"),
        ("optim.optimizer=rmsprop", "optim.optimizer"),
    ],
)
def test_bad_key_message_names_the_key(override, key):
    with pytest.raises(ConfigError) as info:
        load_resolved("onlstm", overrides=[override])
    assert key in str(info.value)
    assert isinstance(info.value, InduceError)


def test_override_syntax_and_section_errors():
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["optim.lr"])
    with pytest.raises(ConfigError, match="optim.lr"):
        apply_overrides({"optim": {"lr": 1.0}}, ["optim.lr.x=2"])


def test_unknown_model_and_conflicting_model_name(tmp_path):
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        load_resolved("nope")
    config_file = write(tmp_path / "c.yaml", "model_name: prpn\n")
    with pytest.raises(ConfigError, match="--model"):
        load_config("onlstm", config_file=config_file)
    with pytest.raises(ConfigError, match="no model chosen"):
        load_config(None, config_file=write(tmp_path / "empty.yaml", ""))


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    bad = write(tmp_path / "bad.yaml", "model_name: onlstm\noptim:\n  lr: [1, 2\n")
    with pytest.raises(InputError) as info:
        load_config(config_file=bad)
    assert str(bad) in str(info.value) and info.value.line is not None


def test_saved_config_round_trips(tmp_path):
    cfg = load_resolved("palm", overrides=["model.hidden_size=64", "optim.betas=[0.5, 0.9]",
                                           "train.time_budget=12.5", "data.corpus=corpora/x"])
    path = save_config(cfg, tmp_path / "config.yaml")
    again = load_config_file(path)
    assert again == cfg
    assert again.to_dict() == cfg.to_dict()
    assert yaml.safe_load(path.read_text())["model"]["hidden_size"] == 64


@pytest.mark.parametrize("text,seconds", [("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_rejects_garbage():
    with pytest.raises(ConfigError):
        parse_duration("soon")
    with pytest.raises(ConfigError):
        parse_duration("-5m")


def test_errors_name_the_source_of_the_bad_value(tmp_path):
    """The flag, the file or the override that set the bad value, not the stack of layers."""
    with pytest.raises(ConfigError) as info:
        load_resolved("nosuch")
    assert str(info.value).startswith("--model nosuch: model_name: unknown model 'nosuch'")
    assert "default.yaml" not in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config("onlstm", overrides=["optim.lr=1", "train.epochs=abc"])
    assert str(info.value).startswith("override train.epochs=abc: train.epochs:")
    with pytest.raises(ConfigError, match=r"^override bogus.x=1: bogus.x: unknown section"):
        load_config("onlstm", overrides=["bogus.x=1"])
    bad_file = write(tmp_path / "mine.yaml", "model_name: onlstm\noptim:\n  lr: 1\n  optimizer: rmsprop\n")
    with pytest.raises(ConfigError) as info:
        load_config(config_file=bad_file, overrides=["optim.lr=2"])
    assert str(info.value).startswith(f"{bad_file}: optim.optimizer:")
    bad_name = write(tmp_path / "name.yaml", "model_name: nosuch\n")
    with pytest.raises(ConfigError, match=f"^{bad_name}: model_name: unknown model"):
        load_resolved(config_file=bad_name)
    # the options of `induce train` that set config keys are named as the flag
    with pytest.raises(ConfigError, match=r"^--max-epochs 0: train.epochs:"):
        load_config("onlstm", overrides=["train.seed=3"], flags={"train.epochs": 0})
    # a check across the fields of a section names every source that set them
    with pytest.raises(ConfigError) as info:
        load_resolved("onlstm", overrides=["model.chunk_size=7"])
    assert "onlstm.yaml" in str(info.value) and "override model.chunk_size=7" in str(info.value)


@pytest.mark.parametrize("name", ["prpn", "onlstm", "palm", "palm-s", "palm-rb"])
@pytest.mark.parametrize("override", ["model.hidden_size=-3", "model.emb_size=0", "model.n_layers=0",
                                      "model.dropout=1.5", "model.wdrop=-0.1"])
def test_model_sizes_and_rates_keep_their_bounds_in_every_model(name, override):
    """Each model's config redeclares the shared AWD fields with its own defaults; the bounds stay
    (a negative size used to reach the model and end in a RuntimeError traceback)."""
    with pytest.raises(ConfigError) as info:
        load_resolved(name, overrides=[override])
    assert f"override {override}" in str(info.value)


def _float_keys(model_cls, prefix: str) -> list[str]:
    """Dotted keys of the float fields of a pydantic class (a tuple of floats: its first item)."""
    import typing

    keys = []
    for name, field in model_cls.model_fields.items():
        annotation = field.annotation
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if annotation is float or args == [float]:
            keys.append(f"{prefix}.{name}")
        elif typing.get_origin(annotation) is tuple and all(a is float for a in args):
            keys.append(f"{prefix}.{name}.0")
    return keys


def _float_overrides() -> list[tuple[str, str]]:
    from induce.config import DataConfig, OptimConfig, TrainConfig
    from induce.models.registry import get_model_class

    cases = [("onlstm", key) for section, cls in (("data", DataConfig), ("optim", OptimConfig), ("train", TrainConfig))
             for key in _float_keys(cls, section)]
    for name in list_models():
        cases += [(name, key) for key in _float_keys(get_model_class(name).Config, "model")]
    return cases


@pytest.mark.parametrize("name,key", _float_overrides())
def test_every_float_key_refuses_nan_and_inf_saying_so(name, key):
    """lr=nan said "should be greater than 0" (and lr=inf trained on nan losses): every float of the
    config, the models' included, says that the value is not a number or is infinite."""
    *parents, last = key.split(".")
    for text, says in (("nan", "nan is not a number"), (".inf", "inf is infinite"), ("-.inf", "-inf is infinite")):
        if last == "0":  # a tuple (optim.betas): the whole value
            override = f"{'.'.join(parents)}=[{text}, 0.5]"
        else:
            override = f"{key}={text}"
        with pytest.raises(ConfigError) as info:
            load_resolved(name, overrides=[override])
        message = str(info.value)
        assert message.startswith(f"override {override}: {key}: {says}; give a finite number"), message


def test_time_budget_flag_refuses_nan_and_inf():
    with pytest.raises(ConfigError, match="not a number"):
        parse_duration("nan")
    with pytest.raises(ConfigError, match="infinite"):
        parse_duration("inf")


def test_floats_beyond_float32_are_refused():
    """An lr of 1e300 passed validation and ended in torch's "value cannot be converted to type float
    without overflow" traceback at the first optimiser step."""
    for override in ("optim.lr=1e300", "optim.eps=1e39", "optim.betas=[1e300, 0.9]", "train.alpha=1e40"):
        with pytest.raises(ConfigError, match=r"is beyond float32's range"):
            load_config("onlstm", overrides=[override])
    assert load_config("onlstm", overrides=["optim.lr=3e38"]).optim.lr == 3e38


def test_config_file_layers_over_the_models_own_config(tmp_path):
    """``--config FILE`` changes only the keys it sets: a file of sizes keeps the model's optimiser (the
    toy profile's tnpcfg.yaml once replaced tnpcfg.yaml and trained a PCFG with SGD at lr 30)."""
    shipped = yaml.safe_load(model_config_path("tnpcfg").read_text())["optim"]
    sizes = load_config("tnpcfg", config_file=CONFIG_DIR / "toy" / "tnpcfg.yaml")
    assert sizes.optim.optimizer == shipped["optimizer"] == "adam"
    assert sizes.optim.lr == pytest.approx(shipped["lr"])
    assert sizes.model["nt_states"] == 6  # the file's size
    # the model named in the file picks the model's config too; overrides still win over the file
    mine = write(tmp_path / "mine.yaml", "model_name: cpcfg\nmodel: {nt_states: 5}\n")
    cfg = load_config(config_file=mine, overrides=["model.t_states=7"])
    assert cfg.optim.optimizer == "adam" and cfg.optim.lr == pytest.approx(0.001)
    assert (cfg.model["nt_states"], cfg.model["t_states"]) == (5, 7)
    assert cfg.train.epochs == load_config("cpcfg").train.epochs
    # an error about a key the file sets names the file; one about a shipped key the shipped file
    bad = write(tmp_path / "bad.yaml", "model: {nt_states: 0}\n")
    with pytest.raises(ConfigError, match=f"^{bad}: model.nt_states:"):
        resolve_config(load_config("cpcfg", config_file=bad))
    # the shipped file set the size it does not divide
    with pytest.raises(ConfigError, match=r"^induce/models/onlstm/onlstm.yaml \+ override model.chunk_size=7: model:"):
        resolve_config(load_config("onlstm", overrides=["model.chunk_size=7"]))


def test_a_missing_shipped_config_is_an_error(tmp_path, monkeypatch):
    """An install without the shipped configs must not train with the classes' defaults in silence: without
    a family's <model>.yaml its model is refused where it is chosen."""
    import induce.config as config_module

    # imported before CONFIG_DIR is patched: the module reads it once, as its default folder of profiles
    from induce.reproduce.profiles import Profile, build_run_config

    shipped_prpn = model_config_path("prpn").read_text()
    empty = tmp_path / "configs"
    empty.mkdir()
    monkeypatch.setattr(config_module, "CONFIG_DIR", empty)
    monkeypatch.setattr(config_module, "SHIPPED_CONFIGS", empty, raising=False)
    families = tmp_path / "models"
    (families / "prpn").mkdir(parents=True)
    (families / "prpn" / "__init__.py").write_text("")
    monkeypatch.setattr(config_module, "family_roots", lambda: [families])
    with pytest.raises(ConfigError, match="induce/models/prpn/prpn.yaml: .*missing.*reinstall"):
        resolve_config(load_config("prpn"))
    (families / "prpn" / "prpn.yaml").write_text(shipped_prpn)
    assert resolve_config(load_config("prpn")).optim.optimizer == "adam"
    # the profiles of `induce reproduce` build their configs from the same shipped layers
    with pytest.raises(ConfigError, match="induce/models/onlstm/onlstm.yaml: .*missing"):
        build_run_config(Profile(), "onlstm", [])


def test_a_plugin_model_has_no_shipped_config():
    """A model registered outside the package (the test stand-in) takes the typed defaults and its class
    defaults."""
    from induce.config import DataConfig

    from helpers import STANDIN

    cfg = load_config(STANDIN)
    assert cfg.model_name == STANDIN and cfg.data.eval_batch_size == DataConfig().eval_batch_size


def test_shipped_configs_are_named_the_same_in_every_installation(tmp_path):
    """Reports and messages name a shipped config by its place in the package, not the install folder."""
    from induce.config import config_source

    assert config_source(CONFIG_DIR / "toy") == "induce/configs/toy"
    assert config_source(CONFIG_DIR / "toy" / "prpn.yaml") == "induce/configs/toy/prpn.yaml"
    assert config_source(tmp_path / "mine") == str(tmp_path / "mine")


def test_the_shipped_models_are_those_of_the_family_folders():
    """The registry's shipped models are exactly the models registered from induce's family folders, each with
    its base config in its family's folder, which config.py (below the models) finds without importing them."""
    from induce.models.registry import family_folder, get_model_class, list_models, shipped_models

    builtin = {name for name in list_models() if get_model_class(name).__module__.startswith("induce.models.")}
    assert set(shipped_models()) == builtin
    for name in builtin:
        assert model_config_path(name) == family_folder(get_model_class(name)) / f"{name}.yaml"


KEPT_SCRIPT = """
import ctypes, torch
from induce.config import keep_freed_memory
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
assert keep_freed_memory()
for _ in range(3):  # a step's temporaries: eight 4 MiB tensors written, then freed
    tensors = [torch.ones(2**20) for _ in range(8)]
    del tensors
print(libc.mallinfo2().fordblks)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator")
def test_freed_tensor_memory_is_kept_for_the_next_step():
    """After a step's temporaries are freed, their 32 MiB stay in the process's heap as free memory for the next
    step (glibc's ``mallinfo2``), instead of going back to the system to be faulted in again. (glibc's default
    gives them back or not depending on the heap's layout, so it is not compared: on this machine the same
    rounds left 0 to 52 MiB free without the setting.)"""
    done = subprocess.run([sys.executable, "-c", KEPT_SCRIPT], capture_output=True, text=True, check=True)
    assert int(done.stdout) >= 32 * 2**20, done.stdout


def test_use_threads_keeps_freed_memory_where_glibc_allows(monkeypatch):
    from induce import config as config_module

    calls = []
    monkeypatch.setattr(config_module, "keep_freed_memory", lambda: calls.append(1) or True)
    config_module.use_threads(1)
    assert calls == [1]


def _same(a, b) -> bool:
    """Equal values of equal types, recursively (``True == 1`` and ``1 == 1.0`` are not the same value here)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or a != a and b != b)  # nan is nan


@pytest.mark.parametrize("text,value", [
    ("010", 10), ("0100", 100), ("+0020", 20), ("1_000", 1000), ("1e3", 1000),
])
def test_an_int_key_reads_its_value_in_decimal(text, value, tmp_path):
    """``010`` is 10 (YAML 1.1 reads 8, octal), from an override and from a config file alike."""
    cfg = load_config("onlstm", overrides=[f"train.seed={text}", "optim.betas=[0, -010]"])
    assert cfg.train.seed == value and cfg.optim.betas == (0.0, -10.0)
    assert load_resolved("onlstm", overrides=[f"model.emb_size={text}"]).model["emb_size"] == value
    mine = write(tmp_path / "mine.yaml", f"train:\n  seed: {text}\n  max_steps: {text}\n")
    cfg = load_config("onlstm", config_file=mine)
    assert (cfg.train.seed, cfg.train.max_steps) == (value, value)


@pytest.mark.parametrize("text", ["0x10", "0o10", "0b11", "1:20", "yes", "off"])
def test_an_int_key_refuses_other_ways_of_writing_a_number_naming_the_key(text, tmp_path):
    """Hex, octal, binary and base 60 (YAML 1.1's ``0x10`` = 16, ``1:20`` = 80) and YAML 1.1's booleans are
    not silently a number: one line naming the override (or the file) and the key."""
    with pytest.raises(ConfigError) as info:
        load_config("onlstm", overrides=[f"train.seed={text}"])
    assert str(info.value) == (f"override train.seed={text}: train.seed: {text!r} is not a whole number written in "
                               "decimal digits")
    mine = write(tmp_path / "mine.yaml", f"train:\n  max_steps: {text}\n")
    with pytest.raises(ConfigError, match=rf"^{mine}: train.max_steps: '{text}' is not a whole number"):
        load_config("onlstm", config_file=mine)


def test_floats_without_a_dot_and_strings_like_yes_are_read_as_written():
    """``1e-3`` is a float wherever it is given (PyYAML's YAML 1.1 reads a string, which a model section kept);
    ``on`` / ``yes`` for a string key stay those words (YAML 1.1: booleans); a bool key still takes them."""
    cfg = load_config("onlstm", overrides=["optim.lr=1e-3", "model.dropout=2e-1", "train.time_budget=1E2",
                                           "data.corpus=on", "train.kernels=yes", "train.amp=no"])
    assert _same(cfg.optim.lr, 0.001) and _same(cfg.model["dropout"], 0.2) and _same(cfg.train.time_budget, 100.0)
    assert (cfg.data.corpus, cfg.train.kernels, cfg.train.amp) == ("on", "yes", False)


@pytest.mark.parametrize("name", ["yes", "010", "1e3", "1.5e3", "1:20", "0x10", "2024", "2024-01-01", "null", "~",
                                  "True", ".inf", "1_000", "-", "a: b", "[x]"])
def test_a_flag_value_is_not_read_as_yaml_and_round_trips_through_config_yaml(name, tmp_path):
    """``--corpus 2024`` is the folder ``2024`` (the flag's value as typed, not re-read as YAML, which made it a
    number, a date or a list), and ``config.yaml`` gives it back as it was, to this reader and to a plain
    ``yaml.safe_load``."""
    cfg = load_resolved("onlstm", flags={"data.corpus": name, "train.device": name})
    assert (cfg.data.corpus, cfg.train.device) == (name, name)
    path = save_config(cfg, tmp_path / "config.yaml")
    again = load_config_file(path)
    assert again == cfg and _same(again.to_dict(), cfg.to_dict())
    assert yaml.safe_load(path.read_text())["data"]["corpus"] == name


@pytest.mark.parametrize("path", sorted([*CONFIG_DIR.rglob("*.yaml"), *MODELS_DIR.rglob("*.yaml")]),
                         ids=lambda p: p.relative_to(CONFIG_DIR.parent).as_posix())
def test_every_shipped_config_reads_as_it_did_with_yaml_safe_load(path):
    """The shipped configs and profiles hold no YAML 1.1 surprise: the config reader gives every value of
    every file exactly as PyYAML's ``safe_load`` does, types included."""
    from induce.config import load_yaml

    text = path.read_text(encoding="utf-8")
    assert _same(load_yaml(text), yaml.safe_load(text))


@pytest.mark.parametrize("name", sorted(list_models()))
def test_a_config_yaml_written_before_reads_back_the_same(name, tmp_path):
    """A run folder's ``config.yaml`` as the earlier writer (``yaml.safe_dump``) wrote it reads back to the
    same config: a resumed or loaded run keeps every value."""
    cfg = load_resolved(name, overrides=["optim.eps=1e-12", "train.time_budget=0.5"], flags={"data.corpus": "c"})
    path = write(tmp_path / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=False))
    assert _same(load_config_file(path).to_dict(), cfg.to_dict())


def test_a_flag_and_an_override_of_one_key_must_agree(tmp_path):
    """``--max-steps 3`` with ``train.max_steps=7`` is refused naming both (it ran 3 steps without a word);
    the same value given twice is fine, and so is a flag over a config file's value."""
    flags = {"train.max_steps": 3, "train.seed": 10, "train.tensorboard": True, "data.corpus": "c"}
    with pytest.raises(ConfigError) as info:
        load_config("onlstm", overrides=["train.max_steps=7"], flags=flags)
    assert str(info.value) == ("--max-steps 3 and train.max_steps=7 disagree: give the value once (the flag or "
                               "the override)")
    for override, flag in [("train.seed=11", "--seed 10"), ("train.tensorboard=false", "--tensorboard"),
                           ("train={max_steps: 5}", "--max-steps 3"), ("data.corpus=d", "--corpus c"),
                           ("train.seed=0x0a", "--seed 10")]:
        with pytest.raises(ConfigError, match=rf"^{re.escape(flag)} and {re.escape(override)} disagree"):
            load_config("onlstm", overrides=[override], flags=flags)
    cfg = load_config("onlstm", overrides=["train.max_steps=3", "train.seed=010", "train.tensorboard=yes",
                                           "optim.lr=2"], flags=flags)
    assert (cfg.train.max_steps, cfg.train.seed, cfg.train.tensorboard, cfg.optim.lr) == (3, 10, True, 2.0)
    assert load_config("onlstm", overrides=["train.time_budget=600"], flags={"train.time_budget": 600.0})
    mine = write(tmp_path / "mine.yaml", "train:\n  max_steps: 7\n")
    assert load_config("onlstm", config_file=mine, flags=flags).train.max_steps == 3
    with pytest.raises(ConfigError, match=r"^--model onlstm and model_name=prpn disagree"):
        load_config("onlstm", overrides=["model_name=prpn"])
    assert load_config("onlstm", overrides=["model_name=onlstm"]).model_name == "onlstm"


def test_the_cpu_sized_command_reads_the_profile_in_decimal(tmp_path):
    """The CPU-sized command that a large run's note prints reads ``configs/cpu/`` with the config reader:
    ``010`` steps are 10 and a ``1e-3`` rate is 0.001, as ``induce train`` would read them."""
    from induce.training.advice import cpu_sized_command

    (tmp_path / "cpu").mkdir()
    write(tmp_path / "cpu" / "prpn.yaml", "train:\n  seed: 010\noptim:\n  lr: 1e-3\n")
    write(tmp_path / "cpu" / "profile.yaml", "steps_per_model:\n  prpn: 020\n")
    command = cpu_sized_command("prpn", config_dir=tmp_path)
    assert command == "induce train --model prpn train.seed=10 optim.lr=0.001 --max-steps 20"


def test_layer_config_applies_the_layers_in_order_and_remembers_each_keys_layer(tmp_path):
    """One layering function: files (every leaf), the chosen model, overrides, flags, a program's values; later
    ones win, and Origins names, per key, the layer that set it last (in the order they were set)."""
    from induce.config import Layer, layer_config

    config = layer_config([
        Layer("file", "a.yaml", {"model_name": "onlstm", "optim": {"lr": 1.0, "clip": 0.5}, "train": {"seed": 2}}),
        Layer("file", "b.yaml", {"optim": {"lr": 2.0}, "data": {"bptt": 30}}),
        Layer("model", "--model onlstm", "onlstm"),
        Layer("overrides", "override", ["data.bptt=40", "train.epochs=3"]),
        Layer("flags", "flags", {"train.seed": 5}),
        Layer("values", "the program", {"train.epochs": 4}),
    ])
    assert (config.optim.lr, config.optim.clip, config.data.bptt, config.train.seed, config.train.epochs) == (
        2.0, 0.5, 40, 5, 4)
    origins = config.origins
    assert origins.exact("optim.lr") == "b.yaml" and origins.exact("optim.clip") == "a.yaml"
    assert origins.exact("data.bptt") == "override data.bptt=40" and origins.exact("train.seed") == "--seed 5"
    assert origins.exact("train.epochs") == "the program" and origins.exact("model_name") == "--model onlstm"
    assert origins.exact("optim.eps") is None  # a typed default
    assert origins.keys_from("b.yaml") == ["optim.lr"]  # data.bptt was set again later
    # a program's values are not flags: no agreement check with the user's overrides
    assert layer_config([Layer("model", "m", "prpn"), Layer("overrides", "override", ["train.seed=3"]),
                         Layer("values", "p", {"train.seed": 7})]).train.seed == 7
    with pytest.raises(ConfigError, match=r"^--seed 7 and train.seed=3 disagree"):
        layer_config([Layer("model", "m", "prpn"), Layer("overrides", "override", ["train.seed=3"]),
                       Layer("flags", "flags", {"train.seed": 7})])
    with pytest.raises(ConfigError, match=r"^a.yaml: model_name is 'onlstm', expected 'prpn' \(--model prpn\)"):
        layer_config([Layer("file", "a.yaml", {"model_name": "onlstm"}), Layer("model", "--model prpn", "prpn")])


def test_a_profiles_errors_name_the_layer_of_the_bad_value(tmp_path):
    """build_run_config layers as load_config does: an error names the profile's file or override that gave the
    value, not the whole stack."""
    from induce.reproduce.profiles import build_run_config, load_profile

    folder = tmp_path / "mine"
    folder.mkdir()
    write(folder / "profile.yaml", "extends: toy\noverrides: [data.bptt=1]\n")
    with pytest.raises(ConfigError, match=re.escape(f"{folder / 'profile.yaml'} overrides: data.bptt=1: data.bptt:")):
        build_run_config(load_profile(folder), "prpn", [])
    write(folder / "profile.yaml", "extends: toy\n")
    write(folder / "prpn.yaml", "model_name: onlstm\n")
    with pytest.raises(ConfigError, match=re.escape(f"{folder / 'prpn.yaml'}: model_name is 'onlstm', expected")):
        build_run_config(load_profile(folder), "prpn", [])
    write(folder / "prpn.yaml", "train:\n  epochs: 0\n")
    with pytest.raises(ConfigError, match=re.escape(f"{folder / 'prpn.yaml'}: train.epochs:")):
        build_run_config(load_profile(folder), "prpn", [])
    # the toy profile's overrides are the base's, named by its file
    config = build_run_config(load_profile("toy"), "prpn", ["train.seed=4"], {"train.max_steps": 9})
    assert config.origins.exact("data.bptt") == "induce/configs/toy/profile.yaml overrides: data.bptt=12"
    assert config.origins.exact("train.seed") == "override train.seed=4"
    assert config.origins.exact("train.max_steps") == "induce reproduce"
