#include "vtensor/memory/plan.h"

namespace vtensor {

std::vector<std::vector<Action>> actions_by_op(const Plan& plan, size_t num_ops) {
  std::vector<std::vector<Action>> at(num_ops);
  for (const Action& a : plan.actions)
    if (a.op >= 0 && static_cast<size_t>(a.op) < num_ops) at[static_cast<size_t>(a.op)].push_back(a);
  return at;
}

const char* to_string(ActionKind k) {
  switch (k) {
    case ActionKind::kSwapOut: return "swap_out";
    case ActionKind::kPrefetch: return "prefetch";
    case ActionKind::kDrop: return "drop";
    case ActionKind::kCompress: return "compress";
  }
  return "?";
}

std::vector<Action> Plan::at(int op) const {
  std::vector<Action> out;
  for (const auto& a : actions)
    if (a.op == op) out.push_back(a);
  return out;
}

std::string Plan::str() const {
  std::string s;
  for (const auto& a : actions) {
    s += std::string(to_string(a.kind)) + " t" + std::to_string(a.tensor) + " after op " + std::to_string(a.op);
    if (a.kind == ActionKind::kCompress) s += std::string(" (") + to_string(a.codec) + ", " + std::to_string(a.capacity) + " bytes)";
    if ((a.kind == ActionKind::kSwapOut || a.kind == ActionKind::kCompress) && a.free_after != Action::kDefaultRelease)
      s += ", freed after op " + std::to_string(a.free_after);
    s += "\n";
  }
  return s;
}

}  // namespace vtensor
