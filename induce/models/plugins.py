"""Plugins: modules named in the ``INDUCE_PLUGINS`` environment variable (``module,module``), imported
before models are looked up or listed (and before the CLI builds its help), so that a family defined
outside this package registers itself (``@register`` on its model class, its own parser kind and decoders
in :mod:`induce.trees.kinds`) without a change to induce. Each module is imported once, as ``import
module`` would (it must be on ``sys.path``).

This module imports only the standard library: ``induce --help`` stays light when no plugin is named.
"""
from __future__ import annotations

import importlib
import os

from induce.errors import InduceError

#: The environment variable holding the plugin modules, comma-separated.
PLUGINS_VARIABLE = "INDUCE_PLUGINS"


def plugin_modules() -> list[str]:
    """The module names in ``INDUCE_PLUGINS`` (empty entries and spaces dropped)."""
    return [name.strip() for name in os.environ.get(PLUGINS_VARIABLE, "").split(",") if name.strip()]


def load_plugins() -> None:
    """Import every plugin module; an :class:`InduceError` naming the variable and the module when one fails."""
    for name in plugin_modules():
        try:
            importlib.import_module(name)
        except ImportError as err:
            setting = os.environ[PLUGINS_VARIABLE]
            raise InduceError(f"{PLUGINS_VARIABLE}={setting}: cannot import {name!r} ({err})") from err


def load_plugins_for_help() -> None:
    """:func:`load_plugins` before the CLI builds its help; a plugin that fails to import is left to the
    command that looks up a model, which reports it in one line (exit 2) inside its error handling."""
    try:
        load_plugins()
    except InduceError:
        pass
