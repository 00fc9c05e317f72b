"""The published figures the report quotes (:data:`PUBLISHED`, each with its table and source).

A model's figures are its family's declaration (:attr:`induce.models.base.LanguageModel.published`: the PaLM paper's
Tables 3 and 4 for PaLM and PRPN, the LM perplexities of ON-LSTM and PRPN, the WSJ-test sentence F1 over all lengths
of the neural PCFGs, ON-LSTM and PRPN as the issues that added those figures quote Shen et al. (2019), Kim, Dyer &
Rush (2019) and Yang, Zhao & Tu (2021)); :func:`published_figures` gathers them from the registry into the tables
below, which hold what is not a model's: each table's source and the rows of baselines (right-branching, DIORA, the
gold trees). ``tests/test_reproduce.py`` checks the PaLM paper's figures against its text when the developers' copy
of it is present. Nothing else is quoted: where a paper's table is not in the texts (PaLM's Table 1 perplexities,
ON-LSTM's and Kim et al.'s WSJ10 F1 and label recall) the report says so.
"""
from __future__ import annotations

import copy

PAPER_FILE = "palm-peng-schwartz-smith-2019.txt"
PALM = "Peng, Schwartz and Smith (2019), PaLM"

#: The tables without the models' rows: sources, notes and the baselines' rows (from the PaLM paper's text).
TABLES = {
    "table3": {
        "source": f"{PALM}, Table 3: unlabeled unsupervised parsing F1 on WSJ-40 (test, punctuation removed)",
        "rows": {"right": 40.7, "DIORA": 60.6},
        "notes": {"DIORA": "trained on AllNLI; not part of this toolkit"},
    },
    "table4": {
        "source": f"{PALM}, Table 4: % left / right splits on the WSJ-40 test set",
        "gold": {"left": 6.5, "right": 52.7},
    },
    "table1": {
        "source": f"{PALM}, Table 1: PTB language-model perplexity",
        "rows": {},
        "missing": "the values of PaLM's Table 1 are not quoted: this report quotes only the tables checked "
                   "against the paper's text (Tables 3, 4 and 5)",
        "supervision": "PaLM-S further reduces the perplexity by 1.6-3.4% (relative)",
        "supervision_source": f"{PALM}, section 3, on its Tables 1 and 2",
    },
    "kim_onlstm": {
        "missing": "ON-LSTM's (Shen et al. 2019) and Kim et al.'s (2019) WSJ10 / full-test F1 and per-label recall are "
                   "not quoted in this report",
    },
    "lm": {
        "rows": {},
        "note": "test perplexities on Mikolov's PTB text (`ptb.test.txt`, his 10k vocabulary), quoted from the "
                "papers' LM tables.",
    },
    "all_lengths": {
        "rows": {},
        "baselines": {"right": {"value": 39.5, "source": "Kim, Dyer & Rush 2019, Table 1"}},
        "note": "WSJ test (section 23) sentence F1 over all lengths, Kim et al.'s convention",
    },
}


def _add(tables: dict, model: str, table: str, entry: dict) -> None:
    """Put model ``model``'s declared ``entry`` for ``table`` into ``tables`` as the report reads it."""
    if table == "table3":
        tables["table3"]["rows"][model] = entry["value"]
        if "note" in entry:
            tables["table3"]["notes"][model] = entry["note"]
    elif table == "table4":
        tables["table4"][model] = {"left": entry["left"], "right": entry["right"]}
    elif table == "table4_untrained":
        tables["table4"]["random"] = {**{k: v for k, v in entry.items() if k != "source"}, "model": model}
    else:  # "lm", "all_lengths": the row keeps its source
        tables[table]["rows"][model] = dict(entry)


def published_figures() -> dict:
    """The published figures: :data:`TABLES` with every registered model's declared figures in their tables."""
    from induce.models.registry import model_classes

    tables = copy.deepcopy(TABLES)
    for name, cls in model_classes().items():
        for table, entry in cls.published.items():
            _add(tables, name, table, entry)
    return tables


def __getattr__(name: str):
    # PUBLISHED is gathered from the registry when first read, not when the report's modules are imported.
    if name == "PUBLISHED":
        return published_figures()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
