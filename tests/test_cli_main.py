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
