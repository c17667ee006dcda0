#!/usr/bin/env bash
# Builds (installing what is missing) and runs every test: unit, e2e, and cuda (skipped without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
