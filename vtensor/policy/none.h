#pragma once
#include "vtensor/memory/policy.h"

namespace vtensor {

class NonePolicy final : public Policy {
 public:
  std::string name() const override { return "none"; }
  std::vector<Victim> choose_victims(size_t bytes, const MemoryView& view) override;
};

}  // namespace vtensor
