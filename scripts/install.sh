#!/usr/bin/env bash
# Installs what vtensor needs from Debian's packages and builds it (Release) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake ninja-build python3 libopenblas-dev nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev)
pkgs+=(coinor-libclp-dev coinor-libcbc-dev)  # the linear and integer programs of policy auto (vtensor/policy/lp.h)
pkgs+=(python3-dev pybind11-dev python3-torch python3-pytest)  # the Python package (python/) and its tests
pkgs+=(clang libclang-rt-dev)  # the sanitizer jobs and libFuzzer targets (scripts/sanitize.sh, scripts/fuzz.sh)
# The browser test (tests/e2e/test_view.cpp) opens a timeline page in headless Chromium: large,
# so only when asked for; without it that test skips and says why.
[ "${VTENSOR_BROWSER_TESTS:-0}" = 1 ] && pkgs+=(chromium)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${VTENSOR_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
