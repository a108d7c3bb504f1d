#!/usr/bin/env bash
# bench/mem_ckpt_cost.sh: what a checkpoint kept in memory after every step (train --mem-ckpt-every 1, launch's
# default; train/memory_checkpoint.h) costs, measured side by side: the quick start's model (configs/sotu.json)
# on NP ranks under mpirun, STEPS steps with --mem-ckpt-every 0 and 1, alternated REPS times; prints the wall
# time of each run (start-up included, the same in both), the median extra milliseconds per step and the ratio.
#   bash bench/mem_ckpt_cost.sh                          # NP=4 STEPS=100 REPS=3, global batch 12 x 128 (the soak's)
#   FLAGS="--global-batch 48 --micro-batch 4" bash bench/mem_ckpt_cost.sh   # 4x the tokens per step
# Needs the corpus (bash tools/fetch_assets.sh, or the quick start). Hold the machine quiet while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
NP="${NP:-4}"
STEPS="${STEPS:-100}"
REPS="${REPS:-3}"
FLAGS="${FLAGS:---global-batch 12 --micro-batch 1}"
BIN=./build/shardlm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
run() {
  rm -rf "$tmp/run"
  local t0 t1
  t0=$(date +%s.%N)
  mpirun "${root[@]}" --oversubscribe -np "$NP" "$BIN" train --config configs/sotu.json $FLAGS --threads 1 --steps "$STEPS" \
      --val-every 0 --ckpt-every 0 --sample-tokens 0 --mem-ckpt-every "$1" --out "$tmp/run" >/dev/null
  t1=$(date +%s.%N)
  python3 -c "print('%.2f' % ($t1 - $t0))"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
off=() on=()
for r in $(seq "$REPS"); do
  off+=("$(run 0)")
  on+=("$(run 1)")
done
m0=$(median "${off[@]}") m1=$(median "${on[@]}")
echo "configs/sotu.json $FLAGS, $NP ranks, $STEPS steps, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "  --mem-ckpt-every 0: ${off[*]} s (median $m0)"
echo "  --mem-ckpt-every 1: ${on[*]} s (median $m1)"
python3 -c "print('  extra per step: %.1f ms; ratio %.3f' % (($m1 - $m0) / $STEPS * 1000, $m1 / $m0))"
