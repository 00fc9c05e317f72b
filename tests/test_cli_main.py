"""The top-level `induce` app: help, version, every command registered."""
from typer.testing import CliRunner

from induce import __version__
from induce.cli.main import app

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"induce {__version__}"


def test_help_lists_the_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("preprocess", "eval", "train", "parse"):
        assert command in result.output


def test_help_does_not_import_heavy_modules():
    """`induce --help` (and a command's --help) in a fresh interpreter imports neither torch nor nltk.

    Checked through sys.modules rather than timed, so that it holds on a loaded machine too.
    """
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys\n"
        "from induce.cli.main import main\n"
        "for argv in (['induce', '--help'], ['induce', 'parse', '--help'], ['induce', 'eval', '--help']):\n"
        "    sys.argv = argv\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as stop:\n"
        "        assert stop.code in (0, None), stop.code\n"
        "heavy = ('torch', 'nltk', 'numpy', 'scipy', 'matplotlib', 'safetensors', 'triton')\n"
        "print('IMPORTED:', sorted(m for m in heavy if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "IMPORTED: []" in done.stdout, done.stdout[-300:]


def test_preprocess_defaults_agree_with_the_library():
    from induce.cli import preprocess as cli_preprocess
    from induce.data import preprocess

    assert cli_preprocess.DEFAULT_MAX_VOCAB == preprocess.DEFAULT_MAX_VOCAB
    assert cli_preprocess.DEFAULT_SECTIONS == preprocess.DEFAULT_SECTIONS


def test_help_paragraphs_are_reflowed():
    from induce.cli.main import reflow

    assert reflow("Title line.\n\n    One sentence\n    goes on.\n\n    - item one\n    - item two\n") == (
        "Title line.\n\nOne sentence goes on.\n\n- item one\n- item two"
    )
    result = runner.invoke(app, ["parse", "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert "punctuation left out, lower case, numbers -> N" in result.output


def test_commands_with_a_model_say_where_they_look_and_default_to_auto_device():
    for command in (["parse"], ["eval"], ["generate"], ["show", "tree"], ["show", "attention"]):
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "300"}, terminal_width=300)
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.replace("│", " ").split())
        assert "results/runs/" in text, command
        assert "--device" in text and "auto (CUDA when available, else CPU)" in text, command


def test_train_errors_blame_the_flag_not_the_config_file():
    result = runner.invoke(app, ["train", "--model", "nosuch"])
    assert result.exit_code == 2
    assert "--model nosuch: model_name: unknown model 'nosuch'" in " ".join(result.output.split())
    assert "default.yaml" not in result.output
    result = runner.invoke(app, ["train", "--model", "prpn", "--max-epochs", "0"])
    assert result.exit_code == 2 and "--max-epochs 0: train.epochs" in " ".join(result.output.split())


def _help_texts(typer_app, path=()):
    """``(command path, text)`` for each command's help, epilog and parameter helps (recursively)."""
    import inspect

    import typer as typer_module

    for info in typer_app.registered_commands:
        command = (*path, info.name or info.callback.__name__.replace("_", "-"))
        texts = [info.help or inspect.getdoc(info.callback) or "", info.epilog or ""]
        for parameter in inspect.signature(info.callback).parameters.values():
            if isinstance(parameter.default, typer_module.models.ParameterInfo):
                texts.append(parameter.default.help or "")
        yield from ((command, text) for text in texts if text)
    for group in typer_app.registered_groups:
        yield from _help_texts(group.typer_instance, (*path, group.name))


def test_help_keeps_every_bracketed_text():
    """Typer renders help with rich markup, which took `[i,j]` (eval's epilog) or `[, ptb.test.txt]` for a
    style tag and dropped it: every bracketed piece of every command's help is printed as written."""
    import re

    checked = 0
    for command, text in _help_texts(app):
        plain = text.replace("\\[", "[")  # the text as written (without rich's escapes)
        pieces = re.findall(r"\[[^\[\]]*\]", plain)
        if not pieces:
            continue
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "2000"}, terminal_width=2000)
        assert result.exit_code == 0, result.output
        shown = " ".join(result.output.replace("│", " ").split())
        for piece in pieces:
            checked += 1
            assert " ".join(piece.split()) in shown, (command, piece)
    assert checked >= 4  # eval's [i,j] (three), preprocess's [, ptb.test.txt]


def _commands(typer_app, path=()):
    """``(command path, callback)`` of every command (recursively)."""
    for info in typer_app.registered_commands:
        yield (*path, info.name or info.callback.__name__.replace("_", "-")), info.callback
    for group in typer_app.registered_groups:
        yield from _commands(group.typer_instance, (*path, group.name))


def test_help_ends_at_the_docstring_s_form_feed():
    """What a command's docstring says after a form feed is for the source's readers (why the function is
    long, say): no command's --help prints it, and the text before it is printed."""
    import inspect

    cut = 0
    for command, callback in _commands(app):
        doc = inspect.getdoc(callback) or ""
        if "\f" not in doc:
            continue
        cut += 1
        before, after = (" ".join(part.split()) for part in doc.split("\f", 1))
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "2000"}, terminal_width=2000)
        assert result.exit_code == 0, result.output
        shown = " ".join(result.output.replace("│", " ").split())
        assert after not in shown, command
        assert before.split(". ")[0] in shown, command
    assert cut >= 2  # eval and reproduce
