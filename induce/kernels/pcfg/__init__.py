"""The neural PCFGs' kernels: the inside algorithm of a dense grammar and of TN-PCFG's low-rank one,
a module per tier each, and what is built on them.

Dense (``inside``): ``dense_reference`` (Kim et al.'s loops), ``dense_torch`` (one batched step per width,
hand-written outside pass), ``dense_triton``; the word tables both fast tiers share in ``words`` and the
max-product pass's compiled CPU loops in ``native`` (``native.cpp``). Low-rank (``inside_lowrank``):
``lowrank_reference``, ``lowrank_torch``, ``lowrank_triton``. Span marginals (the gradient of a log
partition with respect to span scores) in ``marginals``. The public functions and their conventions are
in :mod:`induce.kernels`.
"""
