#!/usr/bin/env bash
# bench/cp_memory.sh: a long sequence split over context-parallel ranks. A small GPT (4 blocks, 256 wide,
# 4 heads of 64, GPT-2's vocabulary, n_ctx = T) trains --steps steps of one sequence of T tokens at cp 1, 2
# and 4 (ranks oversubscribed on this machine's cores, one thread each); for each rank it prints the peak
# RSS and the activations the model allocated (--memory-report), one block's activations beside the memory
# report's formula (Korthikanti et al.'s count at T / cp rows), and the loss of the last step (every cp
# trains the same model: the losses agree to fp32 rounding).
#   bash bench/cp_memory.sh [build dir=build] [T=32768] [steps=2] [data=data/sotu/sotu_train.bin] [cps="1 2 4"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; T=${2:-32768}; STEPS=${3:-2}; DATA=${4:-data/sotu/sotu_train.bin}; CPS=${5:-"1 2 4"}
[ -f "$DATA" ] || { echo "cp_memory: $DATA missing: run tools/quickstart.sh or shardlm tokenize first" >&2; exit 1; }
unset OPENBLAS_CORETYPE  # shardlm picks the SkylakeX kernels itself (a preset Haswell would halve its GEMMs)
OUT=$(mktemp -d)
COMMON="train --model gpt2 --n-layer 4 --n-embd 256 --n-head 4 --n-ctx $T --data $DATA --data-order sequential
        --seq $T --global-batch 1 --micro-batch 1 --steps $STEPS --threads 1 --optimizer adamw --lr 3e-4
        --memory-report --log-every 1"
printf "%-4s %-5s %14s %16s %26s %12s %10s\n" cp rank "peak RSS MiB" "activations MiB" "block acts bytes (formula)" "last loss" "step s"
for cp in $CPS; do
  mpirun --allow-run-as-root --oversubscribe -np "$cp" "$BUILD/shardlm" $COMMON --cp "$cp" --metrics "$OUT/$cp.jsonl" > "$OUT/$cp.log" 2>&1 ||
    { echo "cp_memory: cp $cp failed (log: $OUT/$cp.log)" >&2; tail -5 "$OUT/$cp.log" >&2; exit 1; }
  /usr/bin/python3 - "$OUT/$cp.log" "$OUT/$cp.jsonl" "$cp" <<'PY'
import json, re, sys
log, metrics, cp = open(sys.argv[1]).read(), [json.loads(l) for l in open(sys.argv[2])], sys.argv[3]
reports = re.split(r"memory report, rank ", log)[1:]
for rep in sorted(reports, key=lambda r: int(r.split()[0])):
    rank = rep.split()[0]
    rss = re.search(r"peak RSS MiB\s+([\d.]+)", rep).group(1)
    act = re.search(r"activations MiB\s+([\d.]+)", rep).group(1)
    blk = re.search(r"block activations\s+(\d+)\s+(\d+)", rep)
    print("%-4s %-5s %14s %16s %26s %12.6f %10.1f" % (cp, rank, rss, act, "%s (%s)" % (blk.group(1), blk.group(2)),
          metrics[-1]["loss"], metrics[-1]["step_ms"] / 1e3))
PY
done
echo "logs: $OUT"
