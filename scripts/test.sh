#!/usr/bin/env bash
# Builds (installing what is missing) and runs every test: unit, e2e, and cuda (skipped without a GPU),
# the Python package's tests, then the sanitizer jobs and the fuzz targets (a few minutes more;
# VTENSOR_SANITIZE=0 leaves them out).
set -euo pipefail
cd "$(dirname "$0")/.."
stage() { echo "test.sh: $1 done, $((SECONDS / 60))m$((SECONDS % 60))s in"; }  # where CI's time goes
scripts/install.sh
stage "install and build"
ctest --test-dir build --output-on-failure -j "$(nproc)"
stage "ctest"
# The Python package's tests (python/tests) on the pinned torch, in the environment install.sh made,
# against the package installed there (no PYTHONPATH).
if [ "${VTENSOR_PYTHON:-1}" != 0 ]; then
  .venv/bin/python -m pytest -q -p no:cacheprovider python/tests
  stage "python tests"
fi
if [ "${VTENSOR_SANITIZE:-1}" != 0 ]; then
  scripts/sanitize.sh  # ASan + UBSan on the unit and e2e tests, TSan on the cpu backend's streams
  stage "sanitizers"
  scripts/fuzz.sh      # each parser's libFuzzer target for a bounded time
  stage "fuzz"
fi
