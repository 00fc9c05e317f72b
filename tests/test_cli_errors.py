"""One error wrapper for every command (induce.cli.messages): a user error (InduceError, OSError) is one
line on stderr with exit status 2, Ctrl-C is exit status 130, and anything else (a ValueError included)
is a bug that keeps its traceback. Also: the app starts as ``python -m induce`` and ``python -m
induce.cli.main``."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import induce.cli.messages as messages
from induce import __version__
from induce.cli.main import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
GOLD_TREE = "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))))"


def _commands(typer_app, path=()):
    """``(command path, callback)`` of every command of the app, sub-apps included."""
    for info in typer_app.registered_commands:
        yield (*path, info.name or info.callback.__name__.replace("_", "-")), info.callback
    for group in typer_app.registered_groups:
        yield from _commands(group.typer_instance, (*path, group.name))


#: One user mistake per command: (arguments, what the one-line message says). Each needs neither data,
#: nor a trained run, nor more than a second.
USER_ERRORS = {
    "preprocess": (["preprocess", "--valid", "{gold}"], "--valid/--test need --train"),
    "eval": (["eval", "--baseline", "diagonal", "--gold", "{gold}"], "unknown baseline 'diagonal'"),
    "train": (["train", "--model", "nosuch"], "unknown model 'nosuch'"),
    "config": (["config", "--model", "prpn", "optim.lr=-1"], "override optim.lr=-1: optim.lr:"),
    "parse": (["parse", "{text}", "--format", "xml"], "--format 'xml': use ptb, pretty or json"),
    "generate": (["generate", "--checkpoint", "{tmp}/missing"], "no such run folder or checkpoint"),
    "ensemble": (["ensemble", "{gold}", "-o", "{tmp}/e.txt"], "two sources or more"),
    "compare": (["compare", "{gold}", "--gold", "{gold}"], "takes two sources"),
    "agreement": (["agreement", "{gold}", "--gold", "{gold}"], "takes two sources or more"),
    "leaderboard": (["leaderboard", "--gold", "{gold}"], "give folders (or files) of predictions, or --manifest"),
    "models": None,  # takes no input that can be wrong
    "diagnose grad": (["diagnose", "grad", "--out", "{tmp}/grad"], "give at least one --checkpoint or --model"),
    "diagnose memory": (["diagnose", "memory", "--lengths", "10,x", "--out", "{tmp}/mem"], "--lengths"),
    "task train": (["task", "train", "--lr", "-1", "--out", "{tmp}/c.safetensors"], "--lr -1.0: give a positive"),
    "task eval": (["task", "eval", "--checkpoint", "{tmp}/missing.safetensors"], "checkpoint file not found"),
    "reproduce": (["reproduce", "--seeds", "a,b", "--out", "{tmp}/out"], "--seeds: expected comma-separated"),
    "show tree": (["show", "tree", "--checkpoint", "{tmp}"], "no sentence"),
    "show attention": (["show", "attention", "the cat", "--checkpoint", "{tmp}/missing", "--out", "{tmp}/a.png"],
                       "no such run folder or checkpoint"),
}


def test_every_command_is_listed_here_and_wrapped():
    commands = {" ".join(path): callback for path, callback in _commands(app)}
    assert set(commands) == set(USER_ERRORS)
    for name, callback in commands.items():
        assert getattr(callback, "reports_user_errors", False), name


def test_no_command_handles_user_errors_itself():
    """The wrapper is the only place that turns an exception into exit status 2 (a ValueError of int() may
    still become an InduceError where an option is parsed)."""
    for path in sorted((REPO / "induce" / "cli").glob("*.py")):
        if path.name == "messages.py":
            continue
        text = path.read_text()
        assert not re.search(r"except \(?(InduceError|OSError)", text), path.name
        assert not re.search(r"Exit\((code=)?2\)", text), path.name


@pytest.mark.parametrize("command", [name for name, case in USER_ERRORS.items() if case is not None])
def test_user_error_is_one_line_through_the_wrapper(command, tmp_path, monkeypatch):
    gold = tmp_path / "gold.mrg"
    gold.write_text(GOLD_TREE + "\n")
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    arguments, expected = USER_ERRORS[command]
    arguments = [a.format(gold=gold, text=text, tmp=tmp_path) for a in arguments]
    # Tag what the wrapper prints, so that a command printing its own message would fail here.
    monkeypatch.setattr(messages, "error_text", lambda err: "WRAPPED: " + messages.escape(str(err)))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, arguments, env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: WRAPPED: "), result.output
    assert expected in lines[0]


def test_an_os_error_is_said_as_path_and_reason(tmp_path, monkeypatch):
    import induce.data.locate

    def unreadable(**kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "wsj"))

    monkeypatch.setattr(induce.data.locate, "prepare_corpus", unreadable)
    result = runner.invoke(app, ["preprocess", "--out-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"error: {tmp_path / 'wsj'}: permission denied" in " ".join(result.output.lower().split())


@pytest.mark.parametrize("command", ["eval", "preprocess"])
def test_a_bug_keeps_its_traceback(command, tmp_path, monkeypatch):
    """A plain ValueError is not a user error: the exception comes out (Typer prints its traceback).
    `induce eval` used to swallow every ValueError into one line."""
    import induce.assess.run_eval
    import induce.data.locate

    def bug(*args, **kwargs):
        raise ValueError("a genuine bug")

    monkeypatch.setattr(induce.assess.run_eval, "run_eval", bug)
    monkeypatch.setattr(induce.data.locate, "prepare_corpus", bug)
    arguments = {"eval": ["eval", "--baseline", "right"], "preprocess": ["preprocess", "--out-dir", str(tmp_path)]}
    result = runner.invoke(app, arguments[command])
    assert isinstance(result.exception, ValueError) and str(result.exception) == "a genuine bug"
    assert result.exit_code == 1
    assert "error:" not in result.output


def test_ctrl_c_exits_130(monkeypatch):
    import induce.assess.run_eval

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(induce.assess.run_eval, "run_eval", interrupted)
    result = runner.invoke(app, ["eval", "--baseline", "right"])
    assert result.exit_code == messages.INTERRUPTED_EXIT == 130, result.output


def test_library_callers_still_get_a_value_error():
    """The user's bad values are InvalidValueError: an InduceError at the command line, a ValueError to
    library code that catches one."""
    from induce.errors import InduceError, InvalidValueError
    from induce.evaluation import baseline_tree

    with pytest.raises(InvalidValueError) as caught:
        baseline_tree(3, "diagonal")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, InduceError)


@pytest.mark.parametrize("module", ["induce", "induce.cli.main"])
def test_python_dash_m_starts_the_app(module):
    done = subprocess.run([sys.executable, "-m", module, "--version"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"induce {__version__}"
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "Usage: induce " in done.stdout
