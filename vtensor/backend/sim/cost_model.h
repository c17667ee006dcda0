// The sim backend's cost model: a roofline per op. An op takes
//   launch overhead + max(FLOPs / (peak FLOP/s x compute efficiency), bytes / (HBM bandwidth x memory efficiency))
// with efficiencies per op kind (cuDNN convolutions and cuBLAS GEMMs reach a fraction of peak;
// element-wise kernels a fraction of bandwidth). Bytes are the op's input and output tensors
// (in-place inputs read and written); a view (reshape) costs nothing, an embedding gather reads
// only the rows it copies. Copies over the host link take bytes / (link bandwidth x
// link efficiency). Replayed ops (OpKind::kReplay) take their recorded time.
// The efficiencies are typical figures, not measured ones. A GPU loaded with a calibration
// (GpuSpec::kind_scale, fitted to op times measured on the device by bench/calibrate_gpu.py)
// scales each op kind's prediction by its factor.
#pragma once
#include <string>

#include "vtensor/backend/sim/gpu_specs.h"
#include "vtensor/core/graph.h"

namespace vtensor {

struct OpCost {
  double flops = 0;
  double bytes = 0;
  double compute_ms = 0;  // FLOPs at the kind's efficiency
  double memory_ms = 0;   // bytes at the kind's efficiency
  double launch_ms = 0;
  double total_ms = 0;
  bool recorded = false;  // a replayed op: total_ms is its recorded time
  const char* bound() const {
    return recorded ? "recorded" : total_ms == 0 ? "none" : compute_ms >= memory_ms ? "compute" : "memory";  // none: a view
  }
};

struct KindEfficiency {
  double compute;  // fraction of peak FP32 FLOP/s
  double memory;   // fraction of HBM bandwidth
};

// Achieved fraction of the host link's theoretical bandwidth with pinned buffers (unless the GPU
// gives its own: GpuSpec::link_efficiency).
constexpr double kLinkEfficiency = 0.8;

// A memory-lean convolution algorithm (no im2col workspace: cuDNN's IMPLICIT_GEMM, the choice
// vDNN's dyn makes when memory is short) reaches this fraction of the fast algorithm's FLOP/s.
// An assumption, like the efficiencies above: vDNN reports the memory-optimal algorithms as
// markedly slower, without one figure for all layers.
constexpr double kLeanConvSpeed = 0.6;

KindEfficiency efficiency(OpKind k);
OpCost predict_op(const GpuSpec& gpu, const Graph& g, const Op& op, ConvAlgo algo = ConvAlgo::kFast);
double predict_copy_ms(const GpuSpec& gpu, size_t bytes, bool to_device);
// A device-to-device move (compaction) of `bytes` by `distance` (0: to another range, no
// overlap), issued as Backend::move_copies says: per copy call a launch, and every byte copied
// read and written. On the H100 a call costs about 6 us however small (docs/benchmarks.md, "A
// compaction's moves"); launch_us stands for it.
double predict_move_ms(const GpuSpec& gpu, size_t bytes, size_t distance = 0);
// A chunk of small moves through the staging buffer (Backend::move_steps): two launches, and the
// bytes read and written twice (gathered, then scattered).
double predict_staged_moves_ms(const GpuSpec& gpu, size_t bytes);
// A compression or decompression kernel: launch, then the bytes it reads and writes at the
// memory efficiency of an element-wise kernel (memory bound, as FreeLunch's codecs are).
double predict_codec_ms(const GpuSpec& gpu, size_t bytes_read, size_t bytes_written);

}  // namespace vtensor
