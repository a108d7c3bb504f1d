#!/usr/bin/env bash
# bench/noisy_neighbour.sh: a GPT-2 124M training step (bench_train_step, B=4 T=64, 2 threads) on a
# quiet machine and with one busy process (a shell busy loop) competing for the 2 cores, alternating,
# REPS times each. Prints tokens/s per run and the median busy/quiet slowdown. Extra arguments are
# environment settings for the benchmark (e.g. GOMP_SPINCOUNT=0); hold the build lock around it:
#   flock /tmp/shardlm-build.lock bash bench/noisy_neighbour.sh [VAR=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE  # shardlm re-execs with SkylakeX kernels (docs/DESIGN.md)
REPS="${REPS:-3}"
run() { env "$@" ./build/bench_train_step --batch 4 --seq 64 --threads 2 --steps 6 --warmup 2 |
        sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p'; }
quiet=() busy=()
for r in $(seq "$REPS"); do
  quiet+=("$(run "$@")")
  sh -c 'while :; do :; done' &
  hog=$!
  busy+=("$(run "$@")")
  kill "$hog"; wait "$hog" 2>/dev/null || true
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
q=$(median "${quiet[@]}") b=$(median "${busy[@]}")
echo "env: ${*:-(default)}"
echo "quiet tokens/s: ${quiet[*]} (median $q)"
echo "busy  tokens/s: ${busy[*]} (median $b)"
awk -v q="$q" -v b="$b" 'BEGIN { printf "slowdown with one busy process: %.2fx\n", q / b }'
