#!/usr/bin/env bash
# bench/compare_mixed.sh: mixed-precision training of GPT-2 124M (B = 4, T = 256, forward, backward,
# clip, AdamW), side by side in one run: PyTorch 1.13 fp32 and bf16 autocast, shardlm fp32,
# --precision bf16 / fp16, and bf16 with --recompute selective / full. Prints tokens/s, the ratios to
# PyTorch, MFU against the bf16 dot-product peak measured in the same run, and peak RSS.
#   bash bench/compare_mixed.sh [build dir=build] [threads=2] [rounds=2]
# PyTorch gets its best configuration (MACHINE.md): OpenBLAS forced to SkylakeX kernels (Haswell on an AVX2-only CPU), glibc malloc
# tuned, passive OpenMP waiting. Each configuration runs `rounds` times, alternating; the best counts.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; THREADS=${2:-2}; ROUNDS=${3:-2}
PY=/usr/bin/python3
TUNED="glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.top_pad=268435456"
# OpenBLAS kernels for PyTorch: SkylakeX (AVX-512) where the CPU has them, else Haswell (AVX2: the kernels
# OpenBLAS picks by itself on a Zen 3, where it names them Zen)
BLAS_CORE=$(grep -qw avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)
unset OPENBLAS_CORETYPE  # shardlm picks SkylakeX itself; PyTorch is given it below
B=4; T=256; STEPS=6
peaks=$("$BUILD/bench_peak")
bf16peak=$(echo "$peaks" | $PY -c 'import json,sys; print([json.loads(l) for l in sys.stdin if "bf16" in l][0]["gflops_all_threads"])')
fp32peak=$(echo "$peaks" | $PY -c 'import json,sys; print([json.loads(l) for l in sys.stdin if "fp32" in l][0]["gflops_all_threads"])')
echo "peaks measured now, $THREADS threads: fp32 FMA $fp32peak GFLOP/s, bf16 dot $bf16peak GFLOP/s"
OUT=$(mktemp)
torch() { env OPENBLAS_CORETYPE=$BLAS_CORE GLIBC_TUNABLES=$TUNED OMP_WAIT_POLICY=PASSIVE \
          $PY bench/pytorch_gpt2_step.py --batch $B --seq $T --threads "$THREADS" --steps $STEPS --warmup 2 "$@"; }
ours() { "$BUILD/bench_train_step" --batch $B --seq $T --threads "$THREADS" --steps $STEPS --warmup 2 \
         --peak-gflops "$bf16peak" "$@"; }
for round in $(seq "$ROUNDS"); do
  echo "torch fp32 $(torch)" >> "$OUT"
  echo "torch bf16 $(torch --autocast bf16)" >> "$OUT"
  echo "ours fp32 $(ours --precision fp32)" >> "$OUT"
  echo "ours bf16 $(ours --precision bf16)" >> "$OUT"
  echo "ours fp16 $(ours --precision fp16)" >> "$OUT"
  echo "ours bf16+selective $(ours --precision bf16 --recompute selective)" >> "$OUT"
  echo "ours bf16+full $(ours --precision bf16 --recompute full)" >> "$OUT"
done
$PY - "$OUT" "$bf16peak" <<'PYEOF'
import json, sys
best = {}
for line in open(sys.argv[1]):
    impl, prec, js = line.split(" ", 2)
    r = json.loads(js)
    key = impl + " " + prec
    if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
        best[key] = r
flops = 6 * 124439808 + 12 * 12 * 256 * 768  # per token: 6 N + 12 l T C
peak = float(sys.argv[2])
tb, tf = best["torch bf16"]["tokens_per_s"], best["torch fp32"]["tokens_per_s"]
print("%-22s %9s %11s %11s %12s %9s" % ("config", "tok/s", "vs torch16", "vs torch32", "MFU(bf16pk)", "RSS MiB"))
for k, r in best.items():
    t = r["tokens_per_s"]
    print("%-22s %9.1f %11.2f %11.2f %11.1f%% %9.0f" % (k, t, t / tb, t / tf, 100 * t * flops / 1e9 / peak,
                                                       r["peak_rss_mib"]))
PYEOF
rm -f "$OUT"
