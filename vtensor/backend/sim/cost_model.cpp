#include "vtensor/backend/sim/cost_model.h"

#include "vtensor/backend/backend.h"

#include <algorithm>

namespace vtensor {

KindEfficiency efficiency(OpKind k) {
  switch (k) {
    // Convolutions (implicit GEMM / Winograd in cuDNN) and GEMMs are compute bound at training
    // batch sizes; backward-filter kernels reach a little less than forward ones.
    case OpKind::kConv2d:
    case OpKind::kConv2dBwdData: return {0.60, 0.80};
    case OpKind::kConv2dBwdFilter: return {0.50, 0.80};
    case OpKind::kLinear:
    case OpKind::kLinearBwd:
    case OpKind::kBatchedMatmul:     // cuBLAS strided-batched GEMM: attention's QK^T and PV
    case OpKind::kBatchedMatmulBwd: return {0.70, 0.80};
    // Reductions over the batch read their input more than once.
    case OpKind::kBatchNorm:
    case OpKind::kBatchNormBwd: return {0.50, 0.60};
    case OpKind::kSoftmaxCE:
    case OpKind::kSoftmaxCEBwd: return {0.50, 0.50};
    // Row-wise kernels (one row per block, the row stays on chip) and gathers / scatters read
    // their input once: memory bound like element-wise ops. Listed so a new kind is a choice.
    case OpKind::kLayerNorm:
    case OpKind::kLayerNormBwd:
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxBwd:
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingBwd:
    case OpKind::kGelu:
    case OpKind::kGeluBwd:
    case OpKind::kTranspose:
    case OpKind::kAdam: return {0.50, 0.80};
    default: return {0.50, 0.80};  // element-wise, pooling, copies, optimizer: memory bound
  }
}

OpCost predict_op(const GpuSpec& gpu, const Graph& g, const Op& op, ConvAlgo algo) {
  OpCost c;
  if (op.kind == OpKind::kReplay) {
    c.recorded = true;
    c.total_ms = op.recorded_ms;
    return c;
  }
  if (op.kind == OpKind::kReshape) return c;  // a view: no kernel, no bytes, no launch
  if (op.kind == OpKind::kEmbedding) {
    // A gather reads the rows it copies (and the ids), not the whole table.
    c.bytes = 2.0 * static_cast<double>(g.tensor(op.outputs[0]).bytes());
    if (op.inputs.size() > 1) c.bytes += static_cast<double>(g.tensor(op.inputs[1]).bytes());
  } else {
    for (TensorId in : op.inputs) c.bytes += static_cast<double>(g.tensor(in).bytes());
    for (TensorId w : op.inplace) c.bytes += static_cast<double>(g.tensor(w).bytes());  // written back
    for (TensorId out : op.outputs) c.bytes += static_cast<double>(g.tensor(out).bytes());
  }
  c.flops = op.flops;
  KindEfficiency e = efficiency(op.kind);
  const bool conv = op.kind == OpKind::kConv2d || op.kind == OpKind::kConv2dBwdData || op.kind == OpKind::kConv2dBwdFilter;
  if (conv && algo == ConvAlgo::kLean) e.compute *= kLeanConvSpeed;
  // A calibrated GPU (GpuSpec::kind_scale) scales the whole op, launch included, as it was fitted.
  const double s = gpu.kind_scale.empty() ? 1.0 : gpu.kind_scale.at(static_cast<size_t>(op.kind));
  c.compute_ms = s * c.flops / (gpu.fp32_tflops * 1e12 * e.compute) * 1e3;
  c.memory_ms = s * c.bytes / (gpu.hbm_gbps * 1e9 * e.memory) * 1e3;
  c.launch_ms = s * gpu.launch_us * 1e-3;
  c.total_ms = c.launch_ms + std::max(c.compute_ms, c.memory_ms);
  return c;
}

double predict_copy_ms(const GpuSpec& gpu, size_t bytes, bool to_device) {
  const double gbps = to_device ? gpu.h2d_gbps : gpu.d2h_gbps;
  const double efficiency = gpu.link_efficiency > 0 ? gpu.link_efficiency : kLinkEfficiency;
  return static_cast<double>(bytes) / (gbps * 1e9 * efficiency) * 1e3;
}

double predict_staged_moves_ms(const GpuSpec& gpu, size_t bytes) {
  return 2 * gpu.launch_us * 1e-3 + 2 * 2.0 * static_cast<double>(bytes) / (gpu.hbm_gbps * 1e9 * 0.8) * 1e3;
}

double predict_move_ms(const GpuSpec& gpu, size_t bytes, size_t distance) {
  const Backend::MoveCopies c = Backend::move_copies(bytes, distance ? distance : bytes);
  return static_cast<double>(c.calls) * gpu.launch_us * 1e-3 +
         2.0 * static_cast<double>(c.bytes) / (gpu.hbm_gbps * 1e9 * 0.8) * 1e3;
}

double predict_codec_ms(const GpuSpec& gpu, size_t bytes_read, size_t bytes_written) {
  const double bytes = static_cast<double>(bytes_read) + static_cast<double>(bytes_written);
  return gpu.launch_us * 1e-3 + bytes / (gpu.hbm_gbps * 1e9 * efficiency(OpKind::kRelu).memory) * 1e3;
}

}  // namespace vtensor
