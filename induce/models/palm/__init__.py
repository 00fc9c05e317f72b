"""PaLM (Peng, Schwartz and Smith 2019): PaLM-U (``palm``) and its variants PaLM-S (``palm-s``, supervised by
gold spans) and PaLM-RB (``palm-rb``, the right-branching control). :mod:`.model` (the language model and
its optimiser split, :meth:`~induce.models.palm.model.PaLMBase.param_groups`), :mod:`.attention` (the span
attention); base configs ``palm.yaml``, ``palm-s.yaml``, ``palm-rb.yaml``, and ``palm-paper.yaml`` (the
paper's equations and sizes, for ``--config``)."""
from .model import PaLM, PaLMBase, PaLMConfig, PaLMRightBranching, PaLMSupervised

__all__ = ["PaLM", "PaLMBase", "PaLMConfig", "PaLMRightBranching", "PaLMSupervised"]
