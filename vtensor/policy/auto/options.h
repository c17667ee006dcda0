// Policy auto's command-line options (--auto-*) and the registry's maker: each flag read,
// checked and applied to the AutoPolicy it makes (auto.h has what each setter does).
#pragma once
#include <memory>
#include <vector>

#include "vtensor/memory/policy.h"
#include "vtensor/policy/options.h"

namespace vtensor {

const std::vector<PolicyOption>& auto_options();
std::unique_ptr<Policy> make_auto_policy(const PolicyOptions& options);

}  // namespace vtensor
