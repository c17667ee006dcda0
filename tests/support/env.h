// Sets an environment variable for the life of a scope (the child processes and backends a test
// starts read it), then restores what was there before, set or not.
#pragma once
#include <cstdlib>
#include <string>

namespace vtensor::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name), was_set_(std::getenv(name) != nullptr) {
    if (was_set_) old_ = std::getenv(name);
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { was_set_ ? setenv(name_.c_str(), old_.c_str(), 1) : unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool was_set_;
};

}  // namespace vtensor::test
