// The model zoo: each model builds its forward graph (ending in a loss) for a batch, input
// resolution, width and class count. Tiny presets train in seconds on two cores.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "vtensor/core/graph.h"

namespace vtensor {

struct ModelConfig {
  std::string name;
  int batch = 0;        // 0: the preset's default
  int image_size = 0;   // input height = width (features for mlp)
  int width = 0;        // base channel count (hidden units for mlp)
  int classes = 0;
  uint64_t seed = 1;    // data and dropout seeds
};

struct ModelInfo {
  std::string name;
  std::string description;
  int batch, image_size, width, classes;  // defaults
  std::function<void(class GraphBuilder&, const ModelConfig&)> build;
};

const std::vector<ModelInfo>& model_registry();
std::vector<std::string> model_names();
// Fills the preset's defaults into cfg (throws std::invalid_argument for unknown names or bad sizes).
ModelConfig resolve_model(ModelConfig cfg);
// Forward graph with its loss; call build_backward() next.
Graph build_model(const ModelConfig& cfg);

}  // namespace vtensor
