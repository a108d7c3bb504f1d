#!/usr/bin/env bash
# tools/test.sh: set up (packages, build, assets) and run the whole test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/fetch_assets.sh
# PyTorch fixtures are committed; regenerate and self-check them when PyTorch is here.
# They were made with OpenBLAS's SkylakeX (AVX-512) kernels: PyTorch on other kernels (a shell that
# presets OPENBLAS_CORETYPE=Haswell) rounds differently, by ~1e-6 after a few Adam steps.
# An AVX2-only CPU cannot run those kernels: the checks over several optimiser steps then allow for
# the other kernels' rounding (--other-kernels).
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  (if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX; other=(); else other=(--other-kernels); fi
   /usr/bin/python3 tools/reference/check_fixtures.py "${other[@]}")
fi
cd build
ctest --output-on-failure -j1 "$@"
