#!/usr/bin/env bash
# tools/quickstart.sh: from a fresh Debian 12 machine to a trained model, end to end:
# install packages and build (tools/setup.sh), fetch the GPT-2 vocabulary and the State of the Union
# corpus (tools/fetch_assets.sh), tokenize it, train the default model (configs/sotu.json), write the
# report (loss curves) and sample text. Extra arguments go to `shardlm train` (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --binary-only   # the tests and benchmarks are built by tools/test.sh
bash tools/fetch_assets.sh
# --normalize punct: the 2017-2021 transcripts switch to curly quotes and em dashes, which GPT-2
# encodes as byte tokens the 1790-2016 training text never contains (see docs/DESIGN.md).
./build/shardlm tokenize data/sotu/raw --out data/sotu --name sotu --normalize punct
RUN=runs/sotu
# bf16 (the config's) is the fast mode only with AVX512_BF16 (Zen 4/5); on AVX2-only CPUs (Zen 3) its
# products are widened to fp32 and run slower than fp32 itself: train in fp32 there (the same
# validation loss: bench/convergence.sh). --precision on the command line decides.
extra=()
if ! grep -qw avx512_bf16 /proc/cpuinfo && [[ " $* " != *" --precision"* ]]; then
  echo "quickstart: this CPU has no AVX512_BF16: training in fp32 (bf16 products would be slower here)"
  extra=(--precision fp32)
fi
./build/shardlm train --config configs/sotu.json --out "$RUN" "${extra[@]}" "$@"
./build/shardlm report "$RUN"
./build/shardlm generate --ckpt "$RUN" --prompt "My fellow citizens," --max-tokens 80 --seed 1
echo "quickstart: done. Open $RUN/report.html for the curves."
