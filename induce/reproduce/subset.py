"""The subset corpus of a profile: the first N training sentences and the first M dev sentences of
a prepared corpus, with its vocabulary (:func:`subset_corpus`)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional, Union

from induce.errors import InduceError


def _read_lines(path: Path, limit: Optional[int]) -> list[str]:
    lines = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if limit is not None and len(lines) >= limit:
                break
            lines.append(line.rstrip("\n"))
    return lines


def subset_corpus(
    source: Union[str, Path], corpora_dir: Union[str, Path], train_sentences: Optional[int],
    monitor_sentences: Optional[int],
) -> Path:
    """A prepared corpus with the first ``train_sentences`` training sentences and the first
    ``monitor_sentences`` validation sentences of ``source`` (all of a split when None), the same
    vocabulary, and no test split. Reused while ``source`` and the sizes are unchanged."""
    import hashlib

    from induce.data.corpus import META_FILE, VOCAB_FILE, PreparedCorpus

    corpus = PreparedCorpus(source)
    parts = [corpus.name]
    if train_sentences is not None:
        parts.append(f"train{train_sentences}")
    if monitor_sentences is not None:
        parts.append(f"valid{monitor_sentences}")
    name = "-".join(parts)
    target = Path(corpora_dir) / name
    fingerprint = hashlib.sha256(json.dumps(
        [corpus.meta.get("fingerprint"), train_sentences, monitor_sentences, 1], sort_keys=True
    ).encode()).hexdigest()
    if (target / META_FILE).is_file():
        try:
            if json.loads((target / META_FILE).read_text(encoding="utf-8")).get("fingerprint") == fingerprint:
                return target
        except (OSError, json.JSONDecodeError):
            pass
    if "valid" not in corpus.splits:
        raise InduceError(f"{source}: the corpus has no valid split")
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    meta = json.loads(json.dumps(corpus.meta))
    meta["splits"] = {}
    for split, limit in (("train", train_sentences), ("valid", monitor_sentences)):
        lm_lines = None
        for suffix in (".txt", ".orig.txt", ".gold.txt", ".nopunct.txt"):
            path = corpus.path / f"{split}{suffix}"
            if path.is_file():
                lines = _read_lines(path, limit)
                (tmp / path.name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
                if suffix == ".txt":
                    lm_lines = lines
        tokens = [token for line in lm_lines or [] for token in line.split()]
        meta["splits"][split] = {
            "lm_sentences": len(lm_lines or []), "lm_tokens": len(tokens), "lm_unk_tokens": tokens.count("<unk>"),
            "trees": len(lm_lines or []) if corpus.has_trees else None,
        }
    shutil.copyfile(corpus.path / VOCAB_FILE, tmp / VOCAB_FILE)
    meta.update(name=name, fingerprint=fingerprint, subset={
        "of": str(corpus.path), "of_fingerprint": corpus.meta.get("fingerprint"),
        "train_sentences": train_sentences, "valid_sentences": monitor_sentences,
        "note": "first N sentences of each split, the source's vocabulary; no test split",
    })
    (tmp / META_FILE).write_text(json.dumps(meta, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target

