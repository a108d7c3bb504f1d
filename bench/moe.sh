#!/usr/bin/env bash
# bench/moe.sh: the mixture of experts on the default corpus, in two measurements.
#   quality: the quick start's recipe (configs/sotu.json: 6 x 64, 2000 steps of 16 x 128 tokens, bf16) on the
#            dense model and on moe-small (the same shape with 8 experts of width 2C, top 2: the dense 4C MLP's
#            active FLOPs per token), one seed each of `seeds`; prints the final validation losses and the
#            training times.
#   speed:   moe-small at dp 2 (two ranks, one thread each) with the experts replicated (--ep 1) and split
#            (--ep 2), `steps` steps of 16 x 128 tokens in fp32; prints tokens/s (the median of the last half's
#            steps) and the all-to-all bytes per step (--comm-report's ep row, beside its formula).
#   bash bench/moe.sh [build dir=build] [what="quality speed"] [seeds="1337"] [steps=60]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; WHAT=${2:-"quality speed"}; SEEDS=${3:-1337}; STEPS=${4:-60}
DATA=data/sotu/sotu_train.bin
[ -f "$DATA" ] || { echo "moe: $DATA missing: run tools/quickstart.sh first" >&2; exit 1; }
OUT=$(mktemp -d)
final_val() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['final_val_loss'])" "$1/summary.json"; }
train_s() { /usr/bin/python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['train_time_s'],1))" "$1/summary.json"; }
if [[ " $WHAT " == *" quality "* ]]; then
  printf "%-10s %-6s %16s %10s\n" model seed "final val loss" "train s"
  for seed in $SEEDS; do
    for model in small moe-small; do
      "$BUILD/shardlm" train --config configs/sotu.json --model "$model" --seed "$seed" --sample-tokens 0 \
        --out "$OUT/$model-$seed" > "$OUT/$model-$seed.log" 2>&1 ||
        { echo "moe: $model failed (log: $OUT/$model-$seed.log)" >&2; tail -5 "$OUT/$model-$seed.log" >&2; exit 1; }
      printf "%-10s %-6s %16s %10s\n" "$model" "$seed" "$(final_val "$OUT/$model-$seed")" "$(train_s "$OUT/$model-$seed")"
    done
  done
fi
if [[ " $WHAT " == *" speed "* ]]; then
  printf "%-6s %12s %22s %22s\n" ep "tokens/s" "all-to-all B/step" "formula B/step"
  for ep in 1 2; do
    mpirun --allow-run-as-root --oversubscribe -np 2 "$BUILD/shardlm" train --model moe-small --data "$DATA" \
      --seq 128 --global-batch 16 --micro-batch 8 --steps "$STEPS" --threads 1 --dp 2 --ep "$ep" --precision fp32 \
      --val-every 0 --sample-tokens 0 --comm-report --log-every 1 --out "$OUT/ep$ep" > "$OUT/ep$ep.log" 2>&1 ||
      { echo "moe: ep $ep failed (log: $OUT/ep$ep.log)" >&2; tail -5 "$OUT/ep$ep.log" >&2; exit 1; }
    /usr/bin/python3 - "$OUT/ep$ep" "$OUT/ep$ep.log" "$ep" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
tps = statistics.median(r["tokens_per_s"] for r in rows[len(rows) // 2:])
m = re.search(r"\n  ep\s+all_to_all\s+calls\s+\d+\s+sent\s+(\d+)\s+theory\s+(\d+)", open(sys.argv[2]).read())
sent, theory = (m.group(1), m.group(2)) if m else ("0", "0")
print(f"{sys.argv[3]:<6} {tps:12.0f} {sent:>22} {theory:>22}")
PY
  done
fi
rm -rf "$OUT"
