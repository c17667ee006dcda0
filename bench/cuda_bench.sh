#!/usr/bin/env bash
# Everything the cuda backend must show, on a GPU machine, from the repository root:
#   1. build with CUDA (sm_90 unless VTENSOR_CUDA_ARCHS says otherwise) and run the cuda tests;
#   2. swap bandwidth of the backend's swap path against a plain cudaMemcpyAsync of pinned memory;
#   3. ResNet-50, VGG-16 and GPT-2 small under policy none in vtensor and in PyTorch eager (fp32);
#   4. lru at 50% of the unmanaged peak bit-identical to none (deterministic cuDNN algorithms).
# Results go to $OUT_DIR (default bench-out/): CSV and JSON, and the vtensor reports.
set -euo pipefail
OUT_DIR=${OUT_DIR:-bench-out}
ARCHS=${VTENSOR_CUDA_ARCHS:-90}
ITERS=${ITERS:-10}
mkdir -p "$OUT_DIR"

cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DVTENSOR_CUDA_ARCHS="$ARCHS" -DVTENSOR_BUILD_BENCH=ON
cmake --build build -j"$(nproc)" --target vtensor vtensor_cuda_tests vtensor_swap_bandwidth

ctest --test-dir build -L cuda --output-on-failure | tee "$OUT_DIR/cuda_tests.txt"

./build/bench/vtensor_swap_bandwidth 20 | tee "$OUT_DIR/swap_bandwidth.csv"

python3 bench/cuda_vs_pytorch.py --vtensor build/vtensor --iters "$ITERS" --out "$OUT_DIR/cuda_vs_pytorch"

# lru at half the unmanaged peak against none, deterministic algorithms, same seeds.
for model in resnet50 vgg16; do
  ./build/vtensor train --model "$model" --backend cuda --policy none --deterministic --iters 4 --quiet \
    --report "$OUT_DIR/identity_${model}_none.json"
  budget=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['summary']['peak_allocated_bytes']//2)" \
    "$OUT_DIR/identity_${model}_none.json")
  ./build/vtensor train --model "$model" --backend cuda --policy lru --deterministic --iters 4 --quiet \
    --budget "$budget" --report "$OUT_DIR/identity_${model}_lru.json"
  python3 - "$OUT_DIR/identity_${model}_none.json" "$OUT_DIR/identity_${model}_lru.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
la, lb = [i["loss"] for i in a["iterations"]], [i["loss"] for i in b["iterations"]]
same = la == lb
print(f"{a['config']['model']}: none {la}\n  lru at {b['config']['budget_bytes']} B: {lb}\n  bit-identical losses: {same}, "
      f"lru peak {b['summary']['peak_allocated_bytes']} B, time none {a['summary']['mean_iteration_ms']:.1f} ms, "
      f"lru {b['summary']['mean_iteration_ms']:.1f} ms")
sys.exit(0 if same else 1)
PY
done | tee "$OUT_DIR/lru_identity.txt"
