#!/usr/bin/env bash
# bench/compare_ckpt.sh: what a checkpoint costs a step (issue 21, item 3), side by side in one run.
# The default model (configs/sotu.json: 3.5M parameters, 42 MB of parameters + Adam state) trains
# STEPS steps three times: without checkpoints, with a synchronous checkpoint every EVERY steps, and
# with --async-ckpt at the same steps. Printed: wall seconds per step of each (the run's training
# time / steps, checkpoints included) and the cost per checkpoint over the run without.
#   bash bench/compare_ckpt.sh [build dir=build] [steps=200] [every=5]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-200}; EVERY=${3:-5}
[ -f data/sotu/sotu_train.bin ] || { echo "compare_ckpt: data/sotu/sotu_train.bin missing: run tools/quickstart.sh first" >&2; exit 1; }
OUT=$(mktemp -d)
run() {  # name, flags -> seconds of the whole run
  local t0 t1
  t0=$(date +%s.%N)
  "$BUILD/shardlm" train --config configs/sotu.json --steps "$STEPS" --val-every 0 --sample-tokens 0 --threads 2 \
      --keep-ckpts 2 --out "$OUT/$1" "${@:2}" > "$OUT/$1.log" 2>&1 || { cat "$OUT/$1.log"; exit 1; }
  t1=$(date +%s.%N)
  /usr/bin/python3 -c "print('%.3f' % ($t1 - $t0))"
}
none=$(run none --ckpt-every 0)
sync=$(run sync --ckpt-every "$EVERY")
async=$(run async --ckpt-every "$EVERY" --async-ckpt)
size=$(du -sb "$OUT/sync/$(ls "$OUT/sync" | grep ckpt_ | tail -1)" | cut -f1)
/usr/bin/python3 - "$STEPS" "$EVERY" "$none" "$sync" "$async" "$size" <<'PY'
import sys
steps, every = int(sys.argv[1]), int(sys.argv[2])
none, sync, asyn, size = map(float, sys.argv[3:7])
n = steps // every  # checkpoints written (the last one is synchronous in both)
print(f"{steps} steps, a checkpoint of {size / 1e6:.0f} MB every {every} steps ({n} checkpoints)")
print(f"{'':14s} {'s/step':>8s} {'vs none':>8s} {'ms per checkpoint':>18s}")
for name, t in (("none", none), ("synchronous", sync), ("--async-ckpt", asyn)):
    print(f"{name:14s} {t / steps:8.4f} {t / none:8.3f} {(t - none) / n * 1e3 if name != 'none' else 0:18.1f}")
PY
rm -rf "$OUT"
