#!/usr/bin/env bash
# bench/llama_optimizers.sh: issue 22's experiment on the default corpus (bench/sotu_experiments.json: the
# default run's data, batch, schedule and seed as this experiment recorded them, configs/sotu.json's until
# 2026-11-28; cut to STEPS steps so a run takes minutes here).
#   arch:  the default GPT (6 x 64, 4 heads: 3.5 M parameters) against a LLaMA-style model of the same
#          size and budget: RMSNorm, rotary embeddings, SwiGLU (ffn 200 so the blocks hold what
#          GPT-2's do), no biases, 2 key/value heads, the head tied to the embedding (untied, the
#          3.2 M-parameter embedding would double the model).
#   optim: AdamW against every other optimiser on the default GPT (OPTIMIZERS; each with its own
#          learning rate, LR_<name>, since they do not share a scale).
#   sophia: Sophia-G's claim (Liu et al. 2023: the loss of AdamW in half the steps): AdamW and Sophia
#          (SOPHIA_LRS, rho SOPHIA_RHO) each at STEPS and STEPS/2 steps, their own cosine schedules,
#          validated every STEPS/16 steps; bench/sophia.svg.
# Prints each run's parameter count, final training loss, final validation loss (the last five
# speeches), optimiser state bytes (--memory-report) and step time; draws the curves
# (bench/llama_vs_gpt.svg, bench/optimizers.svg).
#   bash bench/llama_optimizers.sh [build=build] [arch|optim|sophia|all=all]    (hold /tmp/shardlm-build.lock)
# Environment: STEPS (400), THREADS (2), OUT (runs/llama_optimizers), PRECISION (bf16 where the CPU
# has AVX512_BF16, else fp32), OPTIMIZERS ("adamw adam sgd momentum adagrad" + what the build has).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; WHAT=${2:-all}
STEPS=${STEPS:-400}; THREADS=${THREADS:-2}; OUT=${OUT:-runs/llama_optimizers}
if [ -z "${PRECISION:-}" ]; then grep -qw avx512_bf16 /proc/cpuinfo && PRECISION=bf16 || PRECISION=fp32; fi
unset OPENBLAS_CORETYPE
[ -f data/sotu/sotu_train.bin ] || { echo "llama_optimizers: data/sotu missing: run tools/quickstart.sh first"; exit 2; }
mkdir -p "$OUT"
base=(--config bench/sotu_experiments.json --ckpt-every 0 --sample-tokens 0 --threads "$THREADS" --precision "$PRECISION"
      --memory-report)
common=("${base[@]}" --steps "$STEPS" --warmup $((STEPS / 50)) --val-every $((STEPS / 4)))
run() {  # name, flags...
  local name=$1; shift
  echo "llama_optimizers: $name: $BUILD/shardlm train ${common[*]} $*"
  "$BUILD/shardlm" train "${common[@]}" "$@" --out "$OUT/$name" --overwrite > "$OUT/$name.log" 2>&1 ||
    { echo "llama_optimizers: $name failed: see $OUT/$name.log"; tail -3 "$OUT/$name.log"; return 1; }
}
table() {  # names...
  /usr/bin/python3 - "$OUT" "$STEPS" "$@" <<'PY'
import json, re, sys
out, steps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'run':22} {'params':>9} {'final loss':>10} {'final val':>10} {'opt state MiB':>13} {'B/param':>8} {'s/step':>7}")
for n in names:
    s = json.load(open(f"{out}/{n}/summary.json"))
    log = open(f"{out}/{n}.log").read()
    params = re.search(r"([0-9.]+)M parameters", log).group(1)
    st = re.search(r"optimizer state\s+([0-9.]+)", log)
    pe = re.search(r"P = (\d+) elements", log)
    mib = float(st.group(1)) if st else float("nan")
    bpp = mib * 2**20 / int(pe.group(1)) if st and pe else float("nan")
    v = s.get("final_val_loss", float("nan"))
    print(f"{n:22} {params + 'M':>9} {s['final_loss']:10.4f} {v:10.4f} {mib:13.2f} {bpp:8.2f} {s['train_time_s'] / steps:7.3f}")
PY
}
if [ "$WHAT" = arch ] || [ "$WHAT" = all ]; then
  # AdamW at lr 0.004 throughout (bench/sotu_experiments.json's rate)
  run gpt --optimizer adamw --lr 0.004
  run llama --optimizer adamw --lr 0.004 --norm rmsnorm --position rope --mlp swiglu --ffn-hidden 200 --bias false \
      --n-kv-head 2 --tie-embeddings true
  table gpt llama
  /usr/bin/python3 bench/plot_curves.py --out bench/llama_vs_gpt.svg \
    --title "default corpus, $STEPS steps: GPT-2 block vs LLaMA block, same size" \
    gpt="$OUT/gpt/metrics.jsonl" llama="$OUT/llama/metrics.jsonl"
