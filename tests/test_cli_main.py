"""The top-level `induce` app: help, version, every command registered."""
from typer.testing import CliRunner

from cli.main import app
from induce import __version__

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
        "from cli.main import main\n"
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
    from cli import preprocess as cli_preprocess
    from induce.data import preprocess

    assert cli_preprocess.DEFAULT_MAX_VOCAB == preprocess.DEFAULT_MAX_VOCAB
    assert cli_preprocess.DEFAULT_SECTIONS == preprocess.DEFAULT_SECTIONS


def test_help_paragraphs_are_reflowed():
    from cli.main import reflow

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
