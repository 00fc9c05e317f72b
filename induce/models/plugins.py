"""Plugins: modules named in the ``INDUCE_PLUGINS`` environment variable (``module,module``), imported
before models are looked up or listed (and before the CLI builds its help), so that a family defined
outside this package registers itself (``@register`` on its model class, its own parser kind and decoders
in :mod:`induce.trees.kinds`) without a change to induce. Each module is imported once, as ``import
module`` would (it must be on ``sys.path``).

A plugin that cannot be loaded (not found, a syntax error, an exception while it is imported, a model,
kind or decoder name that is taken already) is a :class:`PluginError`: one line naming the variable, the
module and what went wrong, raised by every later model lookup (the module is not imported again: a
second try would report the names its first try registered, not the cause). ``induce --help`` and the
commands that need no model work as without the plugin; :func:`load_plugins_for_help` says in one line
on stderr that it was left out.

This module imports only the standard library: ``induce --help`` stays light when no plugin is named.
"""
from __future__ import annotations

import importlib
import os
import sys
import traceback

from induce.errors import InduceError

#: The environment variable holding the plugin modules, comma-separated.
PLUGINS_VARIABLE = "INDUCE_PLUGINS"

#: Plugin module -> the message of its failed import (not tried again in this process).
_FAILED: dict[str, str] = {}


class PluginError(InduceError):
    """A plugin module of ``INDUCE_PLUGINS`` could not be loaded."""


def plugin_modules() -> list[str]:
    """The module names in ``INDUCE_PLUGINS`` (empty entries and spaces dropped)."""
    return [name.strip() for name in os.environ.get(PLUGINS_VARIABLE, "").split(",") if name.strip()]


def failure_reason(err: BaseException) -> str:
    """What went wrong in one line: the exception and where it was raised (``FILE line N``)."""
    if isinstance(err, SyntaxError):
        where = f" ({err.filename} line {err.lineno})" if err.filename else ""
        return f"syntax error: {err.msg}{where}"
    text = " ".join(str(err).split())
    # the innermost frame outside the import machinery and induce: the plugin's own line
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = [frame for frame in traceback.extract_tb(err.__traceback__)
              if "importlib" not in frame.filename and not os.path.abspath(frame.filename).startswith(package + os.sep)]
    where = f" ({frames[-1].filename} line {frames[-1].lineno})" if frames else ""
    if isinstance(err, InduceError) and text:  # induce's own refusal says what it is
        return f"{text}{where}"
    return f"{type(err).__name__}: {text}{where}" if text else f"{type(err).__name__}{where}"


def load_plugins() -> None:
    """Import every plugin module; a :class:`PluginError` naming the variable and the module when one fails."""
    for name in plugin_modules():
        if name in _FAILED:
            raise PluginError(_FAILED[name])
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - whatever a plugin raises, it is reported in one line
            setting = os.environ.get(PLUGINS_VARIABLE, "")
            cause = (f"cannot import it ({err})" if isinstance(err, ModuleNotFoundError) and err.name == name
                     else f"importing it failed: {failure_reason(err)}")
            _FAILED[name] = f"{PLUGINS_VARIABLE}={setting}: plugin {name!r}: {cause}"
            raise PluginError(_FAILED[name]) from None


def load_plugins_for_help() -> None:
    """:func:`load_plugins` before the CLI builds its help. A plugin that fails is said in one line on stderr
    and left out (its models and decoders are not in the help); the commands that look up a model report
    it as their error (one line, exit 2), the others run."""
    try:
        load_plugins()
    except PluginError as err:
        sys.stderr.write(f"warning: {err}; it is left out (commands that need a model stop with this error)\n")
