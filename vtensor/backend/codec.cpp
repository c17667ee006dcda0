#include "vtensor/backend/codec.h"

#include <stdexcept>

namespace vtensor {

const char* to_string(Codec c) {
  switch (c) {
    case Codec::kNone: return "none";
    case Codec::kBitmask: return "bitmask";
    case Codec::kSign: return "sign";
  }
  return "?";
}

Codec parse_codec(const std::string& name) {
  if (name == "bitmask") return Codec::kBitmask;
  if (name == "sign") return Codec::kSign;
  throw std::invalid_argument("unknown codec '" + name + "'; accepted: bitmask, sign");
}

}  // namespace vtensor
