#include "vtensor/backend/codec.h"

#include <stdexcept>

namespace vtensor {

const char* to_string(Codec c) {
  switch (c) {
    case Codec::kNone: return "none";
    case Codec::kBitmask: return "bitmask";
    case Codec::kSign: return "sign";
    case Codec::kBf16: return "bf16";
    case Codec::kFp16: return "fp16";
    case Codec::kInt8: return "int8";
  }
  return "?";
}

Codec parse_codec(const std::string& name) {
  if (name == "bitmask") return Codec::kBitmask;
  if (name == "sign") return Codec::kSign;
  throw std::invalid_argument("unknown codec '" + name + "'; accepted: bitmask, sign");
}

Codec parse_lossy(const std::string& name) {
  if (name == "bf16") return Codec::kBf16;
  if (name == "fp16") return Codec::kFp16;
  if (name == "int8") return Codec::kInt8;
  throw std::invalid_argument("unknown lossy mode '" + name + "'; accepted: bf16, fp16, int8");
}

}  // namespace vtensor
