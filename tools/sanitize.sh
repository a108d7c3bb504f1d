#!/usr/bin/env bash
# tools/sanitize.sh: the checked builds that .ci/run runs after the plain suite (tools/test.sh).
#   1. asan: the whole test suite built with AddressSanitizer + UndefinedBehaviorSanitizer (clang,
#      -O1) and run with CTest: any invalid access or undefined behaviour fails the test that
#      triggered it.
#   2. fuzz: the libFuzzer targets of fuzz/ (the same instrumented build), each run for
#      FUZZ_SECONDS (default 60) from the seeds in fuzz/corpus/<target>/.
#   Both in build-san/.
#   bash tools/sanitize.sh [asan|fuzz]   (default: both)
# Needs the packages of `tools/setup.sh --fuzz` and the assets of tools/fetch_assets.sh (the
# tokenizer targets read the GPT-2 vocabulary).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
JOBS="$(nproc)"
bash tools/setup.sh --fuzz --packages-only
bash tools/fetch_assets.sh >/dev/null

# One clang build serves both: every library and test with ASan + UBSan (and libFuzzer's coverage
# instrumentation, harmless outside the fuzzers). clang builds it about 3x faster than g++ would
# with the same sanitizers, which keeps CI inside its time limit. The libraries and the binary are unity
# builds here (SHARDLM_UNITY, as the quick start's), so CI compiles and tests both ways. At -O1 clang's loop
# vectorizer does not run, so every `omp simd` loop would warn that it was not vectorized (-Wpass-failed).
echo "sanitize: clang build with ASan + UBSan: the test suite and the libFuzzer targets (build-san/)"
CXX=clang++ cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -Wno-pass-failed" \
      -DSHARDLM_FUZZ=ON -DSHARDLM_BENCH=OFF -DSHARDLM_UNITY=ON >/dev/null
/usr/bin/python3 tools/check_packages.py build-san/CMakeCache.txt  # clang's packages are in setup.sh
targets=(safetensors token_shard config decode tokenizer)

if [ "$what" = all ] || [ "$what" = asan ]; then
  cmake --build build-san -j"$JOBS"
  # Open MPI and libgomp keep memory until exit by design: leaks are not checked. A report ends the
  # process (halt_on_error), so the test that caused it fails.
  export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  # Recipe.*: trainings of the quick start's model for their numbers (minutes under ASan, and nothing
  # there the shorter trainings of the suite do not run)
  (cd build-san && ctest --output-on-failure -j"$JOBS" -LE setup -E '^Recipe\.')
fi

if [ "$what" = all ] || [ "$what" = fuzz ]; then
  cmake --build build-san -j"$JOBS" --target "${targets[@]/#/fuzz_}"
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1"
  for t in "${targets[@]}"; do
    corpus="build-san/corpus/$t"   # grows during the run; the committed seeds stay as they are
    mkdir -p "$corpus"
    cp -n fuzz/corpus/"$t"/* "$corpus"/
    echo "sanitize: fuzz_$t for ${FUZZ_SECONDS:-60} s"
    build-san/fuzz_"$t" "$corpus" -max_total_time="${FUZZ_SECONDS:-60}" -timeout=10 -rss_limit_mb=2048 \
        -max_len=4096 -print_final_stats=1 -artifact_prefix=build-san/crash-"$t"- 2>&1 | tail -n 12
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "sanitize: fuzz_$t found a failing input (build-san/crash-$t-*)"; exit 1; }
  done
fi
echo "sanitize: done"
