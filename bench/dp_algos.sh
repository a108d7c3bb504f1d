#!/usr/bin/env bash
# bench/dp_algos.sh: issue 23's experiment. Four data-parallel ranks (mpirun, one thread each) train the
# default model on the default corpus (bench/sotu_experiments.json: 16 x 128 tokens a step, AdamW, cosine
# schedule, cut to STEPS steps) with every data-parallel algorithm, the same token budget for all:
# validation loss against steps and against the bytes one rank sent in its data-parallel group
# (metrics.jsonl's bytes_sent, summed), the table of final validation loss and bytes, and the plot
# bench/dp_algos.svg.
#   bash bench/dp_algos.sh [build=build]          (hold /tmp/shardlm-build.lock; about 1 s a step here)
# Environment: STEPS (800), OUT (runs/dp_algos), RANKS (4), PRECISION (bf16 where the CPU has
# AVX512_BF16, else fp32), ALGOS (the names below, a subset; "all" adds the EXTRA ones), RERUN=1 to run
# again what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${STEPS:-800}; OUT=${OUT:-runs/dp_algos}; RANKS=${RANKS:-4}
if [ -z "${PRECISION:-}" ]; then grep -qw avx512_bf16 /proc/cpuinfo && PRECISION=bf16 || PRECISION=fp32; fi
unset OPENBLAS_CORETYPE
[ -f data/sotu/sotu_train.bin ] || { echo "dp_algos: data/sotu missing: run tools/quickstart.sh first"; exit 2; }
mkdir -p "$OUT"
declare -A FLAGS=(
  [allreduce]="--dp-algo allreduce"
  [local-sgd-h4]="--dp-algo local-sgd --local-steps 4"
  [local-sgd-h16]="--dp-algo local-sgd --local-steps 16"
  [diloco-h50]="--dp-algo diloco --local-steps 50 --outer-lr 0.7 --outer-momentum 0.9"
  [diloco-h100]="--dp-algo diloco --local-steps 100 --outer-lr 0.7 --outer-momentum 0.9"
  [gossip-ring]="--dp-algo gossip --topology ring"
  [gossip-one-peer-exp]="--dp-algo gossip --topology one-peer-exp"
  [topk-1%-ef]="--dp-algo compressed --compress topk:0.01 --error-feedback ef"
  [qsgd-4bit]="--dp-algo compressed --compress qsgd:8 --error-feedback none"
  [powersgd-r4]="--dp-algo compressed --compress powersgd:4 --error-feedback ef"
  [sign-ef]="--dp-algo compressed --compress sign --error-feedback ef"
  # beyond the issue's list (ALGOS="..." to run them): lower PowerSGD ranks, and the local algorithms with
  # each replica's clipping threshold scaled for its 4x smaller batch (sqrt 4: its gradient's noise)
  [powersgd-r2]="--dp-algo compressed --compress powersgd:2 --error-feedback ef"
  [powersgd-r1]="--dp-algo compressed --compress powersgd:1 --error-feedback ef"
  [local-sgd-h16-clip2]="--dp-algo local-sgd --local-steps 16 --grad-clip 2"
  [local-sgd-h64-clip2-lr8e-3]="--dp-algo local-sgd --local-steps 64 --grad-clip 2 --lr 0.008"
  [diloco-h100-clip2]="--dp-algo diloco --local-steps 100 --outer-lr 0.7 --outer-momentum 0.9 --grad-clip 2"
  # top-k with EF21's dense aggregate estimate (Richtarik et al. 2021) instead of EF's delayed residuals
  [topk-1%-ef21]="--dp-algo compressed --compress topk:0.01 --error-feedback ef21"
  [topk-0.5%-ef21]="--dp-algo compressed --compress topk:0.005 --error-feedback ef21"
  # the vocabulary's matrices (92 % of this model's parameters) by a compressor of their own: PowerSGD at
  # rank 1 there and rank 4 or 8 in the blocks (their factors in fp32 or bf16); top-k 1 % on the
  # vocabulary alone (the blocks sent whole), and a global top-k budget
  [powersgd-r4-vocab-r1]="--dp-algo compressed --compress powersgd:4 --compress-embedding powersgd:1 --error-feedback ef"
  [powersgd-r4-vocab-r1-bf16]="--dp-algo compressed --compress powersgd:4 --compress-embedding powersgd:1 --compress-dtype bf16 --error-feedback ef"
  [powersgd-r8-vocab-r1-bf16]="--dp-algo compressed --compress powersgd:8 --compress-embedding powersgd:1 --compress-dtype bf16 --error-feedback ef"
  [topk-1%-vocab-only]="--dp-algo compressed --compress none --compress-embedding topk:0.01 --error-feedback ef"
  # Deep Gradient Compression's momentum correction (each rank's momentum accumulated and masked where sent),
  # the optimiser without a momentum of its own
  [topk-1%-ef-dgc]="--dp-algo compressed --compress topk:0.01 --error-feedback ef --momentum-correction 0.9 --beta1 0"
)
EXTRA="powersgd-r2 powersgd-r1 local-sgd-h16-clip2 local-sgd-h64-clip2-lr8e-3 diloco-h100-clip2 topk-1%-ef21 topk-0.5%-ef21
       powersgd-r4-vocab-r1 powersgd-r4-vocab-r1-bf16 powersgd-r8-vocab-r1-bf16 topk-1%-vocab-only topk-1%-ef-dgc"
ORDER="allreduce local-sgd-h4 local-sgd-h16 diloco-h50 diloco-h100 gossip-ring gossip-one-peer-exp topk-1%-ef qsgd-4bit powersgd-r4 sign-ef"
ALGOS=${ALGOS:-$ORDER}
[ "$ALGOS" = all ] && ALGOS="$ORDER $EXTRA"
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
args=()
for name in $ALGOS; do
  dir="$OUT/${name//%/pc}"
  if [ ! -f "$dir/summary.json" ] || [ "${RERUN:-0}" = 1 ]; then
    # bench/sotu_experiments.json: the default run as these experiments recorded it (configs/sotu.json's
    # settings until 2026-11-28: AdamW at lr 0.004, beta2 0.95)
    cmd=(mpirun "${root[@]}" --oversubscribe -np "$RANKS" "$BUILD/shardlm" train --config bench/sotu_experiments.json
         --steps "$STEPS" --warmup $((STEPS / 50)) --val-every $((STEPS / 16)) --ckpt-every 0 --sample-tokens 0
         --micro-batch 4 --threads 1 --precision "$PRECISION" --consensus-every 10 ${FLAGS[$name]} --out "$dir" --overwrite)
    echo "dp_algos: $name: ${cmd[*]}"
    "${cmd[@]}" > "$dir.log" 2>&1 || { echo "dp_algos: $name failed: see $dir.log"; tail -3 "$dir.log"; continue; }
  fi
  args+=("$name=$dir/metrics.jsonl")
done
/usr/bin/python3 bench/plot_dp_algos.py --out bench/dp_algos.svg \
  --title "default corpus, $RANKS data-parallel ranks, $STEPS steps of 16 x 128 tokens" "${args[@]}"
