#!/usr/bin/env bash
# bench/convergence.sh: the default run (configs/sotu.json, whole length) in each number format, one
# after the other on a quiet machine: fp32, fp32 with bf16-rounded matmul operands
# (--precision fp32-bf16-products), and mixed precision --precision bf16 / fp16 (fp32 master weights).
# Prints the wall time, the final training and validation loss of each and the validation loss's
# distance from fp32, and draws every training and validation curve into one SVG
# (bench/convergence.svg, by bench/plot_curves.py). Then the speeds side by side: SPEED_STEPS steps
# of each mode, alternated SPEED_ROUNDS times, median step time of the best round (these machines are
# noisy, and the long runs above are minutes apart).
#   bash bench/convergence.sh [build dir=build] [threads=2]     (hold /tmp/shardlm-build.lock)
# Environment: MODES (default "fp32 mm-bf16 bf16 fp16"), OUT (runs/convergence), SKIP_RUNS=1 (only
# the table, the plot and the speeds, from runs already made), SPEED_STEPS (150), SPEED_ROUNDS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; THREADS=${2:-2}
MODES=${MODES:-"fp32 mm-bf16 bf16 fp16"}
OUT=${OUT:-runs/convergence}
unset OPENBLAS_CORETYPE
[ -f data/sotu/sotu_train.bin ] || { echo "convergence: data/sotu missing: run tools/quickstart.sh first"; exit 2; }
mkdir -p "$OUT"
mode_flags() {
  case $1 in
    fp32) flags=(--precision fp32) ;;
    mm-bf16) flags=(--precision fp32-bf16-products) ;;
    bf16|fp16) flags=(--precision "$1") ;;
    *) echo "convergence: unknown mode '$1' (fp32, mm-bf16, bf16, fp16)"; exit 2 ;;
  esac
}
for m in $MODES; do
  mode_flags "$m"
  [ "${SKIP_RUNS:-0}" = 1 ] && continue
  echo "convergence: $m: $BUILD/shardlm train --config configs/sotu.json --threads $THREADS ${flags[*]}"
  start=$(date +%s%N)
  "$BUILD/shardlm" train --config configs/sotu.json --threads "$THREADS" "${flags[@]}" --sample-tokens 0 \
    --out "$OUT/$m" --overwrite > "$OUT/$m.log" 2>&1 || { echo "convergence: $m failed: see $OUT/$m.log"; exit 1; }
  echo "$(( ($(date +%s%N) - start) / 1000000 ))" > "$OUT/$m.wall_ms"
done
/usr/bin/python3 - "$OUT" $MODES <<'EOF'
import json, sys
out, modes = sys.argv[1], sys.argv[2:]
ref = None
print(f"{'mode':8} {'wall s':>8} {'train s':>8} {'final loss':>11} {'final val':>10} {'val vs fp32':>12}")
for m in modes:
    s = json.load(open(f"{out}/{m}/summary.json"))
    wall = float(open(f"{out}/{m}.wall_ms").read()) / 1000
    v = s.get("final_val_loss")
    if m == "fp32": ref = v
    rel = f"{(v - ref) / ref * 100:+.2f} %" if ref and v else "-"
    print(f"{m:8} {wall:8.1f} {s['train_time_s']:8.1f} {s['final_loss']:11.4f} {v:10.4f} {rel:>12}")
EOF
/usr/bin/python3 bench/plot_curves.py --out bench/convergence.svg --title "configs/sotu.json: loss by number format" \
  $(for m in $MODES; do echo "$m=$OUT/$m/metrics.jsonl"; done)
echo "convergence: curves in bench/convergence.svg"

SPEED_STEPS=${SPEED_STEPS:-150}; SPEED_ROUNDS=${SPEED_ROUNDS:-2}
for r in $(seq "$SPEED_ROUNDS"); do
  for m in $MODES; do
    mode_flags "$m"
    "$BUILD/shardlm" train --config configs/sotu.json --threads "$THREADS" "${flags[@]}" --sample-tokens 0 \
      --steps "$SPEED_STEPS" --val-every 0 --ckpt-every 0 --out "$OUT/speed-$m-$r" --overwrite > /dev/null 2>&1 ||
      { echo "convergence: the speed run of $m failed"; exit 1; }
  done
done
/usr/bin/python3 - "$OUT" "$SPEED_ROUNDS" $MODES <<'EOF'
import json, statistics, sys
out, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
best = {}
for m in modes:
    for r in range(1, rounds + 1):
        rows = [json.loads(l) for l in open(f"{out}/speed-{m}-{r}/metrics.jsonl") if l.strip()]
        ms = statistics.median(x["step_ms"] for x in rows[10:])
        best[m] = min(best.get(m, 1e30), ms)
print(f"side by side, {len(rows)} steps x {rounds} rounds alternated, median step time of the best round:")
for m in modes:
    print(f"  {m:8} {best[m]:7.1f} ms/step   {best['fp32'] / best[m] if 'fp32' in best else 0:.2f}x fp32")
EOF
