#!/bin/bash
# The cpu profile's grammars (induce/configs/cpu/<model>.yaml) trained with a 20-word and a 40-word cap, all runs at
# once on one GPU; every STAGE optimiser steps each run's last checkpoint is scored by `induce eval` on the corpus's
# valid split (WSJ 22, every length, the default convention). RUNS lists the runs as NAME:MODEL:CAP:SEED (default:
# TN-PCFG at both caps, seeds 1111 and 7). For a one-GPU machine
# (it ran on an H200: bench/results/reproduction.md): the prepared WSJ corpus in corpora/ptb-wsj and, where pydantic or nltk are
# not installed, their wheels in .whl/ (installed into /tmp/site), e.g. `BUDGET=480 bash bench/tnpcfg_caps_gpu.sh`.
#
# Writes $OUT/results.jsonl (one line per run and stage: cap, seed, steps, sentence / corpus F1, split shares),
# $OUT/log.txt and one log per run. BUDGET: seconds for everything (default 470); STAGE: steps between scorings
# (default 2500); DEVICE: where they train (default cuda). Before training, tests/test_inside_lowrank_triton.py runs
# on the GPU (KERNEL_TEST=0 skips it); if it fails the runs use --kernels torch.
set -u
T0=$(date +%s)
DEADLINE=$((T0 + ${BUDGET:-470}))
C=${CORPUS:-corpora/ptb-wsj}
OUT=${OUT:-/tmp/tnpcfg-caps}; mkdir -p "$OUT"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
LOG=$OUT/log.txt; RES=$OUT/results.jsonl; : > "$RES"
{ nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"; } >> "$LOG" 2>&1
KER=auto
[ "${KERNEL_TEST:-1}" = 0 ] || timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_inside_lowrank_triton.py >> "$LOG" 2>&1 \
  || { echo "the Triton tier's test failed or timed out: --kernels torch" >> "$LOG"; KER=torch; }
echo "kernels $KER after $(( $(date +%s) - T0 )) s" >> "$LOG"

pipe() {  # name model cap seed
  local name=$1 model=$2 cap=$3 seed=$4 run=/tmp/tnpcfg-caps-runs/$1 steps=0 stage=${STAGE:-2500} budget done_steps
  while [ $(( $(date +%s) + 60 )) -lt "$DEADLINE" ]; do
    steps=$((steps + stage))
    budget=$(( DEADLINE - $(date +%s) - 45 ))
    if [ "$steps" -eq "$stage" ]; then
      python3 -m induce train --model "$model" --config "induce/configs/cpu/$model.yaml" --corpus "$C" --out "$run" \
        --device "${DEVICE:-cuda}" --kernels $KER --seed "$seed" --max-steps $steps --time-budget ${budget}s --threads 2 \
        --no-progress data.max_length="$cap" train.eval_every=1000000 train.dev_f1=false train.cuda_graphs=false train.epochs=100 \
        >> "$OUT/$name.log" 2>&1 || break
    else
      python3 -m induce train --resume "$run" --max-steps $steps --time-budget ${budget}s --no-progress \
        >> "$OUT/$name.log" 2>&1 || break
    fi
    done_steps=$(python3 -c "import json; print(json.load(open('$run/last.json'))['trainer']['steps_total'])")
    python3 -m induce eval --checkpoint "$run/last" --corpus "$C" --split valid --json --device "${DEVICE:-cuda}" --threads 2 \
      --no-progress > "/tmp/$name.eval.json" 2>> "$OUT/$name.log"
    python3 - "$name" "$model" "$cap" "$seed" "$done_steps" "$(( $(date +%s) - T0 ))" >> "$RES" <<'PY'
import json, sys
name, model, cap, seed, steps, elapsed = sys.argv[1:]
try:
    ev = json.load(open(f"/tmp/{name}.eval.json"))
    ev = {k: ev.get(k) for k in ("sentence_f1", "corpus_f1", "right_split_pct", "left_split_pct", "n_sentences")}
except (OSError, ValueError) as err:
    ev = {"error": str(err)}
print(json.dumps({"run": name, "model": model, "cap": int(cap), "seed": int(seed), "steps": steps, "elapsed_s": int(elapsed), **ev}))
PY
  done
}
for r in ${RUNS:-cap20-seed1111:tnpcfg:20:1111 cap40-seed1111:tnpcfg:40:1111 cap20-seed7:tnpcfg:20:7 cap40-seed7:tnpcfg:40:7}; do
  IFS=: read -r name model cap seed <<< "$r"
  pipe "$name" "$model" "$cap" "$seed" &
done
wait
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv >> "$LOG" 2>&1
echo "done after $(( $(date +%s) - T0 )) s" >> "$LOG"
