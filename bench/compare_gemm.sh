#!/usr/bin/env bash
# bench/compare_gemm.sh: --gemm openblas | onednn | auto on a GPT-2 124M training step (issue 25 item 3),
# side by side in one run: each configuration runs ROUNDS times in turn with the three settings (the
# machine's noise spread over all three), tokens/s is the median of each run's steps after the warm-up,
# and the ratios are to openblas. auto's cache starts empty (its first run times every shape; the
# timing itself is in the warm-up step) and is kept between rounds, as on a user's machine.
#   bash bench/compare_gemm.sh [build dir=build] [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; ROUNDS=${2:-3}
unset OPENBLAS_CORETYPE
export SHARDLM_CACHE_DIR=$(mktemp -d)
configs=("fp32 B=4 T=64|--batch 4 --seq 64 --precision fp32"
         "bf16 B=4 T=256|--batch 4 --seq 256 --precision bf16")
lscpu | grep 'Model name' | sed 's/  */ /g'
printf "%-16s %10s %10s %10s %9s %9s\n" config openblas onednn auto "onednn/ob" "auto/ob"
for c in "${configs[@]}"; do
  IFS='|' read -r name flags <<<"$c"
  declare -A runs=([openblas]="" [onednn]="" [auto]="")
  for r in $(seq "$ROUNDS"); do
    for g in openblas onednn auto; do
      tps=$("$BUILD/bench_train_step" $flags --steps 4 --warmup 1 --gemm "$g" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
      runs[$g]="${runs[$g]} $tps"
    done
  done
  med() { /usr/bin/python3 -c 'import statistics,sys; print("%.1f" % statistics.median(float(x) for x in sys.argv[1:]))' $1; }
  ob=$(med "${runs[openblas]}"); dn=$(med "${runs[onednn]}"); au=$(med "${runs[auto]}")
  printf "%-16s %10s %10s %10s %9.2f %9.2f\n" "$name" "$ob" "$dn" "$au" "$(/usr/bin/python3 -c "print($dn/$ob)")" "$(/usr/bin/python3 -c "print($au/$ob)")"
done
echo "auto's choices: $(ls "$SHARDLM_CACHE_DIR"/gemm-*.json)"
/usr/bin/python3 -c 'import json,sys,collections; d=json.load(open(sys.argv[1])); print(collections.Counter(v["choice"] for v in d["shapes"].values()))' "$SHARDLM_CACHE_DIR"/gemm-*.json
rm -rf "$SHARDLM_CACHE_DIR"
