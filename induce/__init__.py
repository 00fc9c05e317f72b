"""induce: unsupervised grammar induction toolkit (PRPN, ON-LSTM, PaLM) with one evaluation protocol.

As a library (see :mod:`induce.inference.api`)::

    import induce
    run = induce.load("runs/x")
    trees = run.parse(["The cat sat ."])   # nltk.Tree objects, leaves as given
    figures = run.score("22.mrg")          # the figures of `induce eval --checkpoint runs/x --gold 22.mrg`

``import induce`` itself imports nothing heavy (no torch, nltk or numpy): :func:`load`, :class:`Run` and
:func:`format_tree` import their modules when first used.

Layers, lowest first: a module uses modules of its own layer and of lower ones only, by import or by a
``"module:attr"`` string (``tests/test_layout.py`` checks both); a higher layer that a lower one needs to
call registers itself with it (a parser kind's plots and tables, a training objective's implementation)::

    errors, files < config < trees < kernels < models < data < evaluation < training < inference
    < assess, report < diagnostics < reproduce < cli, devtools, induce, __main__

Each name is a package (``induce/models/``) or a module at the root (``config``); ``induce`` is this
module. ``evaluation`` is the metric core (F1, conventions, EVALB, the bootstrap, baselines), below
``inference``; ``assess`` drives inference to evaluate runs (``induce eval``) and ``report`` writes the
reproduction report; ``devtools`` holds the compile checks and launch counters run in CI.
"""

__version__ = "0.1.0"

__all__ = ["Run", "__version__", "format_tree", "load"]


def load(path, device: str = "auto"):
    """The trained run in ``path`` (a run folder or a checkpoint), ready to parse and score: an
    :class:`induce.inference.api.Run` (see :func:`induce.inference.api.load`)."""
    from induce.inference.api import load as load_run

    return load_run(path, device)


def format_tree(tree, style: str = "ptb") -> str:
    """A tree as ``induce parse`` writes it: ``ptb`` (one bracketed line), ``pretty`` or ``json``
    (see :func:`induce.inference.api.format_tree`)."""
    from induce.inference.api import format_tree as format_one

    return format_one(tree, style)


def __getattr__(name: str):
    # `induce.Run` without importing torch at `import induce`.
    if name == "Run":
        from induce.inference.api import Run

        return Run
    raise AttributeError(f"module 'induce' has no attribute {name!r}")
