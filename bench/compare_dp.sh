#!/usr/bin/env bash
# bench/compare_dp.sh: GPT-2 124M, global batch 8 x 256 tokens: one process x 2 threads versus
# `mpirun -np 2` x 1 thread with ZeRO 0, 1 and 3, side by side in one run. Prints tokens/s (median of
# the steps after the first), the ratio to one process, and the fraction of communication hidden
# behind compute (from --comm-report, last step).
#   bash bench/compare_dp.sh [build dir=build] [steps=4] [data=data/sotu/sotu_train.bin]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-4}; DATA=${3:-data/sotu/sotu_train.bin}
[ -f "$DATA" ] || { echo "compare_dp: $DATA missing: run tools/quickstart.sh or shardlm tokenize first" >&2; exit 1; }
OUT=$(mktemp -d)
COMMON="train --model gpt2 --data $DATA --data-order sequential --seq 256 --global-batch 8 --micro-batch 4 --steps $STEPS
        --optimizer adamw --lr 6e-4 --weight-decay 0.1 --grad-clip 1.0 --log-every 1000"
med() { /usr/bin/python3 -c 'import json,sys,statistics; r=[json.loads(l) for l in open(sys.argv[1])][1:]; print("%.1f" % statistics.median(x["tokens_per_s"] for x in r))' "$1"; }
"$BUILD/shardlm" $COMMON --threads 2 --metrics "$OUT/single.jsonl" > "$OUT/single.log"
single=$(med "$OUT/single.jsonl")
printf "%-26s %10s %8s %10s\n" config tok/s ratio hidden
printf "%-26s %10s %8s %10s\n" "1 process x 2 threads" "$single" 1.00 -
for z in 0 1 3; do
  mpirun --allow-run-as-root --oversubscribe -np 2 "$BUILD/shardlm" $COMMON --threads 1 --zero $z --comm-report \
      --metrics "$OUT/z$z.jsonl" > "$OUT/z$z.log" 2>&1
  t=$(med "$OUT/z$z.jsonl")
  hidden=$(grep -o "[0-9]* % hidden" "$OUT/z$z.log" | head -1 | cut -d' ' -f1)
  printf "%-26s %10s %8s %9s%%\n" "mpirun -np 2 x 1, ZeRO-$z" "$t" "$(/usr/bin/python3 -c "print('%.2f' % ($t/$single))")" "$hidden"
done
grep -h "communication\|sent" "$OUT"/z*.log | head -30
rm -rf "$OUT"
