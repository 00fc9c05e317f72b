"""Display names of the models and baselines (``prpn`` -> ``PRPN``), shared by the report, its findings,
its figures and the summary table of ``induce reproduce`` (a leaf: it imports nothing of induce)."""
from __future__ import annotations

NAMES = {"prpn": "PRPN", "onlstm": "ON-LSTM", "palm": "PaLM-U", "palm-s": "PaLM-S", "palm-rb": "PaLM-RB",
         "npcfg": "N-PCFG", "cpcfg": "C-PCFG", "tnpcfg": "TN-PCFG",
         "right": "right-branching", "left": "left-branching", "balanced": "balanced", "random": "random trees"}


def display(name: str) -> str:
    return NAMES.get(name, name)
