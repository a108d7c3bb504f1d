#!/usr/bin/env bash
# bench/compare_wait.sh: how a rank waits for its peers (issue 21, item 7), side by side in one run.
# Each layout runs twice, SHARDLM_COMM_WAIT=yield (poll with sched_yield between polls: the waiting
# rank keeps its core, as the caller's thread did before) and =sleep (the default: 32 polls, then
# sleeps with back-off), and prints tokens/s (median of the steps after the first) and the ratio
# sleep / yield. GPT-2 small shapes (12 heads, 768 wide) with N_LAYER layers, global batch GB x SEQ.
#   bash bench/compare_wait.sh [build dir=build] [steps=5] [data=data/sotu/sotu_train.bin]
# Environment: N_LAYER (default 4), SEQ (256), GB (16).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-5}; DATA=${3:-data/sotu/sotu_train.bin}
[ -f "$DATA" ] || { echo "compare_wait: $DATA missing: run tools/quickstart.sh or shardlm tokenize first" >&2; exit 1; }
unset OPENBLAS_CORETYPE
OUT=$(mktemp -d)
COMMON="train --model gpt2 --n-layer ${N_LAYER:-4} --data $DATA --data-order sequential --seq ${SEQ:-256} --global-batch ${GB:-16}
        --steps $STEPS --optimizer adamw --lr 6e-4 --log-every 1000 --threads 1"
MPI="mpirun --allow-run-as-root --oversubscribe -x SHARDLM_COMM_WAIT"
med() { /usr/bin/python3 -c 'import json,sys,statistics; r=[json.loads(l) for l in open(sys.argv[1])][1:]; print("%.1f" % statistics.median(x["tokens_per_s"] for x in r))' "$1"; }
# name | ranks | flags
configs=(
  "dp2 (ZeRO-0)|2|--micro-batch 4"
  "tp2|2|--micro-batch 4 --tp 2"
  "pp2 1f1b, m = 8|2|--micro-batch 2 --pp 2 --schedule 1f1b"
  "dp4 on 2 cores|4|--micro-batch 4"
  "tp2 x pp2 on 2 cores|4|--micro-batch 2 --tp 2 --pp 2 --schedule 1f1b"
  "pp4 1f1b on 2 cores|4|--micro-batch 2 --pp 4 --schedule 1f1b"
)
printf "%-24s %12s %12s %8s\n" layout "yield tok/s" "sleep tok/s" ratio
for c in "${configs[@]}"; do
  IFS='|' read -r name np flags <<<"$c"
  for mode in yield sleep; do
    SHARDLM_COMM_WAIT=$mode $MPI -np "$np" "$BUILD/shardlm" $COMMON $flags --metrics "$OUT/$mode.jsonl" > "$OUT/$mode.log" 2>&1 \
      || { cat "$OUT/$mode.log"; exit 1; }
  done
  y=$(med "$OUT/yield.jsonl"); s=$(med "$OUT/sleep.jsonl")
  printf "%-24s %12s %12s %8s\n" "$name" "$y" "$s" "$(/usr/bin/python3 -c "print('%.2f' % ($s/$y))")"
done
rm -rf "$OUT"
