#!/usr/bin/env bash
# bench/compare_layouts.sh: GPT-2 124M, global batch 16 x 256 tokens, side by side in one run:
# one process x 2 threads against 2 ranks x 1 thread as dp2, tp2, pp2 GPipe, 1F1B and the zero-bubble
# ZB-H1 and ZBV (8 micro-batches of 2 rows); each layout at its best micro-batch for that global batch.
# Prints tokens/s (median of the steps after the first), the ratio to one process, the pipeline
# bubble measured beside the theory, the bytes each rank sent in the last step (--comm-report), and
# the peak RSS and parameter bytes of each rank (--memory-report).
#   bash bench/compare_layouts.sh [build dir=build] [steps=4] [data=data/sotu/sotu_train.bin]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-4}; DATA=${3:-data/sotu/sotu_train.bin}
[ -f "$DATA" ] || { echo "compare_layouts: $DATA missing: run tools/quickstart.sh or shardlm tokenize first" >&2; exit 1; }
unset OPENBLAS_CORETYPE  # shardlm picks the SkylakeX kernels itself (a preset Haswell would halve its GEMMs)
OUT=$(mktemp -d)
COMMON="train --model gpt2 --data $DATA --data-order sequential --seq 256 --global-batch 16 --steps $STEPS
        --optimizer adamw --lr 6e-4 --weight-decay 0.1 --grad-clip 1.0 --log-every 1000 --memory-report --comm-report"
MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
med() { /usr/bin/python3 -c 'import json,sys,statistics; r=[json.loads(l) for l in open(sys.argv[1])][1:]; print("%.1f" % statistics.median(x["tokens_per_s"] for x in r))' "$1"; }
# name | launcher | flags
configs=(
  "1 process x 2 threads|||--threads 2 --micro-batch 4"
  "dp2 (ZeRO-0)|$MPI||--threads 1 --micro-batch 4"
  "tp2|$MPI||--threads 1 --micro-batch 4 --tp 2"
  "pp2 gpipe, m = 8|$MPI||--threads 1 --micro-batch 2 --pp 2 --schedule gpipe"
  "pp2 1f1b, m = 8|$MPI||--threads 1 --micro-batch 2 --pp 2 --schedule 1f1b"
  "pp2 zb-h1, m = 8|$MPI||--threads 1 --micro-batch 2 --pp 2 --schedule zb-h1"
  "pp2 zbv, m = 8|$MPI||--threads 1 --micro-batch 2 --pp 2 --schedule zbv"
)
# only some layouts: LAYOUTS="pp2" runs those whose name contains it
LAYOUTS=${LAYOUTS:-}
printf "%-24s %9s %6s %16s %14s %22s %20s\n" layout tok/s ratio "bubble (theory)" "sent MB/rank" "peak RSS MiB/rank" "params MiB/rank"
single=""
for i in "${!configs[@]}"; do
  IFS='|' read -r name launcher _ flags <<<"${configs[$i]}"
  [ -z "$LAYOUTS" ] || [ "$i" = 0 ] || [[ "$name" == *"$LAYOUTS"* ]] || continue
  $launcher "$BUILD/shardlm" $COMMON $flags --metrics "$OUT/$i.jsonl" > "$OUT/$i.log" 2>&1
  t=$(med "$OUT/$i.jsonl")
  [ -n "$single" ] || single=$t
  bubble=$( (grep -o "measured [0-9.]*, theory .* = [0-9.]*" "$OUT/$i.log" || true) | awk '{print $2 " (" $NF ")"}' | tr -d ,)
  sent=$(/usr/bin/python3 - "$OUT/$i.log" <<'PY'
import re, sys
per = {}
rank = None
for line in open(sys.argv[1]):
    m = re.match(r"communication, rank (\d+)", line)
    if m: rank = int(m.group(1)); per[rank] = 0
    m = re.search(r"sent\s+(\d+)\s+theory", line)
    if m and rank is not None: per[rank] += int(m.group(1))
print("/".join("%.0f" % (per[r] / 1e6) for r in sorted(per)) or "0")
PY
)
  rss=$(grep "peak RSS MiB" "$OUT/$i.log" | awk '{printf "%s%.0f", (NR>1?"/":""), $4}')
  params=$(grep "^  parameters " "$OUT/$i.log" | awk '{printf "%s%.0f", (NR>1?"/":""), $2}')
  printf "%-24s %9s %6s %16s %14s %22s %20s\n" "$name" "$t" "$(/usr/bin/python3 -c "print('%.2f' % ($t/$single))")" \
    "${bubble:--}" "$sent" "$rss" "$params"
done
rm -rf "$OUT"
