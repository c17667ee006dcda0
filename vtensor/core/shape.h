#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace vtensor {

// Dimensions, outermost first (NCHW for images).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims_(d) {}
  explicit Shape(std::vector<int64_t> d) : dims_(std::move(d)) {}

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_.at(i); }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  std::string str() const {
    std::string s = "[";
    for (size_t i = 0; i < dims_.size(); ++i) s += (i ? "," : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::vector<int64_t> dims_;
};

}  // namespace vtensor