fi
if [ "$WHAT" = optim ] || [ "$WHAT" = all ]; then
  have=$("$BUILD/shardlm" train --help 2>&1 | grep -o 'lion\|radam\|adafactor\|adam8bit\|sophia' | sort -u | tr '\n' ' ' || true)
  OPTIMIZERS=${OPTIMIZERS:-"adamw adam momentum adagrad $have"}
  names=()
  for o in $OPTIMIZERS; do
    var=LR_$o; lr=${!var:-}
    if [ -z "$lr" ]; then
      case $o in lion) lr=0.0004 ;; momentum|sgd) lr=0.1 ;; adagrad) lr=0.02 ;; adafactor) lr=0.004 ;; sophia) lr=0.002 ;;
                 *) lr=0.004 ;; esac
    fi
    [ "$o" = adamw ] && [ -d "$OUT/gpt" ] && [ "${RERUN:-0}" != 1 ] && { names+=(gpt); continue; }
    if [ -f "$OUT/opt-$o/summary.json" ] && [ "${RERUN:-0}" != 1 ]; then names+=("opt-$o"); continue; fi  # done before
    run "opt-$o" --optimizer "$o" --lr "$lr" && names+=("opt-$o")
  done
  table "${names[@]}"
  args=(); for n in "${names[@]}"; do args+=("$n=$OUT/$n/metrics.jsonl"); done
  /usr/bin/python3 bench/plot_curves.py --out bench/optimizers.svg \
    --title "default corpus, $STEPS steps: optimisers on the default GPT" "${args[@]}"
fi
if [ "$WHAT" = sophia ] || [ "$WHAT" = all ]; then
  SOPHIA_LRS=${SOPHIA_LRS:-"0.001 0.002 0.004"}; SOPHIA_RHO=${SOPHIA_RHO:-0.05}
  half=$((STEPS / 2)); names=(); args=()
  srun() {  # name, steps, flags...
    local name=$1 n=$2; shift 2
    local common=("${base[@]}")  # (run reads it) the steps, warm-up and validation of this run
    if [ ! -f "$OUT/$name/summary.json" ] || [ "${RERUN:-0}" = 1 ]; then
      run "$name" --steps "$n" --warmup $((n / 50)) --val-every $((STEPS / 16)) "$@" || return 0
    fi
    names+=("$name"); args+=("$name=$OUT/$name/metrics.jsonl")
  }
  srun "adamw-$STEPS" "$STEPS" --optimizer adamw --lr 0.004
  srun "adamw-$half" "$half" --optimizer adamw --lr 0.004
  for lr in $SOPHIA_LRS; do srun "sophia-lr$lr-$STEPS" "$STEPS" --optimizer sophia --lr "$lr" --rho "$SOPHIA_RHO"; done
  # Sophia's half-length run at the learning rate whose full-length run ended lowest
  best=$(/usr/bin/python3 -c "
import json, sys
runs = {lr: json.load(open(f'$OUT/sophia-lr{lr}-$STEPS/summary.json')).get('final_val_loss', 1e9) for lr in sys.argv[1:]}
print(min(runs, key=runs.get))" $SOPHIA_LRS)
  srun "sophia-lr$best-$half" "$half" --optimizer sophia --lr "$best" --rho "$SOPHIA_RHO"
  table "${names[@]}"
  /usr/bin/python3 - "$OUT" "$STEPS" "${names[@]}" <<'PY'
import json, sys
out, steps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def vals(n):
    return [(r["step"] + 1, r["val_loss"]) for r in map(json.loads, open(f"{out}/{n}/metrics.jsonl")) if "val_loss" in r]
ref = vals(f"adamw-{steps}")[-1][1]
print(f"AdamW's final validation loss after {steps} steps: {ref:.4f}; the first validation at or below it:")
for n in names:
    hit = next((s for s, v in vals(n) if v <= ref), None)
    print(f"  {n:24} {'step ' + str(hit) if hit else 'not reached':>14}")
PY
  /usr/bin/python3 bench/plot_curves.py --out bench/sophia.svg \
    --title "default corpus: Sophia-G against AdamW, $STEPS and $half steps" "${args[@]}"
fi
