#!/usr/bin/env bash
# bench/compare_pytorch.sh: GPT-2 124M training step (forward, backward, clip, AdamW), shardlm vs
# PyTorch 1.13 on this machine, side by side in one run, at (B=4,T=64), (B=4,T=256), (B=4,T=1024).
#   bash bench/compare_pytorch.sh [build dir=build] [threads=2] [shapes="4x64 4x256 4x1024"]
# PyTorch gets its best configuration (MACHINE.md): OpenBLAS forced to SkylakeX kernels (Haswell on an AVX2-only CPU), glibc malloc
# tuned so it does not re-fault its buffers every step, passive OpenMP waiting; and we also try it on
# Debian's OpenMP build of OpenBLAS (one thread pool) and keep whichever is faster.
# Each implementation runs twice per shape, alternating; the best run of each counts.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
THREADS=${2:-2}
SHAPES=${3:-"4x64 4x256 4x1024"}
PY=/usr/bin/python3
TUNED="glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:glibc.malloc.top_pad=268435456"
# OpenBLAS kernels for PyTorch: SkylakeX (AVX-512) where the CPU has them, else Haswell (AVX2: the kernels
# OpenBLAS picks by itself on a Zen 3, where it names them Zen)
BLAS_CORE=$(grep -qw avx512f /proc/cpuinfo && echo SkylakeX || echo Haswell)

peak=$("$BUILD/bench_peak" | $PY -c 'import json,sys; print([json.loads(l) for l in sys.stdin if "fp32" in l][0]["gflops_all_threads"])')
echo "fp32 FMA peak, $THREADS threads, measured now: $peak GFLOP/s"
steps_for() { case $2 in 64) echo 6;; 256) echo 4;; *) echo 2;; esac; }

best() { $PY -c 'import json,sys; rows=[json.loads(l) for l in sys.stdin if l.startswith("{")]; print(json.dumps(max(rows, key=lambda r: r["tokens_per_s"])))'; }

printf "%-10s %12s %12s %8s %8s %12s %12s\n" shape shardlm_tok/s torch_tok/s ratio mfu rss_ours_MiB rss_torch_MiB
for shape in $SHAPES; do
  B=${shape%x*}; T=${shape#*x}; S=$(steps_for "$B" "$T")
  ours=""; torch=""
  for round in 1 2; do
    ours+=$("$BUILD/bench_train_step" --batch "$B" --seq "$T" --threads "$THREADS" --steps "$S" --warmup 1 \
            --peak-gflops "$peak")$'\n'
    torch+=$(env OPENBLAS_CORETYPE=$BLAS_CORE GLIBC_TUNABLES=$TUNED OMP_WAIT_POLICY=PASSIVE \
             $PY bench/pytorch_gpt2_step.py --batch "$B" --seq "$T" --threads "$THREADS" --steps "$S" --warmup 1)$'\n'
    torch+=$(env OPENBLAS_CORETYPE=$BLAS_CORE GLIBC_TUNABLES=$TUNED OMP_WAIT_POLICY=PASSIVE \
             LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \
             $PY bench/pytorch_gpt2_step.py --batch "$B" --seq "$T" --threads "$THREADS" --steps "$S" --warmup 1)$'\n'
  done
  o=$(printf "%s" "$ours" | best); t=$(printf "%s" "$torch" | best)
  echo "$o" >> /tmp/compare_pytorch.jsonl; echo "$t" >> /tmp/compare_pytorch.jsonl
  $PY - "$o" "$t" <<'PYEOF'
import json, sys
o, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("%-10s %12.1f %12.1f %8.2f %8.3f %12.0f %12.0f" % (f'{o["B"]}x{o["T"]}', o["tokens_per_s"], t["tokens_per_s"],
      o["tokens_per_s"] / t["tokens_per_s"], o["mfu"], o["peak_rss_mib"], t["peak_rss_mib"]))
PYEOF
done
