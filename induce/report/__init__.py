"""The reproduction report of ``induce reproduce`` and the figures of ``induce show``.

* :mod:`.names` — display names of models and baselines (a leaf module: it imports nothing of induce);
* :mod:`.published` — the published figures the report quotes, with their sources;
* :mod:`.markdown` — ``results.json`` and ``REPORT.md``, one function per section;
* :mod:`.text` — the small text pieces the sections share (``mean ± std``, tables, durations);
* :mod:`.findings` — the sentences generated from the results (best model, below baselines, outliers);
* :mod:`.figures` — the PNG plots (matplotlib, Agg backend);
* :mod:`.drawing` — the report's figures drawn from the results and the trained runs.

Nothing here is imported by ``import induce.report``: each module is imported where it is used.
"""
