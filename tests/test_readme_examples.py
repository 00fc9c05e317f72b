"""Every command example of the README, of the docs/ pages and of the `--help` texts is accepted as written.

Each example is parsed by the CLI's own argument parser (the Typer app with every command's work
replaced by a no-op), so that a renamed option or command breaks this test; the cheap ones are also
run for real (`induce --help`, `induce models`, `induce eval --baseline right --wsj40` on the NLTK
sample). `make` examples are expanded with `make -n` and the `induce` command they run is parsed.
"""
from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from induce.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
#: Examples that are run for real (cheap), with the NLTK sample as data.
RUN_FOR_REAL = ("induce --help", "induce models", "induce eval --baseline right --wsj40")


def _expand(command: str) -> list[str]:
    """``induce show tree|attention X`` -> one command per alternative (the README's shorthand)."""
    words = shlex.split(command)
    choices = [word.split("|") if "|" in word and not word.startswith("-") else [word] for word in words]
    return [" ".join(shlex.quote(w) for w in combo) for combo in itertools.product(*choices)]


#: The pages whose examples are checked: the README and the documentation site.
PAGES = ("README.md", *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md")))


def page_examples(page: str) -> list[str]:
    """``induce ...`` and ``make ...`` commands in one page's code blocks and inline code.

    A line ending in ``\\`` continues on the next; ``echo ... | induce parse -`` gives its ``induce`` part."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found, lines = [], []
    in_fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence or line.startswith("    "):
            lines.append(line)
    joined = "\n".join(lines).replace("\\\n", " ")
    for line in joined.splitlines():
        for part in line.split("#")[0].split(" | "):
            command = part.strip()
            if command.startswith(("induce ", "make ")) or command in ("induce", "make"):
                found.append(command)
    found += [span for span in re.findall(r"`([^`\n]+)`", text) if span.startswith(("induce ", "make "))]
    return sorted({expanded for command in found for expanded in _expand(command)})


def readme_examples() -> list[str]:
    """The examples of the README and of every docs/ page."""
    return sorted({example for page in PAGES for example in page_examples(page)})


def help_examples() -> list[str]:
    """``induce ...`` commands quoted in the help of any command, option or argument."""
    found = set()

    def walk(command) -> None:
        texts = [command.help or "", getattr(command, "epilog", None) or ""]
        texts += [getattr(param, "help", None) or "" for param in command.params]
        for text in texts:
            found.update(span for span in re.findall(r"`([^`]+)`", text) if span.startswith("induce "))
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return sorted({expanded for command in found for expanded in _expand(" ".join(command.split()))})


def parse_only(command: str) -> str:
    """Parse ``induce ARGS`` with the app's parser, running nothing; returns the command's name."""
    words = shlex.split(command)
    assert words[0] == "induce", command
    root = typer.main.get_command(app)
    reached = []

    def stub(command_object):
        for sub in getattr(command_object, "commands", {}).values():
            stub(sub)
        if not getattr(command_object, "commands", None):
            name = command_object.name
            command_object.callback = lambda **kwargs: reached.append(name)

    stub(root)
    root.main(args=words[1:], prog_name="induce", standalone_mode=False)
    return reached[-1] if reached else ""


def command_names(words: list[str]) -> list[str]:
    """The leading words of ``words`` that name commands (``["show", "tree"]``)."""
    names, command = [], typer.main.get_command(app)
    for word in words:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        names.append(word)
        command = sub
    return names


def make_commands(example: str) -> list[str]:
    """The ``induce`` commands that ``make TARGET [VAR=VALUE]`` runs (``make -n``), as ``induce ...``."""
    done = subprocess.run(["make", "-n", *shlex.split(example)[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, f"{example}: {done.stderr}"
    commands = []
    for line in done.stdout.splitlines():
        found = re.search(r"-m induce(?:\.cli\.main)? (.*)", line)
        if found:
            commands.append("induce " + found.group(1).strip())
    return commands


def test_examples_were_found():
    readme, helps = page_examples("README.md"), help_examples()
    assert "make reproduce" in readme and "make test" in readme
    assert any(example.startswith("induce train --model onlstm --max-steps") for example in readme), readme
    assert "induce parse --checkpoint runs/onlstm-quick -" in readme
    docs = page_examples("docs/training.md") + page_examples("docs/evaluation.md")
    assert "induce eval --checkpoint RUN --lm" in docs and "induce parse corpus.txt --format pretty" in docs
    assert "induce eval --baseline right --wsj40" in helps and "induce parse corpus.txt" in helps


@pytest.mark.parametrize("example", readme_examples() + help_examples())
def test_example_is_accepted_by_the_parser(example):
    words = shlex.split(example)
    if "..." in words:
        pytest.skip("shorthand (...), not a command line")
    if words[0] == "induce" and len(command_names(words[1:])) == len(words) - 1:
        # `induce parse`, `induce task train`: a mention of a command (the README's overview), not a
        # command line; it must name an existing command
        assert len(words) > 1 or example == "induce"
        return
    if example.startswith("make"):
        if shutil.which("make") is None:
            pytest.skip("make is not installed")
        target = shlex.split(example)[1] if len(shlex.split(example)) > 1 else ""
        commands = make_commands(example)
        if target == "reproduce":
            assert commands, f"{example} runs no induce command"
            # the README's variants too
            commands += make_commands("make reproduce PROFILE=paper SEEDS=1,2,3 OUT=elsewhere DATA=/some/data")
        for command in commands:
            parse_only(command)
        return
    assert parse_only(example) == (command_names(words[1:]) or [""])[-1], example


@pytest.mark.parametrize("example", RUN_FOR_REAL)
def test_cheap_examples_run(example, tmp_path, monkeypatch):
    assert example in readme_examples() + help_examples() or example == "induce --help"
    words = shlex.split(example)[1:]
    env = {}
    if "eval" in words:
        data = Path(os.environ.get("INDUCE_DATA", "")) / "nltk_treebank"
        if not (data / "wsj_0001.mrg").is_file():
            pytest.skip("needs the NLTK treebank sample under $INDUCE_DATA/nltk_treebank")
        env["INDUCE_DATA"] = str(data)
        monkeypatch.chdir(tmp_path)  # the default corpus is prepared under ./corpora
    result = CliRunner().invoke(app, words, env=env)
    assert result.exit_code == 0, result.output
    if "eval" in words:
        assert "corpus F1" in result.output and "length <= 40" in result.output
    if "models" in words:
        assert "onlstm" in result.output and "palm" in result.output
