#!/usr/bin/env bash
# Packs what bench/cuda_bench.sh needs to run on a GPU machine whose image has CUDA, cmake and
# PyTorch but not Debian's OpenBLAS, Clp or GoogleTest: the binaries built here with CUDA (same
# nvcc major version as there), the cuda tests' ctest files, and the shared libraries the image
# lacks; and for the Python module, built there by scripts/device_python.sh with that machine's
# Python, the core library (build/libvtensor.so) and nlohmann-json's headers. Writes build-dev/pkg.tar.gz (ignored by git, about 22 MB). On the GPU machine, from the
# repository root (docs/benchmarks.md, "On a GPU machine"):
#   tar xzf build-dev/pkg.tar.gz && export LD_LIBRARY_PATH=$PWD/build-dev/lib:...
#   VTENSOR_PREBUILT=1 bash bench/cuda_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
for f in "$B/vtensor" "$B/vtensor_cuda_tests" "$B/vtensor_cuda_internal_tests" "$B/bench/vtensor_swap_bandwidth"; do
  [ -x "$f" ] || { echo "device_package: $f is missing: build with -DVTENSOR_BUILD_BENCH=ON first (scripts/install.sh, then cmake --build $B)" >&2; exit 2; }
done
[ -f "$B/libvtensor_cuda.so" ] || { echo "device_package: $B/libvtensor_cuda.so is missing: this build has no cuda backend (nvcc or cuDNN not found at configure time)" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/bench" "$stage/build-dev/lib"
# The core and the cuda backend's libraries stay beside the binaries: their run path names this
# build directory, and the core loads the backend from its own directory.
cp "$B/vtensor" "$B/vtensor_cuda_tests" "$B/vtensor_cuda_internal_tests" "$B/libvtensor.so" "$B/libvtensor_cuda.so" "$stage/build/"
cp "$B/bench/vtensor_swap_bandwidth" "$stage/build/bench/"
: > "$stage/build/CTestTestfile.cmake"
for t in vtensor_cuda_tests vtensor_cuda_internal_tests; do
  cp "$B/$t[1]_include.cmake" "$B/$t[1]_tests.cmake" "$stage/build/"
  # The test files name the binaries by absolute path: the command there links this checkout's path to
  # the copy it runs in (ln -s "$PWD" $(pwd of this checkout)).
  echo "include(\"$(pwd)/$B/$t[1]_include.cmake\")" >> "$stage/build/CTestTestfile.cmake"
done
# What the GPU image lacks: every library of the binaries outside glibc, libstdc++, CUDA and cuDNN.
ldd "$B/vtensor" "$B/vtensor_cuda_tests" "$B/libvtensor_cuda.so" | awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libz|libbz2)\.so|/usr/local/cuda|/libvtensor' |
  while read -r lib; do cp -L "$lib" "$stage/build-dev/lib/"; done
mkdir -p "$stage/build-dev/include"
cp -r /usr/include/nlohmann "$stage/build-dev/include/"
mkdir -p build-dev
tar czf build-dev/pkg.tar.gz -C "$stage" build build-dev
echo "wrote build-dev/pkg.tar.gz ($(du -h build-dev/pkg.tar.gz | cut -f1)): $(ls "$stage/build-dev/lib" | tr '\n' ' ')"
