#!/usr/bin/env bash
# Installs what vtensor needs and builds it: Debian's packages, the C++ build (Release) into build/,
# then the project's Python environment (every version pinned in python/requirements.lock: torch 2.11
# from PyPI, the Hugging Face and torchvision test subjects, pytest) with the `vtensor` package
# (python/) installed into it. The environment is made once per machine, in $VTENSOR_VENV (default
# ~/.cache/vtensor/venv, outside the checkout so that every clone shares it; .venv links to it) and
# brought up to date when the lock file changes. The first time downloads about 2.6 GB from PyPI.
# VTENSOR_PYTHON=0 leaves the Python part out.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake ninja-build python3 libopenblas-dev nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev)
pkgs+=(coinor-libclp-dev coinor-libcbc-dev)  # the linear and integer programs of policy auto (vtensor/policy/lp.h)
pkgs+=(python3-dev python3-venv)  # the Python package (python/): its environment, Python's headers
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
[ "${VTENSOR_PYTHON:-1}" = 0 ] && exit 0

# The Python environment: Debian's python3 (its headers are python3-dev's), every package pinned.
lock=python/requirements.lock
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
venv=${VTENSOR_VENV:-$home/.cache/vtensor/venv}
if ! cmp -s "$lock" "$venv/requirements.lock" 2>/dev/null; then
  echo "install.sh: the Python environment in $venv (python/requirements.lock: torch, transformers, torchvision, pytest;"
  echo "            about 2.6 GB the first time, a few minutes)"
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$lock"
  cp "$lock" "$venv/requirements.lock"
fi
ln -sfn "$venv" .venv
# The package, built by its pyproject.toml (scikit-build-core over this CMakeLists.txt) in
# build/python-*/, which persists: a second install rebuilds only what changed.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps ./python
