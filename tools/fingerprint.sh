#!/usr/bin/env bash
# tools/fingerprint.sh: what a refactor must not change, as one line per run. Trains a small awkward
# model 6 steps under each layout, precision, dp-algo and optimiser below (native GEMMs, one thread a
# rank or two lanes of one process, so every run is deterministic) and prints, per run, the sha256 of
# its checkpoint files and of its metrics and summary with the timing fields removed.
#   bash tools/fingerprint.sh [shardlm binary=build/shardlm] > after.txt
# Compare two builds of the same machine: build the old commit elsewhere, fingerprint both, diff.
#   git worktree add /tmp/base <commit> && cmake -S /tmp/base -B /tmp/base/build && cmake --build /tmp/base/build
#   bash tools/fingerprint.sh /tmp/base/build/shardlm > before.txt; bash tools/fingerprint.sh > after.txt
#   diff before.txt after.txt
# ONLY=<substring> runs the cases whose name contains it. DROP_KEYS="a b" removes those keys from every
# JSON file before hashing (the checkpoint's meta.json, summary.json): to compare across a change that
# drops a settings key on purpose, the files then hashed as their parsed, key-sorted form.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "${1:-$ROOT/build/shardlm}")
FIX=$ROOT/tests/fixtures/gpt2_e2e
MPI="mpirun --allow-run-as-root --oversubscribe -np"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

MODEL="--model tiny --n-layer 4 --n-head 4 --n-embd 48 --n-ctx 32 --vocab-size 211 --seed 5"
LLAMA="--model llama-tiny --n-layer 4 --n-kv-head 2 --n-ctx 32 --vocab-size 211 --seed 5"
DATA="--data $FIX/data.bin --data-order sequential --seq 16 --global-batch 8
      --val-data $FIX/data.bin --val-batches 2 --val-every 3"
STEP="--steps 6 --gemm native --log-every 1000"
ADAM="--optimizer adamw --lr 0.01 --weight-decay 0.1 --grad-clip 1.0"

# name | ranks | model | flags
cases=(
  "one_fp32|1|$MODEL|$ADAM"
  "one_bf16|1|$MODEL|$ADAM --precision bf16"
  "one_fp16|1|$MODEL|$ADAM --precision fp16"
  "one_fp32_bf16_products|1|$MODEL|$ADAM --precision fp32-bf16-products"
  "one_recompute|1|$MODEL|$ADAM --recompute full"
  "one_lanes_fp32|1|$MODEL|$ADAM --micro-batch 4 --threads 2 --thread-split batch"
  "one_lanes_bf16|1|$MODEL|$ADAM --micro-batch 4 --threads 2 --thread-split batch --precision bf16"
  "dp2_zero0|2|$MODEL|$ADAM --zero 0"
  "dp2_zero1|2|$MODEL|$ADAM --zero 1"
  "dp2_zero2|2|$MODEL|$ADAM --zero 2"
  "dp2_zero3|2|$MODEL|$ADAM --zero 3"
  "dp2_zero3_bf16|2|$MODEL|$ADAM --zero 3 --precision bf16"
  "dp2_zero2_fp16|2|$MODEL|$ADAM --zero 2 --precision fp16"
  "tp2_sp|2|$MODEL|$ADAM --tp 2 --sequence-parallel"
  "pp2_gpipe|2|$MODEL|$ADAM --pp 2 --schedule gpipe"
  "dp2pp2_1f1b_zero3|4|$MODEL|$ADAM --pp 2 --schedule 1f1b --zero 3"
  "dp2pp2_interleaved_zero3|4|$MODEL|$ADAM --pp 2 --schedule interleaved --virtual-stages 2 --zero 3"
  "dp2pp2_zbh1_zero3|4|$MODEL|$ADAM --pp 2 --schedule zb-h1 --zero 3"
  "dp2pp2_zbv_zero3|4|$MODEL|$ADAM --pp 2 --schedule zbv --zero 3"
  "dp2pp2_zbv_zero1_bf16|4|$MODEL|$ADAM --pp 2 --schedule zbv --zero 1 --precision bf16"
  "dp2tp2pp2|8|$MODEL|$ADAM --tp 2 --pp 2 --sequence-parallel --zero 1"
  "llama_one|1|$LLAMA|$ADAM"
  "llama_tp2|2|$LLAMA|$ADAM --tp 2"
  "llama_dp2pp2_zero3_bf16|4|$LLAMA|$ADAM --pp 2 --zero 3 --precision bf16"
  "cp2|2|$MODEL|$ADAM --cp 2"
  "dp2cp2_zero3_allgather_bf16|4|$MODEL|$ADAM --cp 2 --zero 3 --cp-comm allgather --precision bf16"
  "cp2pp2_zbv|4|$MODEL|$ADAM --cp 2 --pp 2 --schedule zbv"
  "llama_cp2tp2_docmask|4|$LLAMA|$ADAM --cp 2 --tp 2 --doc-mask --eot-token 200"
  "moe_one_bf16|1|$LLAMA --n-experts 4 --moe-ffn 32|$ADAM --precision bf16 --z-loss-coef 0.001"
  "moe_dp2ep2_zero3|2|$MODEL --n-experts 4 --shared-experts 1 --moe-layers every:2|$ADAM --ep 2 --zero 3 --capacity-factor 1"
  "moe_dp2ep2tp2_bias|4|$LLAMA --n-experts 4 --moe-ffn 32|$ADAM --ep 2 --tp 2 --expert-bias-rate 0.01 --aux-loss-coef 0"
  "algo_local_sgd|2|$MODEL|$ADAM --dp-algo local-sgd --local-steps 2"
  "algo_diloco|2|$MODEL|$ADAM --dp-algo diloco --local-steps 2"
  "algo_gossip_ring|4|$MODEL|$ADAM --dp-algo gossip --topology ring"
  "algo_gossip_one_peer|4|$MODEL|$ADAM --dp-algo gossip --topology one-peer-exp"
  "algo_topk|2|$MODEL|$ADAM --dp-algo compressed --compress topk:0.1 --error-feedback ef"
  "algo_qsgd|2|$MODEL|$ADAM --dp-algo compressed --compress qsgd:16"
  "algo_sign_vote|2|$MODEL|$ADAM --dp-algo compressed --compress sign:vote"
  "algo_powersgd|2|$MODEL|$ADAM --dp-algo compressed --compress powersgd:2 --error-feedback ef"
)
for opt in sgd momentum adagrad adam adamw radam lion adam8bit adafactor sophia; do
  cases+=("opt_$opt|1|$MODEL|--optimizer $opt --lr 0.003 --weight-decay 0.1" "opt_${opt}_dp2_zero1|2|$MODEL|--optimizer $opt --lr 0.003 --zero 1")
