// Every file vtensor reads (reports for view and --auto-plan, --gpu-file, --densities, traces and
// DTR logs) goes through here, so that no input can crash a run or take unbounded memory:
//  - read_input(): a regular file, character device or FIFO of at most kMaxInputBytes (a folder or
//    a larger input is refused naming it); /dev/zero stops at the limit.
//  - parse_json(): nlohmann's parser with a nesting limit (kMaxJsonDepth: a document nested 10^5
//    deep crashed the readers that walked it) and finite numbers only (1e400).
//  - read_line(): one line of a JSON-lines file, at most kMaxLineBytes.
// Every failure is std::invalid_argument naming the input (the CLI's exit 2).
#pragma once
#include <cstddef>
#include <istream>
#include <nlohmann/json.hpp>
#include <string>

namespace vtensor {

constexpr size_t kMaxInputBytes = size_t{256} << 20;  // one JSON document
constexpr size_t kMaxLineBytes = size_t{64} << 20;    // one line of a trace (its first holds the whole graph)
constexpr int kMaxJsonDepth = 64;                     // nesting of objects and arrays; vtensor's own files use <= 6

std::string read_input(const std::string& path, const std::string& what, size_t max_bytes = kMaxInputBytes);
nlohmann::json parse_json(const std::string& text, const std::string& what);
nlohmann::json read_json(const std::string& path, const std::string& what);
// The next line of `in` into `line` (false at the end); `lineno` names it in the message.
bool read_line(std::istream& in, std::string& line, const std::string& what, size_t lineno,
               size_t max_bytes = kMaxLineBytes);

}  // namespace vtensor
