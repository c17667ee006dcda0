// Policies by name: every policy file registers in registry.cpp; the CLI, the trainer and the
// tests list and make them from here. The extension point itself (Policy, MemoryView) is
// vtensor/memory/policy.h, beside the memory manager that calls it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"

namespace vtensor {

struct PolicyInfo {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Policy>()> make;
};

// Policies by name. make_policy throws std::invalid_argument naming the accepted ones.
const std::vector<PolicyInfo>& policy_registry();
std::unique_ptr<Policy> make_policy(const std::string& name);
std::vector<std::string> policy_names();

}  // namespace vtensor
