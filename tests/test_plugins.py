"""Plugins that cannot be loaded (``INDUCE_PLUGINS``): an exception on import, a syntax error, a model name
that is taken. Each is one line naming the plugin where a model is looked up; ``induce --help`` and the
commands that need no model still work."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from induce.models import plugins
from induce.models.plugins import PluginError

from helpers import child_env

PLUGINS = {
    "raises": ("import os\nraise RuntimeError('the plugin is broken')\n", r"RuntimeError: the plugin is broken \("
               r".*plug_raises\.py line 2\)"),
    "syntax": ("def broken(:\n    pass\n", r"syntax error: .*plug_syntax\.py line 1\)"),
    "taken": ("from induce.models.registry import register\nfrom induce.models.prpn.model import PRPN\n\n\n"
              "@register\nclass Mine(PRPN):\n    name = 'prpn'\n",
              r"model name 'prpn' of plug_taken\.Mine is taken by induce\.models\.prpn\.model\.PRPN"
              r".*plug_taken\.py line"),
}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    for kind, (code, _) in PLUGINS.items():
        (tmp_path / f"plug_{kind}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_a_broken_plugin_is_one_error_naming_it_and_is_not_imported_again(plugin_dir, monkeypatch, kind):
    from induce.models.registry import get_model_class

    name = f"plug_{kind}"
    monkeypatch.setenv(plugins.PLUGINS_VARIABLE, name)
    monkeypatch.setattr(plugins, "_FAILED", {})
    for _ in range(2):  # the same message again, not a second import's (e.g. "registered twice")
        with pytest.raises(PluginError) as info:
            get_model_class("onlstm")
        message = str(info.value)
        assert message.startswith(f"INDUCE_PLUGINS={name}: plugin {name!r}: importing it failed: ")
        assert "\n" not in message
        assert re.search(PLUGINS[kind][1], message), message
    sys.modules.pop(name, None)


def _induce(args, plugin: str, folder: Path, cwd: Path):
    env = {**child_env(), plugins.PLUGINS_VARIABLE: plugin,
           "PYTHONPATH": os.pathsep.join([str(folder), child_env()["PYTHONPATH"]])}
    return subprocess.run([sys.executable, "-m", "induce", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_help_and_commands_without_a_model_work_with_a_broken_plugin(plugin_dir, tmp_path):
    """In fresh processes (the CLI loads the plugins when it starts), one kind of failure each."""
    shown = _induce(["--help"], "plug_syntax", plugin_dir, tmp_path)
    assert shown.returncode == 0 and "Usage" in shown.stdout and "Traceback" not in shown.stderr, shown.stderr
    assert shown.stderr.count("\n") == 1 and "warning: INDUCE_PLUGINS=plug_syntax: plugin 'plug_syntax'" in shown.stderr
    listed = _induce(["models"], "plug_taken", plugin_dir, tmp_path)
    assert listed.returncode == 2 and "Traceback" not in listed.stderr, listed.stderr
    assert "error: INDUCE_PLUGINS=plug_taken: plugin 'plug_taken': importing it failed: model name 'prpn'" in \
        listed.stderr
    gold = tmp_path / "gold.txt"  # a command that needs no model runs as without the plugin
    gold.write_text("(S (NP (DT The) (NN cat)) (VP (VBD sat)))\n")
    scored = _induce(["eval", "--baseline", "right", "--gold", str(gold), "--json"], "plug_raises", plugin_dir,
                     tmp_path)
    assert scored.returncode == 0 and '"sentence_f1"' in scored.stdout, scored.stderr
