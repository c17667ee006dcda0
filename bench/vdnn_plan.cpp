// vDNN's memory at paper scale without a device: the planned peak and mean allocated bytes of
// one training iteration (the executor's allocation sequence replayed over the graph, which the
// e2e tests check equals the measured peak) under none and each vDNN configuration, as CSV.
// Usage: vtensor_vdnn_plan [--inplace-relu-grad] vgg16:64 vgg16:256 resnet50:32 ...
#include <cstdio>
#include <string>

#include "vtensor/models/models.h"
#include "vtensor/policy/vdnn.h"

using namespace vtensor;

int main(int argc, char** argv) {
  std::printf("model,batch,offload,conv_algorithm,offloaded_bytes,peak_bytes,peak_vs_none,mean_bytes,mean_vs_none,persistent_bytes,peak_op\n");
  bool inplace = false;
  for (int i = 1; i < argc; ++i) {
    const std::string spec = argv[i];
    if (spec == "--inplace-relu-grad") {  // applies to the models after it
      inplace = true;
      continue;
    }
    ModelConfig c;
    c.name = spec.substr(0, spec.find(':'));
    c.batch = spec.find(':') == std::string::npos ? 0 : std::stoi(spec.substr(spec.find(':') + 1));
    c = resolve_model(c);
    Graph g = build_model(c);
    build_backward(g, {});
    if (inplace) share_relu_gradients(g);
    const PlannedMemory none = predict_memory(g, {}, {});
    for (auto [offload, algo] : {std::pair{VdnnOffload::kNone, ConvAlgo::kFast}, {VdnnOffload::kConv, ConvAlgo::kFast},
                                 {VdnnOffload::kAll, ConvAlgo::kFast}, {VdnnOffload::kConv, ConvAlgo::kLean},
                                 {VdnnOffload::kAll, ConvAlgo::kLean}}) {
      const VdnnPlan p = plan_vdnn(g, offload);
      const PlannedMemory m = predict_memory(g, p.plan, conv_algorithms_for(g, algo));
      std::printf("%s,%d,%s,%s,%zu,%zu,%.3f,%.0f,%.3f,%zu,%s\n", c.name.c_str(), c.batch, to_string(offload), to_string(algo),
                  p.offloaded_bytes(), m.peak, double(m.peak) / double(none.peak), m.mean, m.mean / none.mean,
                  g.persistent_bytes(), m.peak_op >= 0 ? g.op(m.peak_op).name.c_str() : "init");
    }
  }
  return 0;
}
