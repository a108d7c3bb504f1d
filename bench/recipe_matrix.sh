#!/usr/bin/env bash
# bench/recipe_matrix.sh: the quick start's recipe (configs/sotu.json) on every GEMM library, number format and
# seed of a list, each run whole (2000 steps, validated every 400 on the whole validation shard), then one table:
# each run's validation losses, its largest gradient norm, and the spread at every validation point.
#   bash bench/recipe_matrix.sh                    # seeds 1337 2 3; bf16 native, onednn; fp32 native
#   SEEDS="1337" RUNS="bf16:openblas fp32:onednn" bash bench/recipe_matrix.sh
#   BIN=/tmp/build-avx2/shardlm TAG=avx2 bash bench/recipe_matrix.sh   # another build (e.g. -march=znver3:
#       the AVX2 kernels a Zen 3 runs; with ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell in the environment)
# Runs already in OUT (default runs/recipe) are kept: delete a run's directory to train it again. Needs the
# tokenized corpus (bash tools/quickstart.sh, or shardlm tokenize as it does).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-./build/shardlm}"
OUT="${OUT:-runs/recipe}"
TAG="${TAG:-$(uname -m)}"
SEEDS="${SEEDS-1337 2 3}"   # (empty: train nothing, print the table of what OUT holds)
RUNS="${RUNS-bf16:native bf16:onednn fp32:native}"
mkdir -p "$OUT"
for seed in $SEEDS; do
  for r in $RUNS; do
    p="${r%%:*}" g="${r##*:}" dir="$OUT/${TAG}_s${seed}_${p}_${g}"
    [ -f "$dir/summary.json" ] && continue
    echo "recipe_matrix: $dir"
    "$BIN" train --config configs/sotu.json --val-every 400 --val-batches 0 --seed "$seed" --precision "$p" \
        --gemm "$g" --sample-tokens 0 --overwrite --out "$dir" > "$dir.log" 2>&1 || { echo "failed: $dir.log"; exit 1; }
  done
done
/usr/bin/python3 - "$OUT" <<'EOF'
import json, os, re, sys
out = sys.argv[1]
runs = {}
for d in sorted(os.listdir(out)):
    m = os.path.join(out, d, "metrics.jsonl")
    if not os.path.isfile(os.path.join(out, d, "summary.json")):  # still training, or failed
        continue
    rows = [json.loads(l) for l in open(m)]
    runs[d] = ({r["step"] + 1: r["val_loss"] for r in rows if r.get("val_loss") is not None},
               max(r["grad_norm"] for r in rows if r.get("grad_norm") is not None),
               json.load(open(os.path.join(out, d, "summary.json"))).get("train_time_s", 0))
steps = sorted({s for v, _, _ in runs.values() for s in v})
print("| run | " + " | ".join(f"val @{s}" for s in steps) + " | largest grad norm | training s |")
print("|---" * (len(steps) + 3) + "|")
for d, (v, g, t) in runs.items():
    print(f"| {d} | " + " | ".join(f"{v[s]:.4f}" if s in v else "" for s in steps) + f" | {g:.1f} | {t:.0f} |")
by_seed = {}
for d, (v, _, _) in runs.items():
    seed = re.search(r"_s(\d+)_", d)
    by_seed.setdefault(seed.group(1) if seed else "?", []).append(v)
for seed, vs in sorted(by_seed.items()):
    spread = [max(v[s] for v in vs if s in v) - min(v[s] for v in vs if s in v) for s in steps if all(s in v for v in vs)]
    print(f"seed {seed}: {len(vs)} runs, spread at each validation point " + ", ".join(f"{x:.3f}" for x in spread))
finals = [v[steps[-1]] for v, _, _ in runs.values() if steps and steps[-1] in v]
if finals:
    print(f"final validation loss over all runs: {min(finals):.4f} - {max(finals):.4f} (spread {max(finals) - min(finals):.3f})")
EOF
