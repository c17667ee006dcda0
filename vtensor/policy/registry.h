// Policies by name: every policy file registers in registry.cpp; the CLI, the trainer and the
// tests list and make them from here. The extension point itself (Policy, MemoryView) is
// vtensor/memory/policy.h, beside the memory manager that calls it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vtensor/memory/policy.h"
#include "vtensor/policy/options.h"

namespace vtensor {

struct PolicyInfo {
  std::string name;
  std::string description;
  std::vector<PolicyOption> options;  // its own command-line options (options.h)
  std::function<std::unique_ptr<Policy>(const PolicyOptions&)> make;
};

// Policies by name. make_policy throws std::invalid_argument naming the accepted ones, a flag
// in `options` the policy does not declare (naming the policies that do), or a bad value.
const std::vector<PolicyInfo>& policy_registry();
std::unique_ptr<Policy> make_policy(const std::string& name, const PolicyOptions& options = {});
std::vector<std::string> policy_names();
const PolicyInfo& find_policy(const std::string& name);
// Every policy's options, each flag once, in registry order (what the CLI registers).
std::vector<PolicyOption> policy_options();
// A run of several policies (a sweep): a flag none of `policies` declares is refused, naming those
// that do; each policy is then made from the flags it declares (PolicyOptions::only).
void check_policy_options(const PolicyOptions& options, const std::vector<std::string>& policies);

}  // namespace vtensor
