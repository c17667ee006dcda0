// Policies by name. Each policy file registers here; the CLI and the tests list them from it.
#include "vtensor/policy/registry.h"

#include <stdexcept>

#include "vtensor/policy/auto/auto.h"
#include "vtensor/policy/capuchin.h"
#include "vtensor/policy/checkpoint.h"
#include "vtensor/policy/compress.h"
#include "vtensor/policy/dtr.h"
#include "vtensor/policy/lru.h"
#include "vtensor/policy/none.h"
#include "vtensor/policy/um.h"
#include "vtensor/policy/vdnn.h"
#include "vtensor/policy/zero_overhead_swap.h"

namespace vtensor {

const std::vector<PolicyInfo>& policy_registry() {
  static const std::vector<PolicyInfo> registry = {
      {"none", "keep every tensor on the device; OutOfMemoryError when the budget is too small",
       [] { return std::make_unique<NonePolicy>(); }},
      {"lru", "passive: on OOM swap the least-recently-used tensors to host, swap back in on access",
       [] { return std::make_unique<LruPolicy>(EvictAction::kSwap); }},
      {"lru-recompute", "passive: on OOM drop the least-recently-used recomputable tensors (swap what cannot be recomputed), recompute on access",
       [] { return std::make_unique<LruPolicy>(EvictAction::kDrop); }},
      {"vdnn-all", "vDNN: offload every layer's input feature map after its last forward use, prefetch one layer ahead in backward",
       [] { return std::make_unique<VdnnPolicy>(VdnnPolicy::Variant::kAll); }},
      {"vdnn-conv", "vDNN: offload the input feature maps of conv layers only, prefetch one conv layer ahead in backward",
       [] { return std::make_unique<VdnnPolicy>(VdnnPolicy::Variant::kConv); }},
      {"vdnn-dyn", "vDNN: plan each configuration, take the first that fits (no offload, conv, all; then lean conv algorithms)",
       [] { return std::make_unique<VdnnPolicy>(VdnnPolicy::Variant::kDyn); }},
      {"capuchin-swap", "Capuchin: measured iteration, then planned swaps with prefetch triggers from the access trace",
       [] { return std::make_unique<CapuchinPolicy>(CapuchinMode::kSwap); }},
      {"capuchin-recompute", "Capuchin: measured iteration, then planned drops ranked by memory saved per second of recompute",
       [] { return std::make_unique<CapuchinPolicy>(CapuchinMode::kRecompute); }},
      {"capuchin", "Capuchin hybrid: hidden swaps first, then per tensor the cheaper of swap and recompute",
       [] { return std::make_unique<CapuchinPolicy>(CapuchinMode::kHybrid); }},
      {"checkpoint", "Chen et al.'s gradient checkpointing: segments searched for the lowest peak (or --checkpoint-segments N of layers), keep their outputs, drop the rest after forward, recompute in backward; no eviction on demand",
       [] { return std::make_unique<CheckpointPolicy>(); }},
      {"compress", "FreeLunch: measured iteration, then ReLU / max-pool outputs compressed on the device (bitmask + values, 1 bit where only the sign is read) after their last forward use, decompressed ahead of backward; passive swap as last resort",
       [] { return std::make_unique<CompressPolicy>(); }},
      {"compress+swap", "FreeLunch hybrid: compress as `compress`, then Capuchin-planned async swaps for what compression leaves over the budget",
       [] { return std::make_unique<CompressPolicy>(CapuchinMode::kSwap); }},
      {"compress+capuchin", "ours: compress as `compress`, then Capuchin's hybrid (swap or recompute per tensor) for what compression leaves over the budget",
       [] { return std::make_unique<CompressPolicy>(CapuchinMode::kHybrid); }},
      {"dtr", "DTR: on OOM drop the smallest cost / (bytes x staleness), recompute on access; no planning",
       [] { return std::make_unique<DtrPolicy>(); }},
      {"zero-overhead-swap", "Zhang et al.: after one measured iteration, swap only blocks whose copies hide in their absence across the peak; reports the peak reached",
       [] { return std::make_unique<ZeroOverheadSwapPolicy>(false); }},
      {"zero-overhead-swap-limit", "Zhang et al., stick-to-limit: planned swaps until the predicted peak meets the budget, stalling where copies cannot hide",
       [] { return std::make_unique<ZeroOverheadSwapPolicy>(true); }},
      {"um", "unified memory: tensors in a managed range paged to the device on fault, least-recently-used pages evicted (--um-page-size)",
       [] { return std::make_unique<UmPolicy>(false); }},
      {"um-prefetch", "DeepUM: unified memory with a correlation table of kernels and pages, prefetch of the next --um-lookahead kernels' pages, pre-eviction, invalidation of freed pages",
       [] { return std::make_unique<UmPolicy>(true); }},
      {"auto", "ours: after a measured iteration, rehearse each planner (Capuchin hybrid / recompute / swap, checkpointing, DTR, passive recompute; compression + Capuchin where densities are known) on the sim model of that iteration (same arena, copy queues, compute stream) and run the fastest that fits",
       [] { return std::make_unique<AutoPolicy>(); }},
  };
  return registry;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& p : policy_registry()) names.push_back(p.name);
  return names;
}

std::unique_ptr<Policy> make_policy(const std::string& name) {
  for (const auto& p : policy_registry())
    if (p.name == name) return p.make();
  std::string accepted;
  for (const auto& n : policy_names()) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown policy '" + name + "'; accepted: " + accepted);
}

}  // namespace vtensor
