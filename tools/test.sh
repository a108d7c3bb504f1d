#!/usr/bin/env bash
# tools/test.sh: set up (packages, build, assets) and run the whole test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/fetch_assets.sh
# PyTorch fixtures are committed; regenerate and self-check them when PyTorch is here.
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 tools/reference/check_fixtures.py
fi
cd build
ctest --output-on-failure -j1 "$@"