done

# The hash of a JSON-lines file with the fields that measure time dropped.
strip_hash() {
  python3 - "$1" "${DROP_KEYS:-}" <<'PY'
import hashlib, json, sys
TIMING = {"step_ms", "tokens_per_s", "train_time_s", "mfu", "wait_ms", "comm_ms", "compute_ms", "elapsed_s"}
DROP = set(sys.argv[2].split())
def drop(v):
    if isinstance(v, dict): return {k: drop(x) for k, x in v.items() if k not in DROP}
    if isinstance(v, list): return [drop(x) for x in v]
    return v
text = open(sys.argv[1]).read()
try:
    records = [json.loads(text)]
except json.JSONDecodeError:
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
out = []
for rec in records:
    out.append(json.dumps(drop({k: v for k, v in rec.items() if k not in TIMING and not k.endswith("_ms")}), sort_keys=True))
print(hashlib.sha256("\n".join(out).encode()).hexdigest()[:16])
PY
}

# The hash of one JSON document without the keys of DROP_KEYS (at any depth), key-sorted.
json_hash() {
  python3 - "$1" "${DROP_KEYS:-}" <<'PY'
import hashlib, json, sys
DROP = set(sys.argv[2].split())
def drop(v):
    if isinstance(v, dict): return {k: drop(x) for k, x in v.items() if k not in DROP}
    if isinstance(v, list): return [drop(x) for x in v]
    return v
print(hashlib.sha256(json.dumps(drop(json.load(open(sys.argv[1]))), sort_keys=True).encode()).hexdigest()[:16])
PY
}

for c in "${cases[@]}"; do
  IFS='|' read -r name np model flags <<<"$c"
  [ -z "${ONLY:-}" ] || [[ "$name" == *"$ONLY"* ]] || continue
  dir=$WORK/$name
  launcher=""
  [ "$np" = 1 ] || launcher="$MPI $np"
  [[ "$flags" == *--threads* ]] || flags="$flags --threads 1"
  [[ "$flags" == *--micro-batch* ]] || flags="$flags --micro-batch 1"
  # The run directory is relative, so the configs and metadata written into it are the same for any build.
  if ! (cd "$WORK" && $launcher "$BIN" train $model $DATA $STEP $flags --out "$name" > "$name.log" 2>&1); then
    echo "$name FAILED"; tail -5 "$WORK/$name.log" | sed 's/^/    /'; continue
  fi
  ckpt=$(find "$dir" -maxdepth 1 -name 'ckpt_*' | sort | tail -1)
  if [ -z "${DROP_KEYS:-}" ]; then
    files=$(cd "$ckpt" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16)
  else  # JSON files without the dropped keys
    files=$(cd "$ckpt" && for f in $(find . -type f | sort); do
      case $f in *.json) echo "$f $(DROP_KEYS=$DROP_KEYS json_hash "$f")" ;; *) sha256sum "$f" ;; esac
    done | sha256sum | cut -c1-16)
  fi
  printf "%-28s ckpt %s  metrics %s  summary %s\n" "$name" "$files" \
    "$(strip_hash "$dir/metrics.jsonl")" "$(strip_hash "$dir/summary.json")"
done
