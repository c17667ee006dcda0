// DTR operator logs written by the tests.
#pragma once
#include <fstream>
#include <string>

namespace vtensor::test {

// The start of a small log: the weight w (1 MiB); returns what writes a 1 ms call of `name` on
// `args` (quoted, comma-separated) that makes `result` of `bytes`.
inline auto small_log_start(std::ofstream& out) {
  out << R"({"INSTRUCTION":"ANNOTATE","ANNOTATION":"START"})" "\n"
      << R"({"INSTRUCTION":"CONSTANT","NAME":"w"})" "\n"
      << R"({"INSTRUCTION":"MEMORY","NAME":"w","MEMORY":"1048576"})" "\n";
  return [&out](const char* name, const char* args, const char* result, const char* bytes) {
    out << R"({"INSTRUCTION":"CALL","NAME":")" << name << R"(","ARGS":[)" << args << R"(],"RESULT":[")" << result
        << R"("],"TIME":"1000000"})" "\n"
        << R"({"INSTRUCTION":"MEMORY","NAME":")" << result << R"(","MEMORY":")" << bytes << R"("})" "\n";
  };
}

// A log whose arena fragments at 10 MiB: w (1 MiB) is a weight; a (2), b (3) and c (2) are made in
// that order, b is freed once c exists, leaving a 3 MiB hole and 2 MiB at the end; d (4 MiB) then
// fits the budget (5 + 4 <= 10) but no gap; e reads a, c and d. Passive policies evict to place d;
// a plan that fits compacts once (c slides 2 MiB down into b's hole).
inline void write_fragmenting_log(const std::string& path) {
  std::ofstream out(path);
  const auto call = small_log_start(out);
  call("f", R"("w")", "a", "2097152");
  call("f", R"("w")", "b", "3145728");
  call("f", R"("w")", "c", "2097152");
  out << R"({"INSTRUCTION":"RELEASE","NAME":"b"})" "\n";
  call("g", R"("w")", "d", "4194304");
  call("h", R"("a","c","d")", "e", "65536");
  for (const char* n : {"a", "c", "d", "e"}) out << R"({"INSTRUCTION":"RELEASE","NAME":")" << n << R"("})" "\n";
}

// A log whose request for d (4 MiB, 5 free) finds the free bytes in two holes: [3, 6) where b
// was and [10, 12) at the top of a 12 MiB arena (MiB; w 1, a 2, c 1, x 3 below and between). Sliding
// everything down moves c and x (4 MiB); moving c alone into the top hole makes [3, 7).
inline void write_two_hole_log(const std::string& path) {
  std::ofstream out(path);
  const auto call = small_log_start(out);
  call("f", R"("w")", "a", "2097152");
  call("f", R"("w")", "b", "3145728");
  call("f", R"("w")", "c", "1048576");
  call("f", R"("w")", "x", "3145728");
  out << R"({"INSTRUCTION":"RELEASE","NAME":"b"})" "\n";
  call("g", R"("w")", "d", "4194304");
  call("h", R"("a","c","d","x")", "e", "65536");
  for (const char* n : {"a", "c", "d", "x", "e"}) out << R"({"INSTRUCTION":"RELEASE","NAME":")" << n << R"("})" "\n";
}

}  // namespace vtensor::test
