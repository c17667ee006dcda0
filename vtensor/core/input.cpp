#include "vtensor/core/input.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "vtensor/core/errors.h"

namespace fs = std::filesystem;

namespace vtensor {

std::string read_input(const std::string& path, const std::string& what, size_t max_bytes) {
  std::error_code ec;
  const fs::file_status s = fs::status(path, ec);
  if (!fs::exists(s)) throw std::invalid_argument("cannot read " + what + " (is it there?)");
  if (fs::is_directory(s)) throw std::invalid_argument(what + " is a folder; accepted: a file");
  if (!fs::is_regular_file(s) && !fs::is_character_file(s) && !fs::is_fifo(s))
    throw std::invalid_argument(what + " is neither a regular file, a character device nor a FIFO");
  if (fs::is_regular_file(s) && fs::file_size(path, ec) > max_bytes)
    throw std::invalid_argument(what + " is larger than " + format_bytes(max_bytes) + ", the most an input may be");
  if (!fs::is_regular_file(s)) max_bytes = std::min(max_bytes, kMaxInputBytes);  // /dev/zero ends somewhere
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read " + what);
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes)
      throw std::invalid_argument(what + " is larger than " + format_bytes(max_bytes) + ", the most an input may be");
  }
  return text;
}

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  using json = nlohmann::json;
  const json::parser_callback_t limits = [&](int depth, json::parse_event_t event, json& value) {
    if (depth > kMaxJsonDepth)
      throw std::invalid_argument(what + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
                                  " levels; accepted: vtensor's JSON, a few levels deep");
    if (event == json::parse_event_t::value && value.is_number_float() && !std::isfinite(value.get<double>()))
      throw std::invalid_argument(what + ": a number out of range (" + value.dump() + ")");
    return true;
  };
  try {
    return json::parse(text, limits);
  } catch (const json::exception& e) {
    throw std::invalid_argument(what + " is not JSON: " + e.what());
  }
}

nlohmann::json read_json(const std::string& path, const std::string& what) { return parse_json(read_input(path, what), what); }

bool read_line(std::istream& in, std::string& line, const std::string& what, size_t lineno, size_t max_bytes) {
  line.clear();
  std::streambuf* sb = in.rdbuf();
  if (!sb) return false;
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      return !line.empty();
    }
    if (c == '\n') return true;
    if (line.size() >= max_bytes)
      throw std::invalid_argument(what + " line " + std::to_string(lineno) + ": longer than " + format_bytes(max_bytes) +
                                  " with no end of line; accepted: JSON lines, one record a line");
    line.push_back(static_cast<char>(c));
  }
}

}  // namespace vtensor
