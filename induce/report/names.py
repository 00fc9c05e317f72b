"""Display names of the models and baselines (``prpn`` -> ``PRPN``) and of the splits (``valid`` of the WSJ
files -> ``dev (WSJ 22)``), shared by the report, its findings, its figures and the summary table of ``induce
reproduce``. A model's display name is its family's declaration
(:attr:`induce.models.base.LanguageModel.display_name`), looked up in the registry when first asked for; the
baselines' are here."""
from __future__ import annotations

from typing import Optional

#: The baselines' display names (trees that no model learns).
BASELINE_NAMES = {"right": "right-branching", "left": "left-branching", "balanced": "balanced",
                  "random": "random trees"}


def display(name: str) -> str:
    """How the report names model or baseline ``name``: the model's ``display_name`` (its name when it declares
    none), a baseline's name from :data:`BASELINE_NAMES`, else ``name`` itself (a model no longer registered)."""
    if name in BASELINE_NAMES:
        return BASELINE_NAMES[name]
    from induce.models.registry import model_classes

    cls = model_classes().get(name)
    return (cls.display_name or name) if cls is not None else name


#: Corpus sources whose splits are the WSJ sections (valid 22, test 23): the published figures' test split.
WSJ_SOURCES = ("ldc", "wsj-files")


def split_label(split: str, source_kind: Optional[str]) -> str:
    """``dev (WSJ 22)``, ``test (WSJ 23)``, ``dev (NLTK sample)``, ``dev (synthetic treebank)``..."""
    name = "dev" if split == "valid" else "test"
    where = {**{kind: "WSJ 22" if split == "valid" else "WSJ 23" for kind in WSJ_SOURCES},
             "nltk-sample": "NLTK sample", "synthetic": "synthetic treebank"}.get(source_kind or "", "")
    return f"{name} ({where})" if where else f"{split} split"


def results_split_label(results: dict, split: Optional[str] = None) -> str:
    """``split`` (default: the final one, ``results["split"]``) of a reproduction's results, named."""
    source = results["corpus"]["eval"]
    return split_label(split or results["split"], source.get("source_kind") or source.get("kind"))
