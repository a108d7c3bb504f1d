#!/usr/bin/env bash
# bench/health_cost.sh: what training-health telemetry (train/health.h) costs a step, measured side by side:
# the quick start's model (configs/sotu.json: 6 x 64, bf16, 16 x 128 tokens) trained STEPS steps with
# --health-every 0 (off: each unit's gradient norm still rides in the norm's own pass), 10 (the default) and 1
# (every step: the worst case), alternated REPS times; prints the mean step time of the steps after the first
# 10 (the GEMM tuner's) for each, their medians over the repetitions and the ratio to off.
#   bash bench/health_cost.sh                 # REPS=3 STEPS=80
#   BASE=/path/to/older/shardlm bash bench/health_cost.sh   # also a build without the telemetry, alternated
#   MODEL="--model gpt2 --seq 256 --global-batch 4 --micro-batch 4 --precision fp32" STEPS=20 bash bench/health_cost.sh
# Needs the corpus (bash tools/fetch_assets.sh, or the quick start). Hold the machine quiet while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-3}"
STEPS="${STEPS:-80}"
MODEL="${MODEL:-}"
BIN=./build/shardlm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the mean step_ms of the steps after the first 10
run() {
  local bin="$BIN" flags=(--health-every "$1")
  if [ "$1" = base ]; then bin="$BASE"; flags=(); fi
  "$bin" train --config configs/sotu.json $MODEL --steps "$STEPS" --val-every 0 --ckpt-every 0 --sample-tokens 0 \
      --threads 2 "${flags[@]}" --metrics "$tmp/m.jsonl" >/dev/null
  python3 -c "
import json,sys
rows=[json.loads(l) for l in open('$tmp/m.jsonl')][10:]
print('%.3f' % (sum(r['step_ms'] for r in rows)/len(rows)))"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
declare -A ms
kinds=(${BASE:+base} 0 10 1)
for r in $(seq "$REPS"); do
  for every in "${kinds[@]}"; do ms[$every]="${ms[$every]:-} $(run "$every")"; done
done
ref=0; [ -n "${BASE:-}" ] && ref=base
off=$(median ${ms[$ref]})
echo "model: configs/sotu.json ${MODEL:-(as is)}, $STEPS steps, 2 threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
for every in "${kinds[@]}"; do
  m=$(median ${ms[$every]})
  printf '  %-18s step_ms %-28s median %8.3f  ratio %.4f\n' "$([ "$every" = base ] && echo "base build" || echo "--health-every $every")" \
      "${ms[$every]}" "$m" "$(python3 -c "print($m/$off)")"
done
echo "(ratio: to the base build when BASE is given, else to --health-every 0)"
