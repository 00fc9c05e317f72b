#!/usr/bin/env bash
# Baseline F1 and gold branching statistics on a gold treebank (default: WSJ dev, section 22).
# Usage: bash bench/baselines.sh [GOLD_FILE_OR_FOLDER]   (prints one JSON line per run)
set -euo pipefail
gold="${1:-${INDUCE_DATA:-data}/wsj/22.mrg}"
for length in "" --wsj10 --wsj40; do
  for baseline in right left balanced; do
    python -m induce eval --gold "$gold" --baseline "$baseline" $length --json |
      python -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'baseline': '$baseline', 'filter': '${length:-all}', 'n': d['n_sentences'], 'sentence_f1': round(d['sentence_f1'], 1), 'corpus_f1': round(d['corpus_f1'], 1), 'gold_left': round(d['gold_left_split_pct'], 1), 'gold_right': round(d['gold_right_split_pct'], 1), 'gold_other_binary': round(d['gold_other_binary_split_pct'], 1), 'gold_nary': round(d['gold_nary_split_pct'], 1)}))"
  done
  for seed in 0 1 2 3 4; do
    python -m induce eval --gold "$gold" --baseline random --seed "$seed" $length --json |
      python -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'baseline': 'random', 'seed': $seed, 'filter': '${length:-all}', 'sentence_f1': round(d['sentence_f1'], 2), 'corpus_f1': round(d['corpus_f1'], 2)}))"
  done
done
