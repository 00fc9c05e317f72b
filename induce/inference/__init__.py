"""Using a trained run: find it, load it, parse with it, score it, look inside it.

* :mod:`.runs` — which run the commands use by default (:func:`~induce.inference.runs.latest_run`), a
  run's description and corpus, what a folder without a usable checkpoint holds;
* :mod:`.loading` — :func:`~induce.inference.loading.load_run`: a run folder or checkpoint -> model and
  vocabulary on a device;
* :mod:`.predict` — raw sentences -> trees whose leaves are the tokens as typed; trees as text;
* :mod:`.language_model` — perplexity of a corpus split or of sentences; text generation;
* :mod:`.scoring` — a run's trees of gold sentences under a convention (``induce eval``; scored by
  :mod:`induce.evaluation`);
* :mod:`.show` — one sentence's tree and the distances / span scores it was decoded from (``induce show``);
* :mod:`.api` — the library's :class:`~induce.inference.api.Run` (``induce.load``), through the same functions.

``import induce.inference`` imports nothing: each module is imported where it is used, so that
``induce --help`` stays fast.
"""
