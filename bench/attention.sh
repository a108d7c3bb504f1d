#!/usr/bin/env bash
# bench/attention.sh: fused against materialized attention (issue 25 item 2), GPT-2 124M training
# steps (forward, backward, clip, AdamW) at T = 256, 1024, 2048, 4096 with a fixed token budget per
# step (TOKENS, default 8192: B = TOKENS / T), side by side in one run: shardlm --attention fused,
# shardlm --attention materialized, PyTorch 1.13 (its reference model's softmax, and 1.13's private
# F._scaled_dot_product_attention; the faster counts) with OpenBLAS on SkylakeX kernels (Haswell without AVX-512). Prints
# tokens/s and peak RSS per row (one JSON line each into OUT, default /tmp/attention.jsonl).
#   bash bench/attention.sh [build=build] [threads=2]      (hold /tmp/shardlm-build.lock; ~30 min)
# Environment: TS ("256 1024 2048 4096"), TOKENS (8192), PRECISION (fp32 | bf16), STEPS (2), TORCH=0 to skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; THREADS=${2:-2}
TS=${TS:-"256 1024 2048 4096"}; TOKENS=${TOKENS:-8192}; PRECISION=${PRECISION:-fp32}; STEPS=${STEPS:-2}
OUT=${OUT:-/tmp/attention.jsonl}; PY=/usr/bin/python3
TUNED="glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.top_pad=268435456"
# OpenBLAS kernels for PyTorch: SkylakeX (AVX-512) where the CPU has them, else Haswell (AVX2: the kernels
# OpenBLAS picks by itself on a Zen 3, where it names them Zen)
BLAS_CORE=$(grep -qw avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)
: > "$OUT"
printf "%-6s %-5s %-14s %12s %12s\n" T B impl tokens/s peak_RSS_MiB
for T in $TS; do
  B=$((TOKENS / T)); [ "$B" -ge 1 ] || B=1
  nctx=$((T > 1024 ? T : 1024))
  for att in fused materialized; do
    line=$("$BUILD/bench_train_step" --batch "$B" --seq "$T" --threads "$THREADS" --steps "$STEPS" --warmup 1 \
           --precision "$PRECISION" --attention "$att" --n-ctx "$nctx" 2>/dev/null || echo '{"impl": "shardlm", "failed": true}')
    echo "$line" >> "$OUT"
    $PY -c 'import json,sys; r=json.loads(sys.argv[1]); print("%-6s %-5s %-14s %12s %12s" % (sys.argv[2], sys.argv[3], "shardlm-"+sys.argv[4], "%.1f" % r["tokens_per_s"] if "tokens_per_s" in r else "failed", "%.0f" % r["peak_rss_mib"] if "peak_rss_mib" in r else "-"))' "$line" "$T" "$B" "$att"
  done
  [ "${TORCH:-1}" = 1 ] || continue
  autocast=none; [ "$PRECISION" = bf16 ] && autocast=bf16
  for attn in manual sdpa; do
    line=$(env OPENBLAS_CORETYPE=$BLAS_CORE GLIBC_TUNABLES=$TUNED OMP_WAIT_POLICY=PASSIVE \
           $PY bench/pytorch_gpt2_step.py --batch "$B" --seq "$T" --threads "$THREADS" --steps "$STEPS" --warmup 1 \
           --autocast "$autocast" --attn "$attn" --n-positions "$nctx" 2>/dev/null || echo '{"impl": "pytorch", "failed": true}')
    echo "$line" >> "$OUT"
    $PY -c 'import json,sys; r=json.loads(sys.argv[1]); print("%-6s %-5s %-14s %12s %12s" % (sys.argv[2], sys.argv[3], "pytorch-"+sys.argv[4], "%.1f" % r["tokens_per_s"] if r.get("tokens_per_s") else "failed", "%.0f" % r["peak_rss_mib"] if "peak_rss_mib" in r else "-"))' "$line" "$T" "$B" "$attn"
  done
done
