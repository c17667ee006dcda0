#include "vtensor/ops/op.h"

namespace vtensor {

OpFamily op_family(OpKind k) {
  switch (k) {
    case OpKind::kData:
    case OpKind::kTokenData: return OpFamily::kData;
    case OpKind::kConv2d:
    case OpKind::kConv2dBwdData:
    case OpKind::kConv2dBwdFilter: return OpFamily::kConv;
    case OpKind::kBatchNorm:
    case OpKind::kBatchNormBwd:
    case OpKind::kLayerNorm:
    case OpKind::kLayerNormBwd: return OpFamily::kNorm;
    case OpKind::kMaxPool:
    case OpKind::kMaxPoolBwd:
    case OpKind::kGlobalAvgPool:
    case OpKind::kGlobalAvgPoolBwd: return OpFamily::kPool;
    case OpKind::kLinear:
    case OpKind::kLinearBwd: return OpFamily::kLinear;
    case OpKind::kBatchedMatmul:
    case OpKind::kBatchedMatmulBwd: return OpFamily::kMatmul;
    case OpKind::kRelu:
    case OpKind::kReluBwd:
    case OpKind::kAdd:
    case OpKind::kDropout:
    case OpKind::kDropoutBwd:
    case OpKind::kGelu:
    case OpKind::kGeluBwd: return OpFamily::kElementwise;
    case OpKind::kFlatten:
    case OpKind::kReshapeBwd:
    case OpKind::kReshape:
    case OpKind::kTranspose: return OpFamily::kLayout;
    case OpKind::kSoftmaxCE:
    case OpKind::kSoftmaxCEBwd:
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxBwd: return OpFamily::kSoftmax;
    case OpKind::kEmbedding:
    case OpKind::kEmbeddingBwd: return OpFamily::kEmbedding;
    case OpKind::kSgdMomentum:
    case OpKind::kAdam: return OpFamily::kOptimizer;
    case OpKind::kReplay: return OpFamily::kReplay;
  }
  return OpFamily::kReplay;
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kData: return "data";
    case OpKind::kConv2d: return "conv2d";
    case OpKind::kConv2dBwdData: return "conv2d_bwd_data";
    case OpKind::kConv2dBwdFilter: return "conv2d_bwd_filter";
    case OpKind::kBatchNorm: return "batchnorm";
    case OpKind::kBatchNormBwd: return "batchnorm_bwd";
    case OpKind::kRelu: return "relu";
    case OpKind::kReluBwd: return "relu_bwd";
    case OpKind::kMaxPool: return "maxpool";
    case OpKind::kMaxPoolBwd: return "maxpool_bwd";
    case OpKind::kGlobalAvgPool: return "global_avgpool";
    case OpKind::kGlobalAvgPoolBwd: return "global_avgpool_bwd";
    case OpKind::kLinear: return "linear";
    case OpKind::kLinearBwd: return "linear_bwd";
    case OpKind::kAdd: return "add";
    case OpKind::kFlatten: return "flatten";
    case OpKind::kReshapeBwd: return "reshape_bwd";
    case OpKind::kDropout: return "dropout";
    case OpKind::kDropoutBwd: return "dropout_bwd";
    case OpKind::kSoftmaxCE: return "softmax_ce";
    case OpKind::kSoftmaxCEBwd: return "softmax_ce_bwd";
    case OpKind::kSgdMomentum: return "sgd_momentum";
    case OpKind::kTokenData: return "token_data";
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kEmbeddingBwd: return "embedding_bwd";
    case OpKind::kLayerNorm: return "layernorm";
    case OpKind::kLayerNormBwd: return "layernorm_bwd";
    case OpKind::kGelu: return "gelu";
    case OpKind::kGeluBwd: return "gelu_bwd";
    case OpKind::kBatchedMatmul: return "bmm";
    case OpKind::kBatchedMatmulBwd: return "bmm_bwd";
    case OpKind::kSoftmax: return "softmax";
    case OpKind::kSoftmaxBwd: return "softmax_bwd";
    case OpKind::kReshape: return "reshape";
    case OpKind::kTranspose: return "transpose";
    case OpKind::kAdam: return "adam";
    case OpKind::kReplay: return "replay";
  }
  return "?";
}

const char* to_string(ConvAlgo a) { return a == ConvAlgo::kLean ? "lean" : "fast"; }

bool is_recomputable(const Op& op) { return !op.backward && !op.optimizer; }

}  // namespace vtensor
