#!/usr/bin/env bash
# Builds (installing what is missing) and runs every test: unit, e2e, and cuda (skipped without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
# The Python package's tests (python/tests) on Debian's python3-torch; the module is built into python/vtensor.
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
PYTHONPATH=python "$PY" -m pytest -q -p no:cacheprovider python/tests
