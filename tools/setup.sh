#!/usr/bin/env bash
# tools/setup.sh: install what shardlm needs on Debian 12 (idempotent), then configure and build.
#   bash tools/setup.sh            # packages + build into ./build
#   SHARDLM_NO_APT=1 bash tools/setup.sh   # skip the package step
#   bash tools/setup.sh --fuzz --packages-only   # also the packages of tools/sanitize.sh; no build
#   bash tools/setup.sh --binary-only             # build only ./build/shardlm (the quick start: no tests,
#                                                 # no benchmarks; a later full build adds them)
set -euo pipefail
cd "$(dirname "$0")/.."

# What ./build/shardlm and the quick start need (--binary-only installs these alone: PyTorch is most of
# the rest's download, and the quick start never runs it).
PACKAGES=(build-essential cmake pkg-config
          libopenblas-dev libopenblas0-openmp libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libcli11-dev libpcre2-dev
          libopenmpi-dev openmpi-bin curl ca-certificates)
# The tests and benchmarks (tools/test.sh): GoogleTest, Google Benchmark, and PyTorch for the reference
# fixtures' self-check and the side-by-side benchmarks.
TEST_PACKAGES=(libgtest-dev libbenchmark-dev python3-torch python3-numpy)
# tools/sanitize.sh (CI after the plain suite): clang with libFuzzer and the sanitizer runtimes, and
# LLVM's OpenMP (clang -fopenmp).
FUZZ_PACKAGES=(clang libclang-rt-14-dev libomp-14-dev)

build=1
binary_only=0
fuzz=0
for arg in "$@"; do
  case "$arg" in
    --fuzz) fuzz=1 ;;
    --packages-only) build=0 ;;
    --binary-only) binary_only=1 ;;
    *) echo "setup: unknown option $arg (want --fuzz, --packages-only, --binary-only)" >&2; exit 2 ;;
  esac
done
# --binary-only: the binary's packages, and a build without the tests and benchmarks (configured OFF so
# CMake does not look for GoogleTest), compiled as unity builds (CMakeLists.txt: SHARDLM_UNITY); otherwise
# both, configured ON, one file at a time (a build directory the quick start made gains its tests here and
# compiles its libraries again, file by file)
if [ "$binary_only" = 1 ] && [ "$fuzz" = 0 ]; then
  targets=(--target shardlm); options=(-DSHARDLM_TESTS=OFF -DSHARDLM_BENCH=OFF -DSHARDLM_UNITY=ON)
else
  PACKAGES+=("${TEST_PACKAGES[@]}"); targets=(); options=(-DSHARDLM_TESTS=ON -DSHARDLM_BENCH=ON -DSHARDLM_UNITY=OFF)
fi
if [ "$fuzz" = 1 ]; then PACKAGES+=("${FUZZ_PACKAGES[@]}"); fi

if [ -z "${SHARDLM_NO_APT:-}" ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

[ "$build" = 1 ] || exit 0
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${options[@]}" >/dev/null
cmake --build build -j"$(nproc)" "${targets[@]}"
echo "setup: built ./build/shardlm"
