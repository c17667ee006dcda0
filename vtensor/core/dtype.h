#pragma once
#include <cstddef>
#include <string>

namespace vtensor {

enum class DType { kF32 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
  }
  return 0;
}
inline std::string to_string(DType t) { return t == DType::kF32 ? "f32" : "?"; }

}  // namespace vtensor
