"""Name -> model class registry (``--model NAME``; ``induce models`` lists it).

**A family is a folder.** Each model family is a package ``induce/models/<family>/`` holding its model code
(its ``__init__.py`` imports the modules whose classes ``@register`` themselves), the base config of each of
its models (``<model>.yaml``, read by :func:`induce.config.model_layer`), and, declared on its classes, its
display name, its published figures with their sources and its traits (:class:`~induce.models.base.LanguageModel`).
The registry finds the families by scanning the ``induce.models`` package (:func:`family_packages`): no list
names them, so adding a family is adding a folder (``CONTRIBUTING.md``). ``induce.models`` extends its path
over ``sys.path`` (:mod:`induce.models`), so a folder ``induce/models/<family>/`` under another
``sys.path`` entry is a family too. ``induce/models/common/`` holds the building blocks that several
families share and registers nothing. Modules named in ``INDUCE_PLUGINS`` (:mod:`induce.models.plugins`) are
imported after the families and may register models as well.

The profiles of ``induce reproduce`` stay in ``induce/configs/<profile>/``, not in the families' folders: a
profile is one folder, read and compared whole (its ``profile.yaml`` and each model's sizes beside it).
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from induce.errors import InvalidValueError

from .base import LanguageModel
from .plugins import load_plugins

_REGISTRY: dict[str, type[LanguageModel]] = {}
#: The package the families are folders of.
PACKAGE = __name__.rpartition(".")[0]


def register(cls: type[LanguageModel]) -> type[LanguageModel]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing is not cls:
        raise InvalidValueError(f"model name {cls.name!r} of {cls.__module__}.{cls.__qualname__} is taken by "
                                f"{existing.__module__}.{existing.__qualname__}: give the model another name")
    _REGISTRY[cls.name] = cls
    return cls


def family_packages() -> list[str]:
    """The dotted names of the packages under ``induce.models`` (every folder of its path with an
    ``__init__.py``), sorted: the families, and ``common``."""
    package = importlib.import_module(PACKAGE)
    return sorted({f"{PACKAGE}.{info.name}" for info in pkgutil.iter_modules(package.__path__) if info.ispkg})


def _load_builtins() -> None:
    """Import every family package (:func:`family_packages`), then the plugins of ``INDUCE_PLUGINS``."""
    for module in family_packages():
        importlib.import_module(module)
    load_plugins()


def get_model_class(name: str) -> type[LanguageModel]:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise KeyError(f"unknown model {name!r}; known models: {known}") from None


def model_classes() -> dict[str, type[LanguageModel]]:
    """``{name: class}`` of every registered model, sorted by name."""
    _load_builtins()
    return {name: _REGISTRY[name] for name in sorted(_REGISTRY)}


def is_control(name: str) -> bool:
    """Whether model ``name`` is a control (:attr:`LanguageModel.control`, e.g. ``palm-rb``); False for a
    name that is not registered."""
    _load_builtins()
    cls = _REGISTRY.get(name)
    return bool(cls is not None and cls.control)


def list_models() -> dict[str, str]:
    """``{name: one-line description}`` of every registered model, sorted by name."""
    return {name: cls.description for name, cls in model_classes().items()}


def family_of(cls: type[LanguageModel]) -> str | None:
    """The family package of ``cls`` (``induce.models.palm``), ``None`` for a model defined elsewhere (a plugin)."""
    parts = cls.__module__.split(".")
    prefix = PACKAGE.split(".")
    return ".".join(parts[: len(prefix) + 1]) if parts[: len(prefix)] == prefix and len(parts) > len(prefix) else None


def family_folder(cls: type[LanguageModel]) -> Path | None:
    """The folder of ``cls``'s family (where its ``<model>.yaml`` is), ``None`` for a plugin's model."""
    family = family_of(cls)
    if family is None:
        return None
    return Path(importlib.import_module(family).__file__).parent


def shipped_models() -> list[str]:
    """The models of the families (a family folder under ``induce.models``), sorted: each has its base config
    ``<model>.yaml`` in its folder. Models that plugins register elsewhere are not among them."""
    return [name for name, cls in model_classes().items() if family_of(cls) is not None]
