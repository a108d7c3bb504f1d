#!/usr/bin/env bash
# bench/noisy_neighbour.sh: a training step (bench_train_step, 2 threads) on a quiet machine and with
# one busy process (a shell busy loop) competing for the 2 cores, alternated REPS times; prints
# tokens/s and the median busy/quiet slowdown for three steps: the default model (configs/sotu.json's
# shape: 6 x 64, bf16, 16 x 128 tokens), and GPT-2 124M in fp32 at 4 x 256 and 4 x 64 tokens.
#   bash bench/noisy_neighbour.sh [VAR=value ...]      # environment settings for the benchmark
#   BASE=/path/to/old/bench_train_step bash bench/noisy_neighbour.sh
#       also runs an older build, alternated with this one (same noise), and prints the quiet ratio
#   STEPS="default gpt2-256" REPS=5 bash bench/noisy_neighbour.sh   # a subset, more repetitions
#   EXTRA="--thread-split kernel" bash bench/noisy_neighbour.sh      # flags for this build only
# Hold the build lock around it: flock /tmp/shardlm-build.lock bash bench/noisy_neighbour.sh
set -euo pipefail
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE  # shardlm re-execs with SkylakeX kernels (docs/DESIGN.md)
REPS="${REPS:-3}"
STEPS="${STEPS:-default gpt2-256 gpt2-64}"
BIN=./build/bench_train_step
declare -A ARGS=(
  [default]="--model small --n-layer 6 --n-embd 64 --batch 16 --seq 128 --precision bf16 --steps 20 --warmup 3"
  [gpt2-256]="--batch 4 --seq 256 --steps 4 --warmup 1"
  [gpt2-64]="--batch 4 --seq 64 --steps 6 --warmup 2"
)
tok() { env "${@:3}" "$1" $2 --threads 2 | sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p'; }
# the middle value; with an even count the mean of the two middle ones
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }
hog() { sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!; }  # (its output closed: $(hog) returns at once)
echo "env: ${*:-(default)}; this build: $BIN ${EXTRA:-}${BASE:+; base: $BASE}"
for s in $STEPS; do
  q=() b=() bq=() bb=()
  for r in $(seq "$REPS"); do
    q+=("$(tok "$BIN" "${ARGS[$s]} ${EXTRA:-}" "$@")")
    [ -n "${BASE:-}" ] && bq+=("$(tok "$BASE" "${ARGS[$s]}" "$@")")
    h=$(hog)
    b+=("$(tok "$BIN" "${ARGS[$s]} ${EXTRA:-}" "$@")")
    [ -n "${BASE:-}" ] && bb+=("$(tok "$BASE" "${ARGS[$s]}" "$@")")
    kill "$h"; wait "$h" 2>/dev/null || true
  done
  mq=$(median "${q[@]}") mb=$(median "${b[@]}")
  echo "== $s (${ARGS[$s]})"
  echo "   quiet tokens/s: ${q[*]} (median $mq)"
  echo "   busy  tokens/s: ${b[*]} (median $mb)"
  awk -v q="$mq" -v b="$mb" 'BEGIN { printf "   slowdown with one busy process: %.2fx\n", q / b }'
  if [ -n "${BASE:-}" ]; then
    bmq=$(median "${bq[@]}") bmb=$(median "${bb[@]}")
    echo "   base quiet tokens/s: ${bq[*]} (median $bmq)"
    echo "   base busy  tokens/s: ${bb[*]} (median $bmb)"
    awk -v q="$bmq" -v b="$bmb" -v nq="$mq" -v nb="$mb" 'BEGIN {
      printf "   base slowdown: %.2fx; this build / base: quiet %.2fx, busy %.2fx\n", q / b, nq / q, nb / b }'
  fi
done
