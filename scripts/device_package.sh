#!/usr/bin/env bash
# Packs what bench/cuda_bench.sh needs to run on a lent GPU machine whose image has CUDA, cmake and
# PyTorch but not Debian's OpenBLAS, Clp or GoogleTest: the binaries built here with CUDA (same
# nvcc major version as there), the cuda tests' ctest files, and the shared libraries the image
# lacks; and for the Python module, built there by scripts/device_python.sh with that machine's
# Python, the static library (position independent where this build made the module) and
# nlohmann-json's headers. Writes build-dev/pkg.tar.gz (ignored by git, about 22 MB). On the GPU machine, from the
# repository root (docs/benchmarks.md, "On a lent GPU machine"):
#   tar xzf build-dev/pkg.tar.gz && export LD_LIBRARY_PATH=$PWD/build-dev/lib:...
#   VTENSOR_PREBUILT=1 bash bench/cuda_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
for f in "$B/vtensor" "$B/vtensor_cuda_tests" "$B/bench/vtensor_swap_bandwidth"; do
  [ -x "$f" ] || { echo "device_package: $f is missing: build with -DVTENSOR_BUILD_BENCH=ON first (scripts/install.sh, then cmake --build $B)" >&2; exit 2; }
done
ldd "$B/vtensor" | grep -q libcudart || { echo "device_package: $B/vtensor has no cuda backend (nvcc or cuDNN not found at configure time)" >&2; exit 2; }
ls python/vtensor/_vtensor*.so > /dev/null 2>&1 || { echo "device_package: no python/vtensor/_vtensor*.so: configure $B with python3-dev and pybind11-dev so that $B/libvtensor.a is position independent" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/bench" "$stage/build-dev/lib"
cp "$B/vtensor" "$B/vtensor_cuda_tests" "$stage/build/"
cp "$B/bench/vtensor_swap_bandwidth" "$stage/build/bench/"
cp "$B/vtensor_cuda_tests[1]_include.cmake" "$B/vtensor_cuda_tests[1]_tests.cmake" "$stage/build/"
# The test files name the binaries by absolute path: the command there links this checkout's path to
# the copy it runs in (ln -s "$PWD" $(pwd of this checkout)).
echo "include(\"$(pwd)/$B/vtensor_cuda_tests[1]_include.cmake\")" > "$stage/build/CTestTestfile.cmake"
# What the GPU image lacks: every library of the binaries outside glibc, libstdc++, CUDA and cuDNN.
ldd "$B/vtensor" "$B/vtensor_cuda_tests" | awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libz|libbz2)\.so|/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" "$stage/build-dev/lib/"; done
cp "$B/libvtensor.a" "$stage/build-dev/lib/"
mkdir -p "$stage/build-dev/include"
cp -r /usr/include/nlohmann "$stage/build-dev/include/"
mkdir -p build-dev
tar czf build-dev/pkg.tar.gz -C "$stage" build build-dev
echo "wrote build-dev/pkg.tar.gz ($(du -h build-dev/pkg.tar.gz | cut -f1)): $(ls "$stage/build-dev/lib" | tr '\n' ' ')"
