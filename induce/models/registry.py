"""Name -> model class registry (``--model NAME``; ``induce models`` lists it): the built-in families and
those of the plugin modules named in ``INDUCE_PLUGINS`` (:mod:`induce.models.plugins`)."""
from __future__ import annotations

import importlib

from induce.errors import InvalidValueError

from .base import LanguageModel
from .plugins import load_plugins

_REGISTRY: dict[str, type[LanguageModel]] = {}
# Modules whose import registers the built-in models.
_BUILTIN_MODULES = (
    "induce.models.onlstm",
    "induce.models.prpn",
    "induce.models.palm",
    "induce.models.relmem",  # rellstm, relrnn, memlstm: language models only (parser_kind "none")
    "induce.models.pcfg",  # npcfg, cpcfg: neural PCFGs, trained sentence by sentence
    "induce.models.tnpcfg",  # tnpcfg: the low-rank neural PCFG
    "induce.models.simple_pcfg",  # snpcfg, scpcfg: simple PCFGs (independent left and right productions)
)


def register(cls: type[LanguageModel]) -> type[LanguageModel]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing is not cls:
        raise InvalidValueError(f"model name {cls.name!r} of {cls.__module__}.{cls.__qualname__} is taken by "
                                f"{existing.__module__}.{existing.__qualname__}: give the model another name")
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    """Import the built-in models' modules, then the plugins of ``INDUCE_PLUGINS`` (:mod:`.plugins`)."""
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    load_plugins()


def get_model_class(name: str) -> type[LanguageModel]:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise KeyError(f"unknown model {name!r}; known models: {known}") from None


def is_control(name: str) -> bool:
    """Whether model ``name`` is a control (:attr:`LanguageModel.control`, e.g. ``palm-rb``); False for a
    name that is not registered."""
    _load_builtins()
    cls = _REGISTRY.get(name)
    return bool(cls is not None and cls.control)


def list_models() -> dict[str, str]:
    """``{name: one-line description}`` of every registered model, sorted by name."""
    _load_builtins()
    return {name: _REGISTRY[name].description for name in sorted(_REGISTRY)}
