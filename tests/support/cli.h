// Runs the vtensor command (VTENSOR_BINARY, set by CMake) for CLI tests: exit code and the
// combined stdout + stderr; temporary paths unique to the test process.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace vtensor::test {

struct CliResult {
  int code;
  std::string output;
};

inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(VTENSOR_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A path in the temp directory, unique to this process: vtensor_<tag>_<pid>_<name>.
inline std::string temp_path(const std::string& tag, const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("vtensor_" + tag + "_" + std::to_string(getpid()) + "_" + name))
      .string();
}

}  // namespace vtensor::test
