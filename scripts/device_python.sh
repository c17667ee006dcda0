#!/usr/bin/env bash
# On a GPU machine (docs/benchmarks.md, "On a GPU machine"): builds the Python module
# python/vtensor/_vtensor*.so with that machine's Python and pip's pybind11, against the core library
# and headers scripts/device_package.sh carried (build/libvtensor.so, build-dev/include), then
# runs the Python tests: all of them under pytest where it is installed, else python/tests/test_cuda.py
# (the CUDA paths: the pluggable allocator, offload's CUDA store) as a script. The module links no
# CUDA: the core library loads the cuda backend only when asked for it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -f build/libvtensor.so ] || { echo "device_python: build/libvtensor.so is missing: run scripts/device_package.sh where it was built and extract its package here" >&2; exit 2; }
# pip's pybind11 (the GPU image), else Debian's pybind11-dev beside the interpreter's headers (here)
inc=$("$PY" -m pybind11 --includes 2>/dev/null) ||
  { [ -d /usr/include/pybind11 ] && inc="$("$PY" -c "import sysconfig; print('-I' + sysconfig.get_paths()['include'])")"; } ||
  { echo "device_python: $PY cannot import pybind11 and /usr/include/pybind11 is missing (pip install pybind11)" >&2; exit 2; }
suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
# shellcheck disable=SC2086 # $inc is a list of -I flags
"${CXX:-g++}" -O2 -shared -fPIC -std=c++20 -fvisibility=hidden python/src/module.cpp python/src/arena.cpp \
  python/src/pluggable.cpp python/src/planning.cpp python/src/codecs.cpp -I. -Ibuild-dev/include $inc build/libvtensor.so -Wl,-rpath,"$PWD/build" -ldl \
  -o "python/vtensor/_vtensor$suffix"
echo "device_python: built python/vtensor/_vtensor$suffix"
if "$PY" -c "import pytest" 2>/dev/null; then
  PYTHONPATH=python "$PY" -m pytest -q -p no:cacheprovider python/tests
else
  echo "device_python: no pytest for $PY: python/tests/test_cuda.py as a script"
  PYTHONPATH=python "$PY" python/tests/test_cuda.py
fi
