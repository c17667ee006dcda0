// Policies by name. Each policy file registers here; the CLI and the tests list them from it.
#include "vtensor/policy/registry.h"

#include <algorithm>
#include <stdexcept>

#include "vtensor/policy/auto/options.h"
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
       {}, [](const PolicyOptions&) { return std::make_unique<NonePolicy>(); }},
      {"lru", "passive: on OOM swap the least-recently-used tensors to host, swap back in on access",
       {}, [](const PolicyOptions&) { return std::make_unique<LruPolicy>(EvictAction::kSwap); }},
      {"lru-recompute", "passive: on OOM drop the least-recently-used recomputable tensors (swap what cannot be recomputed), recompute on access",
       {}, [](const PolicyOptions&) { return std::make_unique<LruPolicy>(EvictAction::kDrop); }},
      {"vdnn-all", "vDNN: offload every layer's input feature map after its last forward use, prefetch one layer ahead in backward",
       {}, [](const PolicyOptions&) { return std::make_unique<VdnnPolicy>(VdnnPolicy::Variant::kAll); }},
      {"vdnn-conv", "vDNN: offload the input feature maps of conv layers only, prefetch one conv layer ahead in backward",
       {}, [](const PolicyOptions&) { return std::make_unique<VdnnPolicy>(VdnnPolicy::Variant::kConv); }},
      {"vdnn-dyn", "vDNN: plan each configuration, take the first that fits (no offload, conv, all; then lean conv algorithms)",
       {}, [](const PolicyOptions&) { return std::make_unique<VdnnPolicy>(VdnnPolicy::Variant::kDyn); }},
      {"capuchin-swap", "Capuchin: measured iteration, then planned swaps with prefetch triggers from the access trace",
       {}, [](const PolicyOptions&) { return std::make_unique<CapuchinPolicy>(CapuchinMode::kSwap); }},
      {"capuchin-recompute", "Capuchin: measured iteration, then planned drops ranked by memory saved per second of recompute",
       {}, [](const PolicyOptions&) { return std::make_unique<CapuchinPolicy>(CapuchinMode::kRecompute); }},
      {"capuchin", "Capuchin hybrid: hidden swaps first, then per tensor the cheaper of swap and recompute",
       {}, [](const PolicyOptions&) { return std::make_unique<CapuchinPolicy>(CapuchinMode::kHybrid); }},
      {"checkpoint", "Chen et al.'s gradient checkpointing: segments searched for the lowest peak (or --checkpoint-segments N of layers), keep their outputs, drop the rest after forward, recompute in backward; no eviction on demand",
       checkpoint_options(), make_checkpoint_policy},
      {"compress", "FreeLunch: measured iteration, then ReLU / max-pool outputs compressed on the device (bitmask + values, 1 bit where only the sign is read) after their last forward use, decompressed ahead of backward; passive swap as last resort",
       compress_options(), [](const PolicyOptions& o) { return make_compress_policy(std::nullopt, o); }},
      {"compress+swap", "FreeLunch hybrid: compress as `compress`, then Capuchin-planned async swaps for what compression leaves over the budget",
       compress_options(), [](const PolicyOptions& o) { return make_compress_policy(CapuchinMode::kSwap, o); }},
      {"compress+capuchin", "ours: compress as `compress`, then Capuchin's hybrid (swap or recompute per tensor) for what compression leaves over the budget",
       compress_options(), [](const PolicyOptions& o) { return make_compress_policy(CapuchinMode::kHybrid, o); }},
      {"dtr", "DTR: on OOM drop the smallest cost / (bytes x staleness), recompute on access; no planning",
       {}, [](const PolicyOptions&) { return std::make_unique<DtrPolicy>(); }},
      {"zero-overhead-swap", "Zhang et al.: after one measured iteration, swap only blocks whose copies hide in their absence across the peak; reports the peak reached",
       {}, [](const PolicyOptions&) { return std::make_unique<ZeroOverheadSwapPolicy>(false); }},
      {"zero-overhead-swap-limit", "Zhang et al., stick-to-limit: planned swaps until the predicted peak meets the budget, stalling where copies cannot hide",
       {}, [](const PolicyOptions&) { return std::make_unique<ZeroOverheadSwapPolicy>(true); }},
      {"um", "unified memory: tensors in a managed range paged to the device on fault, least-recently-used pages evicted (--um-page-size)",
       um_options(false), [](const PolicyOptions& o) { return make_um_policy(false, o); }},
      {"um-prefetch", "DeepUM: unified memory with a correlation table of kernels and pages, prefetch of the next --um-lookahead kernels' pages, pre-eviction, invalidation of freed pages",
       um_options(true), [](const PolicyOptions& o) { return make_um_policy(true, o); }},
      {"auto", "ours: after a measured iteration, rehearse each planner (Capuchin hybrid / recompute / swap, checkpointing, DTR, passive recompute; compression + Capuchin where densities are known) on the sim model of that iteration (same arena, copy queues, compute stream) and run the fastest that fits",
       auto_options(), make_auto_policy},
  };
  return registry;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& p : policy_registry()) names.push_back(p.name);
  return names;
}

const PolicyInfo& find_policy(const std::string& name) {
  for (const auto& p : policy_registry())
    if (p.name == name) return p;
  std::string accepted;
  for (const auto& n : policy_names()) accepted += (accepted.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown policy '" + name + "'; accepted: " + accepted);
}

std::vector<PolicyOption> policy_options() {
  std::vector<PolicyOption> all;
  for (const auto& p : policy_registry())
    for (const auto& o : p.options)
      if (std::none_of(all.begin(), all.end(), [&](const PolicyOption& x) { return x.flag == o.flag; })) all.push_back(o);
  return all;
}

namespace {

bool declares(const PolicyInfo& p, const std::string& flag) {
  return std::any_of(p.options.begin(), p.options.end(), [&](const PolicyOption& o) { return o.flag == flag; });
}

// "--F applies to --policy a or b only": the policies that declare the flag.
std::string applies_to(const std::string& flag) {
  std::vector<std::string> names;
  for (const auto& p : policy_registry())
    if (declares(p, flag)) names.push_back(p.name);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return "--" + flag + " applies to --policy " + (s.empty() ? "none" : s) + " only";
}

}  // namespace

std::unique_ptr<Policy> make_policy(const std::string& name, const PolicyOptions& options) {
  const PolicyInfo& p = find_policy(name);
  for (const auto& [flag, value] : options.values())
    if (!declares(p, flag)) throw std::invalid_argument(applies_to(flag) + ", got --policy " + name);
  return p.make(options);
}

void check_policy_options(const PolicyOptions& options, const std::vector<std::string>& policies) {
  std::string listed;
  for (const auto& n : policies) listed += (listed.empty() ? "" : ",") + n;
  for (const auto& given : options.values()) {
    const std::string& flag = given.first;  // not a structured binding: the lambda captures it
    if (std::none_of(policies.begin(), policies.end(), [&](const std::string& n) { return declares(find_policy(n), flag); }))
      throw std::invalid_argument(applies_to(flag) + ", got --policies " + listed);
  }
  for (const auto& n : policies) make_policy(n, options.only(find_policy(n).options));  // each value checked
}

}  // namespace vtensor
